"""A run's host effects (``layers.Print``, ``py_func``) happen once, for the attempt that commits,
whatever re-runs or abandons a step (docs/reliability.md, "Exactly once"; lowering/effects.py).

One test per mechanism: a tensor array's room grown (the step runs again), a LoD loop bound grown
(likewise), a memory refusal (checked before the step runs: no re-run) and its careful undonated
path (runs once), an interrupted or bounded ``while`` (abandoned: nothing printed), a failed
run-time check (not committed: nothing printed, ``first_n`` not spent). Fetched values are checked
against NumPy.
"""

from __future__ import annotations

import signal
import time

import jax  # noqa: F401  (before paddle)
import numpy as np
import pytest

import fluidjax as fluid
from fluidjax.lowering import interrupt, memory

L = fluid.layers


class _Calls:
    """A py_func's function that doubles its input and counts its calls."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, a):
        self.n += 1
        return np.asarray(a) * 2


def _doubled(x, func, name: str = "doubled"):
    out = fluid.default_main_program().current_block().create_var(name=name, shape=x.shape, dtype=x.dtype)
    L.py_func(func=func, x=x, out=out)
    return out


def _room_program(func):
    """Print(x) and py_func(2x) outside a loop that writes ``n`` (fed) elements, element k being
    k * sum(2x), into an array whose room starts at 64."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 3], "float32")
        n = fluid.data("n", [1], "int64")
        shown = L.Print(x, message="outside the loop")
        total = L.reshape(L.reduce_sum(_doubled(shown, func)), [1])
        arr = L.create_array("float32")
        i = L.fill_constant([1], "int64", 0)
        cond = L.less_than(i, n)
        loop = L.While(cond)
        with loop.block():
            L.array_write(L.elementwise_mul(total, L.cast(i, "float32")), i=i, array=arr)
            L.increment(i, in_place=True)
            L.less_than(i, n, cond=cond)
        length = L.array_length(arr)
        last = L.array_read(arr, L.fill_constant([1], "int64", 99))
    return main, startup, [length, last, total]


def test_a_run_whose_array_room_grows_prints_and_calls_py_func_once(capfd):
    func = _Calls()
    main, startup, fetch = _room_program(func)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    xv = np.arange(6, dtype="float32").reshape(2, 3)
    capfd.readouterr()
    traces = exe.trace_count
    length, last, total = exe.run(main, feed={"x": xv, "n": np.array([100])}, fetch_list=fetch)
    out = capfd.readouterr().out
    assert exe.trace_count == traces + 2             # the step ran again with the room grown
    assert int(length) == 100
    np.testing.assert_allclose(total, [(2 * xv).sum()])
    np.testing.assert_allclose(last, [99 * (2 * xv).sum()])
    assert func.n == 1
    assert out.count("message: outside the loop") == 1, out
    assert "  - data: [0 1 2 3 4 5]" in out
    # a plain run (no growth now) still prints and calls every run, as Fluid does
    exe.run(main, feed={"x": xv, "n": np.array([100])}, fetch_list=fetch)
    assert func.n == 2 and capfd.readouterr().out.count("message: outside the loop") == 1


def test_runs_on_several_threads_each_report_to_their_own_run(capfd):
    """Callbacks run on XLA's threads; each carries its run's ticket. Two threads, each running
    its own room-growing program (own Executor and scope) three times at once: every run prints
    once and calls its py_func once (the first run of each is done again)."""
    import threading

    xv = np.arange(6, dtype="float32").reshape(2, 3)
    errors, results = [], {}

    def work(k):
        try:
            func, (main, startup, fetch) = programs[k]
            exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
            exe.run(startup, scope=scope)
            got = [exe.run(main, feed={"x": xv * (k + 1), "n": np.array([100])}, fetch_list=fetch, scope=scope)
                   for _ in range(3)]
            results[k] = (func.n, got)
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    programs = [(f, _room_program(f)) for f in (_Calls(), _Calls())]   # (program_guard is not per thread)
    capfd.readouterr()
    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    out = capfd.readouterr().out
    assert out.count("message: outside the loop") == 6, out
    for k, (calls, got) in results.items():
        assert calls == 3
        for length, last, total in got:
            assert int(length) == 100
            np.testing.assert_allclose(last, [99 * (2 * xv * (k + 1)).sum()])
    assert out.count("  - data: [0 1 2 3 4 5]") == 3 and out.count("  - data: [0 2 4 6 8 10]") == 3


