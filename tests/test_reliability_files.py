"""No silent wrong answers and no lost state around files and shared scopes (issue 21, items 7, 8,
13-17): saves and reads that take their turn with a training thread, checkpoints that a kill cannot
tear, hostile tensor headers, huge declared sizes, file modes that follow the umask, and typed
errors for LoD and ``cond`` mistakes.

This file is also the child of the kill tests: ``python test_reliability_files.py zygote ...``.
"""

import io
import json
import os
import random
import signal
import stat
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import fluidjax as fj
import fluidjax.io as fio
from fluidjax import layer
from fluidjax.frontend.io import tensor_stream as ts
from fluidjax.ir.errors import ParameterMismatchError, TensorFormatError

MANIFEST = ".fluidjax_manifest"


# -- helpers ---------------------------------------------------------------------------------------
def _mlp(seed=5):
    """A small MLP classifier trained with Adam: (main, startup, cost)."""
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = seed
    with fj.program_guard(main, startup):
        x = layer.data("x", input_size=16)
        y = layer.data("y", dims=1, dtype="int64")
        h = layer.fc(x, 32, activation="relu")
        p = layer.fc(h, 10, activation="softmax")
        cost = layer.mean(layer.cross_entropy(p, y))
        fj.optimizer.Adam(0.01).minimize(cost)
    return main, startup, cost


def _batch(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 16)).astype(np.float32), "y": rng.integers(0, 10, (n, 1)).astype(np.int64)}


def _persistables(program):
    return [v.name for v in fio.persistable_vars(program)]


def _state(program, scope):
    return {n: np.array(scope.find_var(n).get_tensor()) for n in _persistables(program)}


def _key(state):
    return b"".join(state[n].tobytes() for n in sorted(state))


# -- 7: saves and reads take their turn with runs ----------------------------------------------------
def test_saves_and_reads_while_another_thread_trains_see_committed_states(tmp_path):
    main, startup, cost = _mlp()
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    feed = _batch()
    exe.run(main, feed=feed, fetch_list=[cost], scope=scope)          # compile before the race
    names = _persistables(main)
    states = [_state(main, scope)]
    stop, failures = threading.Event(), []

    def train():
        try:
            while not stop.is_set():
                exe.run(main, feed=feed, fetch_list=[cost], scope=scope)
                states.append(_state(main, scope))     # only this thread runs: this is the committed state
        except BaseException as exc:                   # pragma: no cover - reported below
            failures.append(exc)

    trainer = threading.Thread(target=train)
    trainer.start()
    saved, reads = [], []
    try:
        for i in range(40):
            path = str(tmp_path / f"ck{i}")
            if i % 2:
                fio.save_persistables(exe, path, main, filename="all", scope=scope)
            else:
                fio.save_persistables(exe, path, main, scope=scope)
            saved.append((path, "all" if i % 2 else None))
            for name in names[i % len(names)::3]:
                reads.append((name, np.asarray(scope.find_var(name).get_tensor()).copy()))
            time.sleep(0.002)
    finally:
        stop.set()
        trainer.join()
    assert not failures, failures
    assert len(states) > 20, "the training thread hardly ran"
    known = {_key(s): k for k, s in enumerate(states)}
    steps = []
    for path, filename in saved:
        loaded = fj.Scope()
        fio.load_persistables(None, path, main, filename=filename, scope=loaded)
        key = _key(_state(main, loaded))
        assert key in known, f"{path} is not the state after any step (a torn save)"
        steps.append(known[key])
    assert len(set(steps)) > 1, "every save saw the same step: no overlap with training was tested"
    for name, value in reads:
        assert any(np.array_equal(value, s[name]) for s in states), name


def test_a_load_while_another_thread_trains_is_applied_between_two_runs(tmp_path):
    main, startup, cost = _mlp()
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    feed = _batch()
    fio.save_persistables(exe, str(tmp_path / "init"), main, scope=scope)
    exe.run(main, feed=feed, fetch_list=[cost], scope=scope)
    stop, failures = threading.Event(), []

    def train():
        try:
            while not stop.is_set():
                exe.run(main, feed=feed, fetch_list=[cost], scope=scope)
        except BaseException as exc:                   # pragma: no cover - reported below
            failures.append(exc)

    trainer = threading.Thread(target=train)
    trainer.start()
    try:
        for _ in range(20):
            fio.load_persistables(exe, str(tmp_path / "init"), main, scope=scope)
            time.sleep(0.002)
    finally:
        stop.set()
        trainer.join()
    assert not failures, failures


