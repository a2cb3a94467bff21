"""The per-run floor (issue 30 item 2): a repeated ``exe.run`` takes the prepared fast path.

A call whose program version, feed names, fetch names and flags have a plan that needs only plain
feed checks, on the scope that plan ran on last, with the last run's feed shapes, skips the
general preparation (``Executor._run_fast``); ``exe.fast_run_count`` counts such runs. These tests
check that it is taken on repeats, that every change (program, attribute, scope, feed shape or
dtype, fetch list, a value written into the scope) sends the run through the general path, that
its results are a NumPy SGD's, and that it keeps the guarantees of a run: feed checks, index
checks, a failed step leaves the scope unchanged, signals are deferred over the commit, a run
from inside a run is refused. ``exe.prepare`` is the same path, prepared once.
"""

import os
import signal

import jax
import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer
from fluidjax.ir.errors import (FeedError, IndexOutOfRangeError, NumericCheckError, ReentrantRunError,
                                ShapeError)


@pytest.fixture(autouse=True)
def _fast_run_on():
    """FLAGS_fast_run is on by default (lowering/flags.py); these tests hold it on whatever ran before."""
    before = fj.get_flags(["FLAGS_fast_run"])["FLAGS_fast_run"]
    fj.set_flags({"FLAGS_fast_run": True})
    yield
    fj.set_flags({"FLAGS_fast_run": before})


LR = 0.1
W0 = np.array([[0.5], [-1.0], [0.25], [2.0]], np.float32)
B0 = np.array([0.3], np.float32)