def _expand(rows: np.ndarray, x_lengths, y_lengths) -> tuple[np.ndarray, list]:
    """sequence_expand in NumPy: x's sequence k repeated y_lengths[k] times."""
    starts = np.concatenate([[0], np.cumsum(x_lengths)])
    pieces, lengths = [], []
    for k, times in enumerate(y_lengths):
        for _ in range(times):
            pieces.append(rows[starts[k]:starts[k + 1]])
            lengths.append(int(x_lengths[k]))
    return np.concatenate(pieces), lengths


def test_a_run_whose_loop_lod_bound_grows_prints_and_calls_py_func_once(capfd):
    """tests/test_loop_lod_bounds.py's growing loop (its second iteration passes the bound on the
    longest sequence the first attempt assumed: the run is done again), with a Print of the loop
    variable and a py_func before the loop."""
    func = _Calls()
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 1], "float32", lod_level=1)
        y = fluid.data("y", [-1, 1], "float32", lod_level=1)
        t = fluid.data("t", [5], "int32")
        L.Print(x, message="the loop variable")
        t2 = _doubled(t, func)
        out = L.sequence_expand(x, y)
        i = L.fill_constant([1], "int64", 0)
        n = L.fill_constant([1], "int64", 2)
        cond = L.less_than(i, n)
        loop = L.While(cond)
        with loop.block():
            L.assign(L.sequence_expand(x, y), out)
            L.assign(L.lod_reset(x, y=t), x)
            L.increment(i, in_place=True)
            L.less_than(i, n, cond=cond)
    xv, tv, y_lengths = np.arange(8, dtype="float32").reshape(8, 1), np.array([0, 1, 2, 3, 8], np.int32), [1, 1, 1, 5]
    feed = {"x": fluid.create_lod_tensor(xv, [[2, 2, 2, 2]], fluid.CPUPlace()),
            "y": fluid.create_lod_tensor(np.zeros((8, 1), "float32"), [y_lengths], fluid.CPUPlace()),
            "t": tv}
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    capfd.readouterr()
    traces = exe.trace_count
    got, doubled = exe.run(main, feed=feed, fetch_list=[out, t2], return_numpy=False)
    text = capfd.readouterr().out
    assert exe.trace_count == traces + 2             # done again with the bound grown
    want, lengths = _expand(xv, np.diff(tv), y_lengths)   # the second iteration's x has LoD t
    assert got.recursive_sequence_lengths() == [lengths]
    np.testing.assert_array_equal(np.array(got), want)
    np.testing.assert_array_equal(np.array(doubled), tv * 2)
    assert func.n == 1
    assert text.count("message: the loop variable") == 1, text
    assert "  - lod: {{0, 2, 4, 6, 8}}" in text


class _OutOfMemory:
    """A py_func's function that passes its input, or fails as XLA does when out of memory."""

    def __init__(self) -> None:
        self.fail = False

    def __call__(self, a):
        if self.fail:
            raise MemoryError("RESOURCE_EXHAUSTED: a test's simulated allocation failure")
        return np.asarray(a)


def _mlp_with_effects(func, oom):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 64], "float32")
        shown = L.Print(x, message="the batch", summarize=2)
        h = L.fc(_doubled(shown, func), 256, act="relu")
        cost = L.mean(L.fc(_doubled(h, oom, "allocated"), 256))
    return main, startup, cost