# -- 8: a kill never tears a checkpoint ------------------------------------------------------------------
def _build(n_vars):
    """A program of ``n_vars`` parameters w0000... of shape [4], all added to the input x."""
    main = fj.Program()
    with fj.program_guard(main, fj.Program()), fj.unique_name.guard():
        x = layer.data("x", shape=[4])
        block = main.global_block()
        y = x
        for i in range(n_vars):
            y = y + block.create_parameter(f"w{i:04d}", [4], "float32")
    return main, x, y


def _fill(scope, n_vars, generation):
    for i in range(n_vars):
        scope.var(f"w{i:04d}").get_tensor().set(np.full(4, generation, np.float32))


def _save(kind, target, n_vars, program, x, y, scope):
    if kind == "per-file":
        fio.save_persistables(None, target, program, scope=scope)
    elif kind == "combined":
        fio.save_persistables(None, target, program, filename="params", scope=scope)
    else:
        fio.save_inference_model(os.path.join(target, "model"), [x], [y], None, program=program, scope=scope)


def _load_generations(kind, target, n_vars, program):
    scope = fj.Scope()
    if kind == "per-file":
        fio.load_persistables(None, target, program, scope=scope)
    elif kind == "combined":
        fio.load_persistables(None, target, program, filename="params", scope=scope)
    else:
        fio.load_inference_model(os.path.join(target, "model"), None, scope=scope)
    return {float(np.asarray(scope.find_var(f"w{i:04d}").get_tensor())[0]) for i in range(n_vars)}


def _expected_files(kind, n_vars):
    if kind == "per-file":
        return {f"w{i:04d}" for i in range(n_vars)} | {MANIFEST}
    if kind == "combined":
        return {"params", MANIFEST}
    return {"model.pdmodel", "model.pdiparams", MANIFEST}


def _saver(kind, target, n_vars, program, x, y, generation, kill):
    """Save generation after generation (printing each one done); after the first, optionally
    kill this process at the N-th call of ``os.replace`` or ``os.fsync`` (``replace:N``, ``fsync:N``)."""
    scope = fj.Scope()
    armed = False
    if kill != "none":
        call, n = kill.split(":")
        real, count = getattr(os, call), [0]

        def hooked(*args, **kwargs):
            if armed:
                count[0] += 1
                if count[0] == int(n):
                    os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        setattr(os, call, hooked)
    print("start", os.getpid(), flush=True)
    for generation in range(generation, generation + 50):
        _fill(scope, n_vars, generation)
        _save(kind, target, n_vars, program, x, y, scope)
        print("done", generation, flush=True)
        armed = True


def _zygote(kind, target, n_vars):
    """The child of the kill tests: imports fluidjax and builds the program once, then forks one
    saver per line ``generation kill`` read from stdin (JAX is imported, never started: the savers
    only write NumPy values), and reaps it."""
    program, x, y = _build(n_vars)
    print("ready", flush=True)
    for line in sys.stdin:
        generation, kill = line.split()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                _saver(kind, target, n_vars, program, x, y, int(generation), kill)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        print("reaped", flush=True)