def _linreg(checked: bool = False):
    """pred = x @ W + b, loss = mean((pred - y)^2), one SGD step per run. ``checked``: ``x`` is a
    ``fluid.data`` variable (dtype and dims enforced); else Fluid 1.x's advisory ``layers.data``."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = fj.data("x", [-1, 4], "float32") if checked else layer.data("x", input_size=4)
        y = layer.data("y", dims=1)
        pred = layer.fc(x, 1)
        loss = layer.mean(layer.square_error_cost(pred, y))
        fj.optimizer.SGD(LR).minimize(loss)
    return main, startup, loss, pred


def _scope(startup, exe):
    scope = fj.Scope()
    exe.run(startup, scope=scope)
    scope.find_var("fc_0.w_0").get_tensor().set(W0)
    scope.find_var("fc_0.b_0").get_tensor().set(B0)
    return scope


def _numpy_sgd(w, b, x, y):
    """One step of the program, in NumPy (float64): (loss, new w, new b)."""
    x, y, w, b = (np.asarray(a, np.float64) for a in (x, y, w, b))
    pred = x @ w + b
    diff = pred - y
    loss = np.mean(diff ** 2)
    grad = 2.0 * diff / diff.size
    return loss, w - LR * (x.T @ grad), b - LR * grad.sum(0)


def _batches(n, rows=5, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((rows, 4)).astype(np.float32),
             "y": rng.standard_normal((rows, 1)).astype(np.float32)} for _ in range(n)]


def _params(scope):
    return (np.array(scope.find_var("fc_0.w_0").get_tensor()), np.array(scope.find_var("fc_0.b_0").get_tensor()))


def test_repeat_runs_take_the_fast_path_and_match_numpy():
    main, startup, loss, _ = _linreg()
    exe = fj.Executor()
    scope = _scope(startup, exe)
    w, b = W0, B0
    for i, feed in enumerate(_batches(6)):
        before = exe.fast_run_count
        got, = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        # the first run plans and binds; every later one is a repeat of it
        assert exe.fast_run_count == before + (i > 0)
        want, w, b = _numpy_sgd(w, b, feed["x"], feed["y"])
        np.testing.assert_allclose(float(got), want, rtol=1e-5)
    got_w, got_b = _params(scope)
    np.testing.assert_allclose(got_w, w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_b, b, rtol=1e-5, atol=1e-6)


def test_with_the_flag_off_no_run_is_fast_and_the_general_path_still_trains():
    fj.set_flags({"FLAGS_fast_run": False})
    main, startup, loss, _ = _linreg()
    exe = fj.Executor()
    scope = _scope(startup, exe)
    w, b = W0, B0
    for feed in _batches(4):
        got, = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        want, w, b = _numpy_sgd(w, b, feed["x"], feed["y"])
        np.testing.assert_allclose(float(got), want, rtol=1e-5)
    assert exe.fast_run_count == 0
    np.testing.assert_allclose(_params(scope)[0], w, rtol=1e-5, atol=1e-6)


def test_fast_and_general_paths_give_bitwise_equal_training():
    main, startup, loss, pred = _linreg()
    fast_exe, slow_exe = fj.Executor(), fj.Executor()
    fast_scope, slow_scope = _scope(startup, fast_exe), _scope(startup, slow_exe)
    for feed in _batches(5):
        got_fast = fast_exe.run(main, feed=feed, fetch_list=[loss, pred], scope=fast_scope)
        for plan in slow_exe._plans.values():
            plan.fast = None                 # the general path, every run
        got_slow = slow_exe.run(main, feed=feed, fetch_list=[loss, pred], scope=slow_scope)
        for a, b in zip(got_fast, got_slow):
            np.testing.assert_array_equal(a, b)
    assert fast_exe.fast_run_count == 4 and slow_exe.fast_run_count == 0
    for a, b in zip(_params(fast_scope), _params(slow_scope)):
        np.testing.assert_array_equal(a, b)


def test_a_program_change_leaves_the_fast_path_until_it_ran_once():
    main, startup, loss, pred = _linreg()
    exe = fj.Executor()
    scope = _scope(startup, exe)
    feeds = _batches(8)
    exe.run(main, feed=feeds[0], fetch_list=[loss], scope=scope)
    exe.run(main, feed=feeds[1], fetch_list=[loss], scope=scope)
    assert exe.fast_run_count == 1
    # a new op appended: a new version, planned again
    with fj.program_guard(main, startup):
        doubled = layer.scale(pred, scale=2.0)
    w, b = _params(scope)
    got, = exe.run(main, feed=feeds[2], fetch_list=[doubled], scope=scope)
    assert exe.fast_run_count == 1
    np.testing.assert_allclose(got, 2.0 * (feeds[2]["x"] @ w + b), rtol=1e-5, atol=1e-6)
    w, b = _params(scope)
    got, = exe.run(main, feed=feeds[3], fetch_list=[doubled], scope=scope)
    assert exe.fast_run_count == 2
    np.testing.assert_allclose(got, 2.0 * (feeds[3]["x"] @ w + b), rtol=1e-5, atol=1e-6)
    # an attribute changed in place: the version moves too, and the new value is used at once
    scale_op = [op for op in main.global_block().ops if op.type == "scale"][-1]
    scale_op.set_attr("scale", 3.0)
    w, b = _params(scope)
    got, = exe.run(main, feed=feeds[4], fetch_list=[doubled], scope=scope)
    assert exe.fast_run_count == 2
    np.testing.assert_allclose(got, 3.0 * (feeds[4]["x"] @ w + b), rtol=1e-5, atol=1e-6)
    w, b = _params(scope)
    got, = exe.run(main, feed=feeds[5], fetch_list=[doubled], scope=scope)
    assert exe.fast_run_count == 3
    np.testing.assert_allclose(got, 3.0 * (feeds[5]["x"] @ w + b), rtol=1e-5, atol=1e-6)


def test_scope_feed_shape_dtype_and_fetch_changes_take_the_general_path():
    main, startup, loss, pred = _linreg()
    exe = fj.Executor()
    scope_a, scope_b = _scope(startup, exe), _scope(startup, exe)
    feeds = _batches(4) + _batches(4, rows=3, seed=1)
    wa, ba = W0, B0
    wb, bb = W0, B0

    def run(feed, scope, fetch=None):
        nonlocal wa, ba, wb, bb
        before = exe.fast_run_count
        got = exe.run(main, feed=feed, fetch_list=fetch or [loss], scope=scope)
        if scope is scope_a:
            want, wa, ba = _numpy_sgd(wa, ba, feed["x"], feed["y"])
        else:
            want, wb, bb = _numpy_sgd(wb, bb, feed["x"], feed["y"])
        np.testing.assert_allclose(float(got[0]), want, rtol=1e-5)
        return exe.fast_run_count - before

    assert run(feeds[0], scope_a) == 0
    assert run(feeds[1], scope_a) == 1
    assert run(feeds[2], scope_b) == 0           # another scope: bound by the general path
    assert run(feeds[3], scope_b) == 1
    assert run(feeds[1], scope_a) == 0           # and back
    assert run(feeds[4], scope_a) == 0           # 3 rows instead of 5
    assert run(feeds[5], scope_a) == 1
    # a float64 x: layers.data's dtype is advice, so the general path re-infers the program's
    # shapes and dtypes from it, and refuses it (mul would mix float64 data with float32 weights)
    count = exe.fast_run_count
    with pytest.raises(ShapeError, match="float64"):
        exe.run(main, feed={"x": feeds[6]["x"].astype(np.float64), "y": feeds[6]["y"]}, fetch_list=[loss],
                scope=scope_a)
    assert exe.fast_run_count == count
    assert run(feeds[6], scope_a) == 1           # nothing ran: the last run's signature is still this one
    assert run(feeds[7], scope_a, [loss, pred]) == 0   # another fetch list
    assert run(feeds[7], scope_a, [loss, pred]) == 1
    for got, want in zip(_params(scope_a) + _params(scope_b), (wa, ba, wb, bb)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_value_written_into_the_scope_is_read_by_the_next_run():
    main, startup, loss, _ = _linreg()
    exe = fj.Executor()
    scope = _scope(startup, exe)
    feed = _batches(1)[0]
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    w = np.full((4, 1), 0.1, np.float32)
    scope.find_var("fc_0.w_0").get_tensor().set(w)          # a NumPy value: put on the device first
    _, b = _params(scope)
    got, = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    np.testing.assert_allclose(float(got), _numpy_sgd(w, b, feed["x"], feed["y"])[0], rtol=1e-5)


def test_feed_and_index_checks_hold_on_the_fast_path():
    main, startup, loss, _ = _linreg(checked=True)
    exe = fj.Executor()
    scope = _scope(startup, exe)
    feed = _batches(1)[0]
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    before = _params(scope)
    for bad in ({"x": feed["x"].astype(np.float64), "y": feed["y"]},       # fluid.data: its dtype only
                {"x": feed["x"][:, :3], "y": feed["y"]},                     # and its known dims
                {"x": feed["x"].reshape(5, 4, 1), "y": feed["y"]}):
        with pytest.raises(FeedError, match="'x'"):
            exe.run(main, feed=bad, fetch_list=[loss], scope=scope)
    for got, want in zip(_params(scope), before):
        np.testing.assert_array_equal(got, want)

    # a fed label out of range: refused before the run, on the fast path, the scope unchanged
    cls, cls_startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(cls, cls_startup):
        x = layer.data("x", input_size=4)
        label = layer.data("label", dims=1, dtype="int64")
        cost = layer.mean(layer.cross_entropy(layer.fc(x, 3, activation="softmax"), label))
        fj.optimizer.SGD(LR).minimize(cost)
    cls_scope = fj.Scope()
    exe.run(cls_startup, scope=cls_scope)
    xs = feed["x"]
    good = {"x": xs, "label": np.array([[0], [1], [2], [1], [0]], np.int64)}
    exe.run(cls, feed=good, fetch_list=[cost], scope=cls_scope)
    exe.run(cls, feed=good, fetch_list=[cost], scope=cls_scope)
    weights = np.array(cls_scope.find_var("fc_0.w_0").get_tensor())
    count = exe.fast_run_count
    for labels in ([[0], [1], [3], [1], [0]], [[0], [-1], [2], [1], [0]]):
        with pytest.raises(IndexOutOfRangeError, match="cross_entropy"):
            exe.run(cls, feed={"x": xs, "label": np.array(labels, np.int64)}, fetch_list=[cost], scope=cls_scope)
    np.testing.assert_array_equal(np.array(cls_scope.find_var("fc_0.w_0").get_tensor()), weights)
    exe.run(cls, feed=good, fetch_list=[cost], scope=cls_scope)
    assert exe.fast_run_count == count + 1


def test_a_failed_check_on_the_fast_path_leaves_the_scope_unchanged():
    main, startup, loss, _ = _linreg()
    exe = fj.Executor()
    scope = _scope(startup, exe)
    feed = _batches(1)[0]
    fj.set_flags({"FLAGS_check_nan_inf": True})
    try:
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        before, count = _params(scope), exe.fast_run_count
        nan = dict(feed, x=np.where(np.arange(20).reshape(5, 4) == 7, np.nan, feed["x"]).astype(np.float32))
        with pytest.raises(NumericCheckError):
            exe.run(main, feed=nan, fetch_list=[loss], scope=scope)
        assert exe.fast_run_count == count + 1          # it was a fast run
        for got, want in zip(_params(scope), before):
            np.testing.assert_array_equal(got, want)
        got, = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        np.testing.assert_allclose(float(got), _numpy_sgd(*before, feed["x"], feed["y"])[0], rtol=1e-5)
    finally:
        fj.set_flags({"FLAGS_check_nan_inf": False})


def _wrap_step(exe, program, around):
    """Make the program's planned step call ``around(step, args)`` (a test's probe in the run)."""
    plans = [p for p in exe._plans.values() if p.program is program]
    assert plans
    for plan in plans:
        step = plan.step
        plan.step = lambda *args, _step=step: around(_step, args)


def test_an_exception_raised_in_the_step_call_leaves_the_scope_unchanged():
    main, startup, loss, _ = _linreg()
    exe = fj.Executor()
    scope = _scope(startup, exe)
    feed = _batches(1)[0]
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    before, count = _params(scope), exe.fast_run_count

    def failing(step, args):
        raise KeyboardInterrupt

    _wrap_step(exe, main, failing)
    with pytest.raises(KeyboardInterrupt) as info:
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    assert not getattr(info.value, "__notes__", None)         # nothing was committed
    assert exe.fast_run_count == count + 1                    # (on the fast path)
    for got, want in zip(_params(scope), before):
        np.testing.assert_array_equal(got, want)


def test_a_signal_during_the_fast_step_arrives_after_the_commit():
    main, startup, loss, _ = _linreg()
    exe = fj.Executor()
    scope = _scope(startup, exe)
    feed = _batches(1)[0]
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    before, count = _params(scope), exe.fast_run_count

    class Stop(Exception):
        pass

    def handler(signum, frame):
        raise Stop

    def signalled(step, args):
        os.kill(os.getpid(), signal.SIGUSR1)       # while the step holds the donated state
        return step(*args)

    _wrap_step(exe, main, signalled)
    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        with pytest.raises(Stop) as info:
            exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert any("the run completed" in note for note in info.value.__notes__)
    assert exe.fast_run_count == count + 1
    _, w, b = _numpy_sgd(*before, feed["x"], feed["y"])        # the run was applied, once
    for got, want in zip(_params(scope), (w, b)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_run_from_inside_a_fast_run_is_refused_and_the_scope_is_unchanged():
    main, startup, loss, _ = _linreg()
    exe = fj.Executor()
    scope = _scope(startup, exe)
    feed = _batches(1)[0]
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    before = _params(scope)

    def nested(step, args):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        return step(*args)

    _wrap_step(exe, main, nested)
    with pytest.raises(ReentrantRunError):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    for got, want in zip(_params(scope), before):
        np.testing.assert_array_equal(got, want)


def test_prepare_round_trip():
    main, startup, loss, pred = _linreg()
    exe = fj.Executor()
    scope = _scope(startup, exe)
    feeds = _batches(5)
    step = exe.prepare(main, feed=feeds[0], fetch_list=[loss, pred], scope=scope)
    assert step.fetch_names == (loss.name, pred.name)
    for a, b in zip(_params(scope), (W0, B0)):      # preparing runs nothing
        np.testing.assert_array_equal(a, b)
    w, b = W0, B0
    count = exe.fast_run_count
    for feed in feeds:
        got_loss, got_pred = step(feed)
        np.testing.assert_allclose(got_pred, feed["x"] @ w + b, rtol=1e-5, atol=1e-6)
        want, w, b = _numpy_sgd(w, b, feed["x"], feed["y"])
        np.testing.assert_allclose(float(got_loss), want, rtol=1e-5)
    assert exe.fast_run_count == count + len(feeds) - 1
    # shape specs stand for arrays; another batch size is checked and compiled as run would
    spec = exe.prepare(main, feed={"x": jax.ShapeDtypeStruct((3, 4), np.float32), "y": ((3, 1), "float32")},
                       fetch_list=[loss], scope=scope)
    small = _batches(1, rows=3, seed=5)[0]
    got, = spec(small)
    np.testing.assert_allclose(float(got), _numpy_sgd(w, b, small["x"], small["y"])[0], rtol=1e-5)
    # a program changed after preparing: the step runs the new program
    with fj.program_guard(main, startup):
        tripled = layer.scale(pred, scale=3.0)
    w, b = _params(scope)
    step3 = exe.prepare(main, feed=feeds[0], fetch_list=[tripled], scope=scope)
    with fj.program_guard(main, startup):
        layer.scale(pred, scale=5.0)               # (a new op: a new version after step3 was made)
    w, b = _params(scope)
    got, = step3(feeds[1])
    np.testing.assert_allclose(got, 3.0 * (feeds[1]["x"] @ w + b), rtol=1e-5, atol=1e-6)


def test_prepare_checks_its_example_feed():
    main, startup, loss, _ = _linreg(checked=True)
    exe = fj.Executor()
    scope = _scope(startup, exe)
    feed = _batches(1)[0]
    with pytest.raises(FeedError, match="'z'"):
        exe.prepare(main, feed={"z": feed["x"], "y": feed["y"]}, fetch_list=[loss], scope=scope)
    with pytest.raises(FeedError, match="'x'"):
        exe.prepare(main, feed={"x": jax.ShapeDtypeStruct((5, 3), np.float32), "y": feed["y"]},
                    fetch_list=[loss], scope=scope)
    with pytest.raises(FeedError, match="'x'"):
        exe.prepare(main, feed={"x": feed["x"].astype(np.int32), "y": feed["y"]}, fetch_list=[loss], scope=scope)
    for got, want in zip(_params(scope), (W0, B0)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rows", [5, 300])
def test_fed_labels_are_range_checked_on_the_fast_path_whatever_their_layout(rows):
    """Short contiguous labels are checked through their buffer, long ones by a NumPy reduction,
    non-contiguous ones by the full check: each refuses an index out of range (and a negative one)."""
    cls, cls_startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(cls, cls_startup):
        x = layer.data("x", input_size=4)
        label = layer.data("label", dims=1, dtype="int64")
        cost = layer.mean(layer.cross_entropy(layer.fc(x, 3, activation="softmax"), label))
        fj.optimizer.SGD(LR).minimize(cost)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(cls_startup, scope=scope)
    rng = np.random.default_rng(rows)
    xs = rng.standard_normal((rows, 4)).astype(np.float32)
    labels = rng.integers(0, 3, (rows, 2)).astype(np.int64)
    contiguous, strided = np.ascontiguousarray(labels[:, :1]), labels[:, :1]
    assert not strided.flags.c_contiguous
    for good in (contiguous, strided, contiguous):
        exe.run(cls, feed={"x": xs, "label": good}, fetch_list=[cost], scope=scope)
    assert exe.fast_run_count == 2
    weights = np.array(scope.find_var("fc_0.w_0").get_tensor())
    for base in (contiguous, strided):
        for bad_value in (3, -1, 1 << 40):
            bad = base.copy() if base is contiguous else labels.copy()[:, :1]
            bad[rows // 2, 0] = bad_value
            with pytest.raises(IndexOutOfRangeError, match="cross_entropy"):
                exe.run(cls, feed={"x": xs, "label": bad}, fetch_list=[cost], scope=scope)
    assert exe.fast_run_count == 2           # (refused before the run: never counted)
    np.testing.assert_array_equal(np.array(scope.find_var("fc_0.w_0").get_tensor()), weights)


def test_an_executor_with_a_place_takes_the_fast_path_too():
    main, startup, loss, _ = _linreg()
    exe = fj.Executor(fj.CPUPlace())
    scope = _scope(startup, exe)
    w, b = W0, B0
    for i, feed in enumerate(_batches(4, seed=3)):
        got, = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        want, w, b = _numpy_sgd(w, b, feed["x"], feed["y"])
        np.testing.assert_allclose(float(got), want, rtol=1e-5)
    assert exe.fast_run_count == 3
    for got, want in zip(_params(scope), (w, b)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [[5, 4], [-1, -1, 4]])
def test_feeds_of_any_declared_shape_take_the_fast_path(shape):
    """A feed declared with every dim known (a fixed batch, a [T, T] mask) or with unknown dims past
    the first (a sequence length) takes the fast path too; a shape off a known dim is still refused."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = fj.data("x", shape, "float32")
        y = fj.data("y", [5, 1], "float32")                    # every dim known
        flat = layer.reshape(x, [5, -1]) if len(shape) == 2 else layer.reduce_sum(x, dim=1)
        pred = layer.fc(flat, 1, param_attr=fj.ParamAttr(initializer=fj.initializer.Constant(0.5)),
                        bias_attr=fj.ParamAttr(initializer=fj.initializer.Constant(0.1)))
        loss = layer.mean(layer.square_error_cost(pred, y))
        fj.optimizer.SGD(LR).minimize(loss)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(0)
    x_shape = (5, 4) if len(shape) == 2 else (5, 3, 4)
    w, b = np.full((4, 1), 0.5, np.float32), np.array([0.1], np.float32)
    for step in range(4):
        xv = rng.normal(size=x_shape).astype(np.float32)
        yv = rng.normal(size=(5, 1)).astype(np.float32)
        before = exe.fast_run_count
        got = exe.run(main, feed={"x": xv, "y": yv}, fetch_list=[loss], scope=scope)
        assert exe.fast_run_count - before == (1 if step else 0)
        flat_v = xv.reshape(5, -1) if len(shape) == 2 else xv.sum(axis=1)
        want, w, b = _numpy_sgd(w, b, flat_v, yv)
        np.testing.assert_allclose(float(got[0]), want, rtol=1e-5)
    count = exe.fast_run_count
    with pytest.raises(FeedError, match="declared"):
        exe.run(main, feed={"x": xv, "y": np.zeros((4, 1), np.float32)}, fetch_list=[loss], scope=scope)
    assert exe.fast_run_count == count