def test_a_memory_refusal_runs_nothing_and_a_careful_run_runs_once(capfd, monkeypatch):
    """A step that cannot fit is refused before it runs (no effect at all; the executor does not
    retry: the caller's next run is a new run); one that needs most of the free memory runs once,
    undonated (the careful path): when it runs out of memory after its Print it prints nothing, and
    when it completes it prints and calls once."""
    func, oom = _Calls(), _OutOfMemory()
    main, startup, cost = _mlp_with_effects(func, oom)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    big = {"x": np.ones((4096, 64), np.float32)}
    need = fluid.compiled_memory(main, big, scope=scope, fetch_list=[cost], executor=exe)["need_bytes"]
    assert need > 0
    capfd.readouterr()
    monkeypatch.setattr(memory, "free_bytes", lambda device: (need // 2, "a test's figure"))
    with pytest.raises(fluid.ResourceExhaustedError):
        exe.run(main, feed=big, fetch_list=[cost], scope=scope)
    assert func.n == 0 and "the batch" not in capfd.readouterr().out
    careful = []
    kept = exe._execute

    def spy(program, scope_, plan, args, careful_=False, outs=None):
        careful.append(careful_)
        return kept(program, scope_, plan, args, careful_, outs)

    monkeypatch.setattr(exe, "_execute", spy)
    monkeypatch.setattr(memory, "free_bytes", lambda device: (int(need / 0.95), "a test's figure"))
    oom.fail = True
    with pytest.raises(fluid.ResourceExhaustedError, match="nothing was lost"):
        exe.run(main, feed=big, fetch_list=[cost], scope=scope)
    assert careful == [True] and "the batch" not in capfd.readouterr().out
    oom.fail, careful[:] = False, []
    func.n = 0
    got, = exe.run(main, feed=big, fetch_list=[cost], scope=scope)
    assert careful == [True]                     # the undonated step, called once: no retry
    w0, b0, w1, b1 = (np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters())
    want = (np.maximum(big["x"] * 2 @ w0 + b0, 0) @ w1 + b1).mean()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert func.n == 1 and capfd.readouterr().out.count("message: the batch") == 1


def _forever(func):
    """Print and py_func before a ``while`` that never ends."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 2], "float32")
        total = L.reduce_sum(_doubled(L.Print(x, message="before the loop"), func))
        i = L.fill_constant([1], "int64", 0)
        cond = L.fill_constant([1], "bool", True)
        loop = L.While(cond)
        with loop.block():
            L.increment(i)
    return main, startup, [total, i]


class _Stop(Exception):
    pass


def test_an_abandoned_run_prints_nothing(capfd):
    """An interrupt (a signal handler's exception) abandons the run: its step, still finishing in
    a worker, prints nothing; a run stopped at FLAGS_max_while_iterations prints nothing. The
    py_func's call before the interrupt cannot be undone, but it is the only one."""
    class _Arming(_Calls):
        """Starts the clock when the step runs (after any tracing and compiling)."""

        def __call__(self, a):
            if armed[0] and self.n == 0:
                signal.setitimer(signal.ITIMER_REAL, 0.3)
            return super().__call__(a)

    armed = [True]
    func = _Arming()
    main, startup, fetch = _forever(func)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    feed = {"x": np.ones((3, 2), np.float32)}
    capfd.readouterr()

    def handler(signum, frame):
        if armed[0]:
            armed[0] = False
            raise _Stop()

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        with pytest.raises(_Stop):
            exe.run(main, feed=feed, fetch_list=fetch)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    deadline = time.monotonic() + 10
    while interrupt.running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert interrupt.running() == 0
    assert func.n <= 1
    assert "before the loop" not in capfd.readouterr().out
    fluid.set_flags({"FLAGS_max_while_iterations": 1000})
    try:
        with pytest.raises(fluid.LoopBoundError):
            exe.run(main, feed=feed, fetch_list=fetch)
    finally:
        fluid.set_flags({"FLAGS_max_while_iterations": 0})
    assert "before the loop" not in capfd.readouterr().out


def test_a_failed_check_prints_nothing_and_keeps_first_n(capfd):
    """A run whose NaN/Inf check fails is not committed: no print, and ``first_n`` (counting
    committed prints) is not spent; the next good run prints."""
    func = _Calls()
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 2], "float32")
        shown = L.Print(x, message="checked", first_n=1)
        out = L.log(_doubled(shown, func))
    exe = fluid.Executor(fluid.CPUPlace())
    fluid.set_flags({"FLAGS_check_nan_inf": True})
    try:
        capfd.readouterr()
        with pytest.raises(fluid.NumericCheckError):
            exe.run(main, feed={"x": -np.ones((1, 2), np.float32)}, fetch_list=[out])
        assert "checked" not in capfd.readouterr().out
        good = np.array([[1.0, 2.0]], np.float32)
        got, = exe.run(main, feed={"x": good}, fetch_list=[out])
        np.testing.assert_allclose(got, np.log(2 * good), rtol=1e-6)
        exe.run(main, feed={"x": good}, fetch_list=[out])
        assert capfd.readouterr().out.count("message: checked") == 1    # first_n=1: the first good run's
    finally:
        fluid.set_flags({"FLAGS_check_nan_inf": False})
    assert func.n == 3


def test_a_training_run_calls_py_func_forward_and_backward_once():
    """The gradient of a py_func takes the forward's Out from the grad op instead of recomputing
    the forward: each function is called once a run, as in Fluid (the generic grad rule called
    the forward function a second time)."""
    calls = {"forward": 0, "backward": 0}

    def forward(x):
        calls["forward"] += 1
        return np.tanh(np.asarray(x))

    def backward(x, y, dy):
        calls["backward"] += 1
        return np.asarray(dy) * (1 - np.asarray(y) ** 2)

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 4], "float32")
        x.stop_gradient = False
        t = main.global_block().create_var(name="t", shape=[-1, 4], dtype="float32")
        L.py_func(forward, x, t, backward_func=backward)
        loss = L.reduce_sum(L.elementwise_mul(t, t))
        fluid.backward.append_backward(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    xv = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    for run in range(1, 3):
        got, grad = exe.run(main, feed={"x": xv}, fetch_list=[loss, "x@GRAD"])
        assert calls == {"forward": run, "backward": run}
    tv = np.tanh(xv)
    np.testing.assert_allclose(got, (tv * tv).sum(), rtol=1e-6)
    np.testing.assert_allclose(grad, 2 * tv * (1 - tv * tv), rtol=1e-5)


# -- fj.compiled_memory before anything is allocated (issue 27, item 6) ---------------------------
def _mlp():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 32], "float32")
        y = fluid.data("y", [-1, 1], "int64")
        h = L.fc(x, 64, act="relu")
        loss = L.mean(L.cross_entropy(L.fc(h, 10, act="softmax"), y))
        fluid.optimizer.Adam(0.01).minimize(loss)
    feed = {"x": np.ones((16, 32), np.float32), "y": np.zeros((16, 1), np.int64)}
    return main, startup, feed, loss