def _kill_rounds(tmp_path, kind, n_vars, rounds, seed):
    """Save over an existing checkpoint in a child process and SIGKILL it ``rounds`` times: two in
    three inside the save at a chosen call of os.replace or os.fsync, one in three at a random moment.
    After each kill a load must give exactly the last complete save or the interrupted one, and the
    next save must leave only the checkpoint's own files. Returns how many loads gave each."""
    rng = random.Random(seed)
    target = str(tmp_path / "ckpt")
    program, x, y = _build(n_vars)
    files_per_save = n_vars if kind == "per-file" else (1 if kind == "combined" else 2)
    generation, outcomes = 0, {"old": 0, "new": 0}
    save_time = None
    zygote = subprocess.Popen([sys.executable, os.path.abspath(__file__), "zygote", kind, target, str(n_vars)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    saver = None
    try:
        assert zygote.stdout.readline().strip() == "ready"
        for round_ in range(rounds):
            mode = ["replace", "fsync", "none"][round_ % 3]
            kill = "none" if mode == "none" else f"{mode}:{rng.randint(1, files_per_save + 3)}"
            zygote.stdin.write(f"{generation} {kill}\n")
            zygote.stdin.flush()
            word, pid = zygote.stdout.readline().split()
            assert word == "start"
            saver = int(pid)
            begin = time.perf_counter()
            word, first = zygote.stdout.readline().split()   # one complete save over the old checkpoint
            assert word == "done"
            save_time = save_time or time.perf_counter() - begin
            if mode == "none":
                time.sleep(rng.uniform(0.0, 1.2 * save_time))
                os.kill(saver, signal.SIGKILL)
            # else it kills itself inside the next save
            finished = [int(first)]
            while (line := zygote.stdout.readline().split()) != ["reaped"]:
                assert line and line[0] == "done", line
                finished.append(int(line[1]))
            saver = None
            done = max(finished)
            found = _load_generations(kind, target, n_vars, program)
            assert len(found) == 1, f"round {round_} ({kill}): a load mixes generations {sorted(found)}"
            loaded = found.pop()
            assert loaded in (done, done + 1), (round_, kill, loaded, done)
            outcomes["old" if loaded == done else "new"] += 1
            # The next save (here) finishes or discards what the killed one left, and leaves no stray.
            generation = int(loaded) + 1
            scope = fj.Scope()
            _fill(scope, n_vars, generation)
            _save(kind, target, n_vars, program, x, y, scope)
            assert set(os.listdir(target)) == _expected_files(kind, n_vars), round_
            assert _load_generations(kind, target, n_vars, program) == {generation}
            generation += 1
    finally:
        if saver is not None:
            try:
                os.kill(saver, signal.SIGKILL)
            except ProcessLookupError:
                pass
        zygote.stdin.close()
        zygote.kill()
        zygote.wait()
    return outcomes


def test_a_per_variable_checkpoint_killed_while_saving_loads_whole(tmp_path):
    outcomes = _kill_rounds(tmp_path, "per-file", n_vars=150, rounds=6, seed=0)
    assert sum(outcomes.values()) == 6


@pytest.mark.slow
@pytest.mark.parametrize("kind,n_vars,rounds", [("per-file", 2000, 3), ("combined", 2000, 4),
                                                ("inference", 200, 4)])
def test_checkpoints_killed_at_random_moments_load_whole(tmp_path, kind, n_vars, rounds):
    outcomes = _kill_rounds(tmp_path, kind, n_vars, rounds, seed=1)
    print(kind, n_vars, "variables,", rounds, "kills: the load gave", outcomes)
    assert sum(outcomes.values()) == rounds


def test_combined_and_inference_saves_killed_while_saving_load_whole(tmp_path):
    for kind in ("combined", "inference"):
        _kill_rounds(tmp_path / kind, kind, n_vars=20, rounds=3, seed=2)


def _small_checkpoint(tmp_path, n_vars=3):
    program, x, y = _build(n_vars)
    scope = fj.Scope()
    _fill(scope, n_vars, 1)
    target = str(tmp_path / "ck")
    fio.save_persistables(None, target, program, scope=scope)
    return program, target


def test_a_directory_with_files_from_two_saves_is_refused(tmp_path):
    program, target = _small_checkpoint(tmp_path)
    assert MANIFEST in os.listdir(target)
    # Another program rewrites one file in place (as Paddle's save op does), the others stay ours.
    time.sleep(0.01)
    with open(os.path.join(target, "w0001"), "wb") as f:
        ts.write_tensor(f, np.full(4, 2, np.float32))
    with pytest.raises(TensorFormatError, match="different saves") as info:
        fio.load_persistables(None, target, program, scope=fj.Scope())
    assert "w0001" in str(info.value) and MANIFEST in str(info.value)
    # Without the manifest the files load as they are (a Paddle directory).
    os.remove(os.path.join(target, MANIFEST))
    fio.load_persistables(None, target, program, scope=fj.Scope())


def test_a_directory_rewritten_whole_by_another_program_loads(tmp_path):
    program, target = _small_checkpoint(tmp_path)
    time.sleep(0.01)
    for i in range(3):                 # every file rewritten, one of them with the same value
        with open(os.path.join(target, f"w{i:04d}"), "wb") as f:
            ts.write_tensor(f, np.full(4, 1 if i == 0 else 2, np.float32))
    scope = fj.Scope()
    fio.load_persistables(None, target, program, scope=scope)
    assert float(np.asarray(scope.find_var("w0002").get_tensor())[0]) == 2


def test_a_corrupted_file_is_refused_and_a_copied_directory_verifies(tmp_path):
    import shutil

    program, target = _small_checkpoint(tmp_path)
    copy = str(tmp_path / "copy")
    shutil.copytree(target, copy)                  # new inodes, same bytes: still verified
    fio.load_persistables(None, copy, program, scope=fj.Scope())
    path = os.path.join(target, "w0002")
    st = os.stat(path)
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 1
    with open(path, "r+b") as f:                   # the same inode, a flipped bit, the old mtime
        f.write(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(TensorFormatError, match="w0002.*(checksum|changed)"):
        fio.load_persistables(None, target, program, scope=fj.Scope())


def test_strays_of_dead_savers_are_removed_and_live_ones_kept(tmp_path):
    program, target = _small_checkpoint(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    from fluidjax.frontend.io import atomic

    stray = atomic.temp_name(os.path.join(target, "w0000"), pid=dead.pid)
    live = atomic.temp_name(os.path.join(target, "w0001"), pid=os.getppid())
    for p in (stray, live):
        open(p, "wb").write(b"partial")
    scope = fj.Scope()
    _fill(scope, 3, 2)
    fio.save_persistables(None, target, program, scope=scope)
    left = set(os.listdir(target))
    assert os.path.basename(stray) not in left and os.path.basename(live) in left


def test_paddle_reads_a_checkpoint_directory_with_its_manifest(tmp_path):
    import paddle  # noqa: E402  (after fluidjax)

    program, x, y = _build(3)
    scope = fj.Scope()
    _fill(scope, 3, 7)
    target = str(tmp_path / "ck")
    fio.save_persistables(None, target, program, scope=scope)
    paddle.enable_static()
    p_main = paddle.static.Program()
    with paddle.static.program_guard(p_main, paddle.static.Program()):
        ws = [paddle.static.create_parameter([4], "float32", name=f"w{i:04d}") for i in range(3)]
    exe = paddle.static.Executor(paddle.CPUPlace())
    p_scope = paddle.static.Scope()
    with paddle.static.scope_guard(p_scope):
        paddle.static.load_vars(exe, target, p_main, vars=ws)
        got = [np.array(p_scope.find_var(w.name).get_tensor()) for w in ws]
    assert all((g == 7).all() for g in got)
    state = paddle.static.load_program_state(target)          # reads every file as a tensor
    assert all((state[f"w{i:04d}"] == 7).all() for i in range(3))


# -- 13: hostile tensor headers ------------------------------------------------------------------------
def _varint(n):
    n &= (1 << 64) - 1                     # int64 fields: a negative number is ten bytes
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _stream(dims, dtype=5, lod=(), data=b""):
    """A tensor stream with any header (a TensorDesc encoded by hand: protobuf refuses unknown enums)."""
    raw = b"\x08" + _varint(dtype) + b"".join(b"\x10" + _varint(d) for d in dims)
    parts = [struct.pack("<IQ", 0, len(lod))]
    for level in lod:
        parts.append(struct.pack("<Q", len(level) * 8) + b"".join(struct.pack("<Q", v) for v in level))
    parts.append(struct.pack("<Ii", 0, len(raw)) + raw + data)
    return b"".join(parts)


@pytest.mark.parametrize("dims", [[1] * 65, [0, 2 ** 63 - 1], [0] * 64 + [3], [2 ** 62, 2 ** 62, 0]])
def test_impossible_shapes_are_tensor_format_errors(tmp_path, dims):
    (tmp_path / "w").write_bytes(_stream(dims, data=b"\0" * 64))
    var = fj.default_main_program().global_block().create_var("w", shape=[-1] * len(dims), persistable=True)
    with pytest.raises(TensorFormatError) as info:
        fio.load_vars(None, str(tmp_path), vars=[var])
    assert info.value.variable == "w" and info.value.path.endswith("w")
    assert "w" in str(info.value) and str(tmp_path) in str(info.value)


def test_fuzzed_tensor_headers_raise_only_tensor_format_errors(tmp_path):
    rng = random.Random(13)
    specials = [0, 1, 2, 3, 7, -1, -2 ** 63, 2 ** 31, 2 ** 32 + 1, 2 ** 40, 2 ** 62, 2 ** 63 - 1]
    dtypes_ = list(range(0, 32)) + [99, 2 ** 31 - 1]
    path = str(tmp_path / "w")
    block = fj.default_main_program().global_block()
    free = {}
    escaped = []
    for i in range(600):
        ndims = rng.choice([0, 1, 2, 3, 4, 63, 64, 65, 100])
        dims = [rng.choice(specials) if rng.random() < 0.3 else rng.randint(0, 4) for _ in range(ndims)]
        lod = []
        for _ in range(rng.choice([0, 0, 1, 2, 3])):
            size = rng.choice([0, 1, 2, 3, 5])
            lod.append([rng.choice([0, 1, 2, 3, 2 ** 63, 2 ** 64 - 1]) for _ in range(size)])
        data = bytes(rng.randrange(256) for _ in range(rng.choice([0, 4, 16, 64, 256])))
        stream = _stream(dims, rng.choice(dtypes_), lod, data)
        with open(path, "wb") as f:
            f.write(stream)
        if ndims not in free:
            free[ndims] = block.create_var(f"v{ndims}", shape=[-1] * ndims, persistable=True)
        var = free[ndims] if rng.random() < 0.8 else block.create_var(f"x{i}", shape=[2, 2], persistable=True)
        os.replace(path, str(tmp_path / var.name))
        try:
            fio.load_vars(None, str(tmp_path), vars=[var], scope=fj.Scope())
        except (TensorFormatError, ParameterMismatchError) as exc:
            assert exc.path and exc.variable == var.name
        except Exception as exc:  # noqa: BLE001 - the point of the test
            escaped.append((dims, lod, repr(exc)[:200]))
        try:
            reader = ts.TensorReader(io.BytesIO(stream), "mem", len(stream))
            reader.read_tensor("v")
        except TensorFormatError:
            pass
        except Exception as exc:  # noqa: BLE001
            escaped.append(("reader", dims, lod, repr(exc)[:200]))
    assert not escaped, escaped[:5]


def test_a_bfloat16_tensor_reads_back():
    # Found by the fuzzer above: memoryview cannot cast an ml_dtypes buffer, so reading one failed
    # with a plain ValueError (writing went through).
    import ml_dtypes

    value = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16)
    data = ts.tensor_to_bytes(value)
    array, _ = ts.TensorReader(io.BytesIO(data), "mem", len(data)).read_tensor("w")
    assert array.dtype == value.dtype and np.array_equal(array.astype(np.float32), value.astype(np.float32))


# -- 14: huge declared sizes in `fluidjax inspect` -------------------------------------------------------
def test_inspect_counts_huge_parameters_exactly(tmp_path, capsys):
    from fluidjax.frontend import cli

    main = fj.Program()
    with fj.program_guard(main, fj.Program()):
        x = layer.data("x", shape=[2 ** 40])
        w = main.global_block().create_parameter("w", [2 ** 40, 2 ** 40], "float32")
        y = layer.matmul(x, w) if hasattr(layer, "matmul") else layer.mul(x, w)
    desc = fio.saved.inference_program_desc(main, ["x"], [y.name])
    (tmp_path / "m.pdmodel").write_bytes(desc.SerializeToString())
    assert cli.main(["inspect", str(tmp_path / "m"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["parameters"] == {"tensors": 1, "values": 2 ** 80, "bytes": 4 * 2 ** 80}
    assert cli.main(["inspect", str(tmp_path / "m")]) == 0
    assert f"{2 ** 80:,} values" in capsys.readouterr().out


# -- 15: file modes follow the umask ----------------------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_saved_files_follow_the_umask(tmp_path, umask):
    program, x, y = _build(2)
    scope = fj.Scope()
    _fill(scope, 2, 1)
    want = 0o666 & ~umask
    old = os.umask(umask)
    try:
        ck, comb, model = str(tmp_path / "ck"), str(tmp_path / "comb"), str(tmp_path / "inf" / "m")
        os.makedirs(comb)
        open(os.path.join(comb, "params"), "wb").close()
        os.chmod(os.path.join(comb, "params"), 0o644)             # replaced: takes the umask's mode too
        fio.save_persistables(None, ck, program, scope=scope)
        fio.save_persistables(None, comb, program, filename="params", scope=scope)
        fio.save_inference_model(model, [x], [y], None, program=program, scope=scope)
        fio.save_persistables(None, ck, program, scope=scope)      # over the first save
        paths = [os.path.join(ck, n) for n in os.listdir(ck)] + [os.path.join(comb, n) for n in os.listdir(comb)] \
            + [model + ".pdmodel", model + ".pdiparams", os.path.join(os.path.dirname(model), MANIFEST)]
    finally:
        os.umask(old)
    modes = {os.path.relpath(p, tmp_path): oct(stat.S_IMODE(os.stat(p).st_mode)) for p in paths}
    assert set(modes.values()) == {oct(want)}, modes
    assert stat.S_IMODE(os.stat(ck).st_mode) == 0o777 & ~umask


# -- 16: cond branches of different dtypes ------------------------------------------------------------------
def test_cond_branches_of_different_dtypes_name_both_dtypes():
    with fj.program_guard(fj.Program(), fj.Program()):
        x = layer.data("x", shape=[3])
        pred = layer.reduce_sum(x) > 0
        with pytest.raises(fj.FluidJaxError) as info:
            layer.cond(pred, lambda: [x * 2.0, x], lambda: [x, layer.cast(x, "int64")])
    text = str(info.value)
    assert "float32" in text and "int64" in text and "[-1, 3]" in text, text
    assert "output 1" in text or "1" in text
    assert isinstance(info.value, (TypeError, ValueError))


def test_select_input_of_different_dtypes_at_run_time_names_the_dtypes():
    main = fj.Program()
    block = main.global_block()
    a = block.create_var("a", shape=(2, 3), dtype="float32", persistable=True)
    b = block.create_var("b", shape=(2, 3), dtype="int64", persistable=True)
    m = block.create_var("m", shape=(1,), dtype="int32", persistable=True)
    out = block.create_var("out", shape=(2, 3), dtype="int64")
    block.append_op("select_input", {"X": [a, b], "Mask": [m]}, {"Out": [out]})
    scope = fj.Scope()
    for name, value in (("a", np.zeros((2, 3), "float32")), ("b", np.zeros((2, 3), "int64")),
                        ("m", np.zeros(1, "int32"))):
        scope.var(name).get_tensor().set(value)
    with pytest.raises(fj.OpRuntimeError) as info:
        fj.Executor().run(main, fetch_list=[out], scope=scope)
    assert "float32" in str(info.value) and "int64" in str(info.value), str(info.value)


# -- 17: LoD and cond mistakes are typed, and keep their Python base class -----------------------------------
@pytest.mark.parametrize("lengths,base", [([[2, -1]], ValueError), ([[2.0, 1]], TypeError), ([[1.5]], TypeError),
                                          ([[1, 1]], ValueError)])
def test_bad_sequence_lengths_are_lod_errors(lengths, base):
    with pytest.raises(fj.LoDError) as info:
        fj.create_lod_tensor(np.zeros((1, 1)), lengths)
    assert isinstance(info.value, base) and isinstance(info.value, fj.FluidJaxError)


@pytest.mark.parametrize("lod,rule", [([[1, 5]], "start at 0"), ([[0, 3, 2, 5]], "non-decreasing"),
                                      ([[0, 4]], "the data has 5 rows")])
def test_bad_offsets_are_lod_errors(lod, rule):
    t = fj.LoDTensor(np.zeros((5, 1)))
    with pytest.raises(fj.LoDError, match=rule) as info:
        t.set_lod(lod)
    assert isinstance(info.value, ValueError)
    assert t.lod() == []


def test_a_bad_cond_pred_is_a_typed_error_that_is_still_a_type_error():
    with fj.program_guard(fj.Program(), fj.Program()):
        x = layer.data("x", shape=[3])
        for pred in (True, x, layer.reduce_sum(x), layer.cast(x, "bool")):
            with pytest.raises(fj.FluidJaxError) as info:
                layer.cond(pred, lambda: x, lambda: x)
            assert isinstance(info.value, TypeError), pred
    for name in ("LoDError", "LoDTypeError", "InputTypeError"):
        assert name in fj.__all__ and issubclass(getattr(fj, name), fj.FluidJaxError)


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "zygote":
    _zygote(sys.argv[2], sys.argv[3], int(sys.argv[4]))


# -- Ctrl-C inside a save (found by the soak, tests/soak_worker.py) ----------------------------------
def _trained(tmp_path):
    main, startup, cost = _mlp()
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    exe.run(main, feed=_batch(), fetch_list=[cost], scope=scope)
    return main, exe, scope


def test_ctrl_c_just_as_a_save_takes_the_directory_lock_does_not_keep_it(tmp_path, monkeypatch):
    """A Ctrl-C handled right after ``flock`` took the directory's lock left its descriptor open:
    the lock stayed held until the process ended, and every later save into the directory, from
    any thread, waited forever (the soak's save thread hung)."""
    import fcntl

    main, exe, scope = _trained(tmp_path)
    real_flock = fcntl.flock
    calls = []

    def flock_then_ctrl_c(fd, op):
        real_flock(fd, op)
        if not calls:
            calls.append(op)
            raise KeyboardInterrupt("as the lock was taken")

    monkeypatch.setattr(fcntl, "flock", flock_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        fio.save_persistables(exe, str(tmp_path / "ckpt"), main_program=main, scope=scope)
    done = []
    saver = threading.Thread(target=lambda: done.append(
        fio.save_persistables(exe, str(tmp_path / "ckpt"), main_program=main, scope=scope)), daemon=True)
    saver.start()
    saver.join(30)
    assert done, "a save after the interrupted one waits for the directory's lock forever"
    loaded = fj.Scope()
    fio.load_persistables(exe, str(tmp_path / "ckpt"), main_program=main, scope=loaded)
    assert _key(_state(main, loaded)) == _key(_state(main, scope))


def test_ctrl_c_just_as_the_directory_lock_is_handed_back_does_not_keep_it(tmp_path, monkeypatch):
    """A Ctrl-C handled just as the function that took the directory's lock returned, before its
    caller stored the descriptor: the lock stayed held for the process's life (the dense soak's
    save thread and main thread both waited for it). The descriptor is now stored where the lock
    is taken, so the interrupted save's clean-up closes it."""
    from fluidjax.frontend.io import atomic

    main, exe, scope = _trained(tmp_path)
    real_lock_dir = atomic._lock_dir
    calls = []

    def lock_then_ctrl_c(*args):
        got = real_lock_dir(*args)
        if not calls:
            calls.append(args)
            raise KeyboardInterrupt("as the lock was handed back")
        return got

    monkeypatch.setattr(atomic, "_lock_dir", lock_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        fio.save_persistables(exe, str(tmp_path / "ckpt"), main_program=main, scope=scope)
    assert calls
    done = []
    saver = threading.Thread(target=lambda: done.append(
        fio.save_persistables(exe, str(tmp_path / "ckpt"), main_program=main, scope=scope)), daemon=True)
    saver.start()
    saver.join(30)
    assert done, "a save after the interrupted one waits for the directory's lock forever"


def test_ctrl_c_just_after_a_temporary_is_registered_leaves_no_stray(tmp_path, monkeypatch):
    """A Ctrl-C handled just after a new temporary's name was registered as this process's: nobody
    forgot it, and a live process's temporaries are never removed, so it stayed beside the
    checkpoint for the life of the process."""
    from fluidjax.frontend.io import atomic

    main, exe, scope = _trained(tmp_path)

    class InterruptedOnce(set):
        fired = False

        def add(self, item):
            super().add(item)
            if not InterruptedOnce.fired:
                InterruptedOnce.fired = True
                raise KeyboardInterrupt("just after the temporary was registered")

    monkeypatch.setattr(atomic, "_active", InterruptedOnce(atomic._active))
    ckpt = tmp_path / "ckpt"
    with pytest.raises(KeyboardInterrupt):
        fio.save_persistables(exe, str(ckpt), main_program=main, scope=scope)
    assert InterruptedOnce.fired
    fio.save_persistables(exe, str(ckpt), main_program=main, scope=scope)
    strays = [f for f in os.listdir(ckpt) if f.endswith(".tmp")]
    assert not strays, strays
    assert not atomic._active, atomic._active


def test_ctrl_c_just_after_a_save_commits_its_manifest_finishes_the_save(tmp_path, monkeypatch):
    """A Ctrl-C handled just after the manifest's rename (the instant a save into a directory
    exists) came before the save knew it had committed: ``abort`` deleted the temporaries the new
    manifest names as the files' content, and the directory held the old files under the new
    save's checksums. One later, between the renames, left the targets part old (what Paddle
    reads) and temporaries beside them until the next save. The save now finishes first (found by
    the DynamicRNN soak, whose last save was such a one)."""
    from fluidjax.frontend.io import atomic

    main, exe, scope = _trained(tmp_path)
    ckpt = str(tmp_path / "ckpt")
    fio.save_persistables(exe, ckpt, main_program=main, scope=scope)
    first = _key(_state(main, scope))
    exe.run(main, feed=_batch(seed=1), scope=scope)           # a second step: the save to come differs
    assert _key(_state(main, scope)) != first
    real, fired = atomic.fsync_dir, []

    def fsync_then_ctrl_c(folder):
        real(folder)
        if not fired:                       # the first: right after the manifest's rename
            fired.append(folder)
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(atomic, "fsync_dir", fsync_then_ctrl_c)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            fio.save_persistables(exe, ckpt, main_program=main, scope=scope)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert fired
    strays = [f for f in os.listdir(ckpt) if f.endswith(".tmp")]
    assert not strays, strays
    loaded = fj.Scope()
    fio.load_persistables(exe, ckpt, main_program=main, scope=loaded)
    assert _key(_state(main, loaded)) == _key(_state(main, scope))


def test_thread_map_under_a_storm_of_ctrl_c_never_hangs():
    """The fsync of a save's files (and the startup's parallel draws) run on lowering.signals.
    thread_map. Under SIGALRMs every 50-400 µs whose handler raises KeyboardInterrupt, 300 calls
    each either return every result in order or raise KeyboardInterrupt, and none hangs (a
    ThreadPoolExecutor hung here: a Ctrl-C inside its bookkeeping leaked its semaphore's lock)."""
    from fluidjax.lowering.signals import thread_map

    armed = [False]

    def interrupt(signum, frame):
        # one Ctrl-C per armed call, only inside the try below (a late timer must not reach pytest)
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt

    def slow_square(x):
        time.sleep(0.0002)
        return x * x

    previous = signal.signal(signal.SIGALRM, interrupt)
    outcomes = {"returned": 0, "interrupted": 0}
    rng = random.Random(3)
    start = time.monotonic()
    try:
        for _ in range(300):
            try:
                armed[0] = True
                signal.setitimer(signal.ITIMER_REAL, rng.uniform(5e-5, 4e-4))
                got = thread_map(slow_square, range(40), 8)
                armed[0] = False
                assert got == [x * x for x in range(40)]
                outcomes["returned"] += 1
            except KeyboardInterrupt:
                outcomes["interrupted"] += 1
            finally:
                armed[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - start < 60, outcomes
    assert outcomes["interrupted"] >= 30 and sum(outcomes.values()) == 300, outcomes
    with pytest.raises(ZeroDivisionError):
        thread_map(lambda x: 1 // x, [3, 2, 0, 1], 2)