def _conv_net():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        img = fluid.data("img", [-1, 3, 16, 16], "float32")
        y = fluid.data("y", [-1, 1], "int64")
        c = L.conv2d(img, 8, 3, act="relu")
        c = L.batch_norm(c)
        p = L.pool2d(c, 2, pool_stride=2)
        loss = L.mean(L.cross_entropy(L.fc(p, 10, act="softmax"), y))
        fluid.optimizer.Momentum(0.01, 0.9).minimize(loss)
    feed = {"img": np.ones((4, 3, 16, 16), np.float32), "y": np.zeros((4, 1), np.int64)}
    return main, startup, feed, loss


@pytest.mark.parametrize("build", [_mlp, _conv_net], ids=["mlp", "conv"])
def test_compiled_memory_from_declared_shapes_equals_the_allocated_figures(build):
    """No scope given and nothing allocated: the state is the program's declared shapes, the
    figures are those of the same step after the startup program ran, and the (fresh) global
    scope is left empty."""
    main, startup, feed, loss = build()
    with fluid.scope_guard(fluid.Scope()) as empty:
        before = fluid.compiled_memory(main, feed, fetch_list=[loss])
        assert fluid.global_scope().local_var_names() == []
    assert before["argument_bytes"] > 0 and before["need_bytes"] > 0
    state = sum(int(np.prod(v.shape)) * 4 for v in main.global_block().vars.values()
                if v.persistable and v.dtype is not None and v.name not in feed)
    assert state > 0
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    after = fluid.compiled_memory(main, feed, scope=scope, fetch_list=[loss], executor=exe)
    assert before == after
    # and the run the figures describe works on the allocated scope
    assert np.isfinite(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]).all()


def test_compiled_memory_of_state_without_a_fixed_shape_says_to_run_the_startup_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 4], "float32")
        w = main.global_block().create_var(name="w_unsized", shape=[-1, 4], dtype="float32", persistable=True)
        out = L.elementwise_add(x, w)
    with fluid.scope_guard(fluid.Scope()):
        with pytest.raises(fluid.UninitializedVariableError, match="run the startup program"):
            fluid.compiled_memory(main, {"x": np.ones((2, 4), np.float32)}, fetch_list=[out])


_DATA_PARALLEL = """
import json
import numpy as np
import fluidjax as fluid
L = fluid.layers
main, startup = fluid.Program(), fluid.Program()
with fluid.program_guard(main, startup):
    x = fluid.data("x", [-1, 32], "float32")
    loss = L.mean(L.fc(L.fc(x, 64, act="relu"), 16))
    fluid.optimizer.Adam(0.01).minimize(loss)
cp = fluid.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
feed = {"x": np.ones((8, 32), np.float32)}
with fluid.scope_guard(fluid.Scope()):
    before = fluid.compiled_memory(cp, feed, fetch_list=[loss])
    empty = fluid.global_scope().local_var_names() == []
exe, scope = fluid.Executor(), fluid.Scope()
exe.run(startup, scope=scope)
after = fluid.compiled_memory(cp, feed, scope=scope, fetch_list=[loss], executor=exe)
import jax
print(json.dumps({"devices": jax.device_count(), "before": before, "after": after, "empty": empty}))
"""


def test_compiled_memory_of_a_data_parallel_program_before_allocating():
    """The same for a CompiledProgram over two (host) devices: abstract state takes the shardings
    its step wants."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", _DATA_PARALLEL], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["devices"] == 2 and got["empty"]
    assert got["before"] == got["after"] and got["before"]["argument_bytes"] > 0
