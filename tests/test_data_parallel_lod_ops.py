"""LoD data-parallel runs (Paddle's ParallelExecutor: each device runs its own share of the
sequences) of the ops that mix rows across the batch: ``batch_norm`` over LoD rows, with
``BuildStrategy.sync_batch_norm`` False (each device's statistics, Paddle's default) and True
(the global batch's statistics).

Oracles: per-device statistics — each device's share run alone through the one-device Executor
from the same state, one SGD step each; CoeffNumDevice averages the gradients, so (SGD being
linear in the gradient) the parameters are the mean of the shares' parameters, and the moving
statistics are averaged too (fluidjax's rule for state the devices compute differently).
sync_batch_norm=True — a one-device run on the whole batch (equal shares, a mean loss).
The multi-device case runs this file as a script on 4 forced host devices (a subprocess).
"""

from __future__ import annotations

import os
import subprocess
import sys

if __name__ == "__main__":   # the worker: 4 host devices before jax is imported
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
    os.environ["JAX_PLATFORMS"] = "cpu"

import numpy as np  # noqa: E402

import fluidjax as fj  # noqa: E402
from fluidjax import layer  # noqa: E402

DEVICES = 4


def _bn_program(optimize: bool = True):
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 5
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", shape=[3], dtype="float32", lod_level=1)
        y = layer.data("y", shape=[1], dtype="float32")
        h = layer.fc(x, 4)
        h = fj.layers.batch_norm(h, momentum=0.8)
        pooled = layer.sequence_pool(h, "sum")
        pred = layer.fc(pooled, 1)
        loss = layer.mean(layer.square_error_cost(pred, y))
        if optimize:
            fj.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return main, startup, loss


def _state(main, scope) -> dict:
    names = [n for n, v in main.global_block().vars.items() if v.persistable and v.dtype is not None]
    return {n: np.array(scope.find_var(n).get_tensor()) for n in names
            if scope.find_var(n) is not None and scope.find_var(n).get_tensor()._is_initialized()}


def _lod_feed(rng, lens, width=3):
    return fj.create_lod_tensor(rng.standard_normal((sum(lens), width)).astype("float32") * 2 + 1, [lens],
                                fj.CPUPlace())


def _share(feed, lens, lo, hi):
    rows = np.asarray(feed["x"].value())
    start, stop = sum(lens[:lo]), sum(lens[:hi])
    return {"x": fj.create_lod_tensor(rows[start:stop], [lens[lo:hi]], fj.CPUPlace()), "y": feed["y"][lo:hi]}


def _one_device(main, startup, feed) -> dict:
    scope = fj.Scope()
    exe = fj.Executor(fj.CPUPlace())
    with fj.scope_guard(scope):
        exe.run(startup)
        exe.run(main, feed=feed)
        return _state(main, scope)


def _data_parallel(main, startup, loss, feed, sync: bool) -> dict:
    scope = fj.Scope()
    exe = fj.Executor(fj.CPUPlace())
    with fj.scope_guard(scope):
        exe.run(startup)
        strategy = fj.BuildStrategy()
        strategy.sync_batch_norm = sync
        compiled = fj.CompiledProgram(main, strategy).with_data_parallel(loss_name=loss.name)
        exe.run(compiled, feed=feed)
        return _state(main, scope)


def _check_batch_norm() -> None:
    _check_batch_norm_even()
    _check_batch_norm_uneven()


def _check_batch_norm_uneven() -> None:
    """7 sequences on 4 devices (Paddle's split 2,2,2,1: shares padded to buckets): per device,
    the shares' one-device runs averaged; synchronized, the moving statistics are the whole
    batch's (every real row once, no padding row), while the parameters follow the mean of the
    devices' mean losses (not the whole batch's mean), so only the statistics are compared."""
    main, startup, loss = _bn_program()
    rng = np.random.default_rng(3)
    lens = rng.integers(1, 6, 7).tolist()
    feed = {"x": _lod_feed(rng, lens), "y": rng.standard_normal((7, 1)).astype("float32")}
    bounds = [(0, 2), (2, 4), (4, 6), (6, 7)]
    shares = [_one_device(main, startup, _share(feed, lens, lo, hi)) for lo, hi in bounds]
    per_device = {n: np.mean([s[n] for s in shares], axis=0) for n in shares[0]}
    got = _data_parallel(main, startup, loss, feed, sync=False)
    for n, want in per_device.items():
        np.testing.assert_allclose(got[n], want, rtol=1e-4, atol=1e-5, err_msg=f"uneven per-device {n}")
    whole = _one_device(main, startup, feed)
    got = _data_parallel(main, startup, loss, feed, sync=True)
    stats = [n for n in whole if "batch_norm" in n and n.endswith((".w_1", ".w_2"))]
    assert len(stats) == 2, sorted(whole)
    for n in stats:
        np.testing.assert_allclose(got[n], whole[n], rtol=1e-4, atol=1e-5, err_msg=f"uneven sync {n}")


def _check_batch_norm_even() -> None:
    main, startup, loss = _bn_program()
    lens, feed = _bn_batch()
    shares = [_one_device(main, startup, _share(feed, lens, 2 * d, 2 * d + 2)) for d in range(DEVICES)]
    per_device = {n: np.mean([s[n] for s in shares], axis=0) for n in shares[0]}
    whole = _one_device(main, startup, feed)
    got = _data_parallel(main, startup, loss, feed, sync=False)
    bn_mean = [n for n in got if "batch_norm" in n and n.endswith(".w_1")]
    assert bn_mean, sorted(got)
    for n, want in per_device.items():
        np.testing.assert_allclose(got[n], want, rtol=1e-4, atol=1e-5, err_msg=f"per-device {n}")
    # the per-device statistics differ from the whole batch's (the oracle can tell them apart)
    assert not np.allclose(per_device[bn_mean[0]], whole[bn_mean[0]], atol=1e-4)
    got = _data_parallel(main, startup, loss, feed, sync=True)
    for n, want in whole.items():
        np.testing.assert_allclose(got[n], want, rtol=1e-4, atol=1e-5, err_msg=f"sync {n}")


def _train_program(kind: str):
    """A LoD training program with a mean loss: ``warpctc`` (CTC on LoD logits and labels) or
    ``gru`` (dynamic_gru, the last step pooled)."""
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 7
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", shape=[3], dtype="float32", lod_level=1)
        if kind == "warpctc":
            label = layer.data("label", shape=[1], dtype="int32", lod_level=1)
            loss = layer.mean(fj.layers.warpctc(layer.fc(x, 5), label, blank=0))
        else:
            y = layer.data("y", shape=[1], dtype="float32")
            h = fj.layers.dynamic_gru(layer.fc(x, 3 * 4), 4)
            pred = layer.fc(layer.sequence_pool(h, "last"), 1)
            loss = layer.mean(layer.square_error_cost(pred, y))
        fj.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return main, startup, loss


def _check_equal_to_whole(kind: str) -> None:
    """Equal shares (2 sequences per device) and a mean loss: one step equals one device's on the
    whole batch (each device runs the op on its own sequences; the gradients averaged)."""
    main, startup, loss = _train_program(kind)
    rng = np.random.default_rng(1)
    count = 2 * DEVICES
    lens = rng.integers(3, 7, count).tolist()
    feed = {"x": _lod_feed(rng, lens)}
    if kind == "warpctc":
        label_lens = [int(rng.integers(1, n // 2 + 1)) for n in lens]
        feed["label"] = fj.create_lod_tensor(rng.integers(1, 5, (sum(label_lens), 1)).astype("int32"), [label_lens],
                                             fj.CPUPlace())
    else:
        feed["y"] = rng.standard_normal((count, 1)).astype("float32")
    whole = _one_device(main, startup, feed)
    got = _data_parallel(main, startup, loss, feed, sync=True)
    for n, want in whole.items():
        np.testing.assert_allclose(got[n], want, rtol=1e-4, atol=1e-5, err_msg=f"{kind} {n}")


def _check_beam_search() -> None:
    """One beam_search step on LoD ids/scores (2 source sentences per device, 1-3 prefixes each):
    beam search is per source sentence, so the merged per-device selection equals one device's
    on the whole batch (ids, scores and their two-level LoD)."""
    main, startup = fj.Program(), fj.Program()
    width, beam = 4, 2
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        pre_ids = layer.data("pre_ids", shape=[1], dtype="int64", lod_level=2)
        pre_scores = layer.data("pre_scores", shape=[1], dtype="float32", lod_level=2)
        ids = layer.data("ids", shape=[width], dtype="int64", lod_level=2)
        scores = layer.data("scores", shape=[width], dtype="float32", lod_level=2)
        sel_ids, sel_scores = layer.beam_search(pre_ids, pre_scores, ids, scores, beam, end_id=0)
    rng = np.random.default_rng(2)
    sources = 2 * DEVICES
    prefixes = rng.integers(1, 4, sources).tolist()
    rows = sum(prefixes)
    lod = [prefixes, [1] * rows]
    score_rows = rng.permutation(rows * width).reshape(rows, width).astype("float32") / (rows * width) + 0.01
    feed = {"pre_ids": fj.create_lod_tensor(rng.integers(0, 3, (rows, 1)).astype("int64"), lod, fj.CPUPlace()),
            "pre_scores": fj.create_lod_tensor(-rng.permutation(rows).reshape(rows, 1).astype("float32") / rows, lod,
                                               fj.CPUPlace()),
            "ids": fj.create_lod_tensor(rng.integers(1, 10, (rows, width)).astype("int64"), lod, fj.CPUPlace()),
            "scores": fj.create_lod_tensor(score_rows, lod, fj.CPUPlace())}
    exe = fj.Executor(fj.CPUPlace())
    fetch = [sel_ids, sel_scores]
    with fj.scope_guard(fj.Scope()):
        want = exe.run(main, feed=feed, fetch_list=fetch, return_numpy=False)
        compiled = fj.CompiledProgram(main).with_data_parallel()
        got = exe.run(compiled, feed=feed, fetch_list=fetch, return_numpy=False)
    for a, b, name in zip(got, want, ("selected_ids", "selected_scores")):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, err_msg=name)
        assert a.lod() == b.lod(), (name, a.lod(), b.lod())


def _bn_batch():
    rng = np.random.default_rng(0)
    lens = rng.integers(1, 6, 2 * DEVICES).tolist()         # 2 sequences per device
    return lens, {"x": _lod_feed(rng, lens), "y": rng.standard_normal((2 * DEVICES, 1)).astype("float32")}


def test_the_per_device_emulation_is_paddles_parallel_executor():
    """The oracle of the per-device (sync_batch_norm=False) check is Paddle's rule: Paddle 2.6.2's
    ParallelExecutor on 4 CPU places (the same forward program bytes, Paddle's backward and SGD,
    the same initial state) ends with the parameters of the shares' one-device runs averaged,
    and its place 0 with the moving statistics of its own share (fluidjax averages the devices')."""
    main, startup, loss = _bn_program()
    lens, feed = _bn_batch()
    shares = [_one_device(main, startup, _share(feed, lens, 2 * d, 2 * d + 2)) for d in range(DEVICES)]
    scope = fj.Scope()
    with fj.scope_guard(scope):
        fj.Executor(fj.CPUPlace()).run(startup)
        start = _state(main, scope)
    forward, _, forward_loss = _bn_program(optimize=False)

    import paddle
    from paddle.base import core
    from paddle.base.compiler import DeviceType, _place_obj
    paddle.enable_static()
    prog = paddle.static.Program.parse_from_string(forward.serialize())
    p_startup = paddle.static.Program()
    with paddle.static.program_guard(prog, p_startup):
        paddle.optimizer.SGD(learning_rate=0.5).minimize(prog.global_block().var(forward_loss.name))
    p_scope, place = paddle.static.Scope(), paddle.CPUPlace()
    with paddle.static.scope_guard(p_scope):
        paddle.static.Executor(place).run(p_startup)
    for name, value in start.items():
        if prog.global_block().has_var(name):
            p_scope.var(name).get_tensor().set(value, place)
    strategy = paddle.static.ExecutionStrategy()
    strategy.num_threads = 1
    strategy._use_device = DeviceType.CPU
    build = paddle.static.BuildStrategy()
    assert not build.sync_batch_norm           # Paddle's default: each place's statistics
    persistable = sorted(n for n, v in prog.global_block().vars.items()
                         if v.persistable and v.type != core.VarDesc.VarType.RAW)
    graph = core.Graph(prog.desc)
    pe = core.ParallelExecutor([_place_obj(p) for p in paddle.static.cpu_places(DEVICES)], persistable,
                               forward_loss.name, p_scope, [], strategy, build, graph)
    x, y = core.LoDTensor(), core.LoDTensor()
    x.set(np.asarray(feed["x"].value()), place)
    x.set_recursive_sequence_lengths([lens])
    y.set(feed["y"], place)
    pe.feed_and_split_tensor_into_local_scopes({"x": x, "y": y})
    pe.run([forward_loss.name], True)
    local = pe.local_scopes()[0]
    # only the forward program's variables: Paddle's SGD names its learning-rate variable by its
    # own counter (learning_rate_1 after another Paddle test in this process), not fluidjax's
    theirs = {n: np.array(local.find_var(n).get_tensor()) for n in start if prog.global_block().has_var(n)}
    del pe, graph
    params = {p.name for p in main.global_block().all_parameters() if p.trainable}
    stats = [n for n in start if n not in params and "batch_norm" in n]
    assert len(stats) == 2, sorted(start)
    for n in params:
        want = np.mean([s[n] for s in shares], axis=0)
        np.testing.assert_allclose(theirs[n], want, rtol=1e-4, atol=2e-4, err_msg=n)   # fc_0.b_0: ~0 gradient, noise
        assert not np.allclose(theirs[n], start[n])
    for n in stats:
        np.testing.assert_allclose(theirs[n], shares[0][n], rtol=1e-4, atol=1e-5, err_msg=n)
    whole = _one_device(main, startup, feed)       # the whole batch's statistics: other parameters
    assert max(np.max(np.abs(theirs[n] - whole[n])) for n in params) > 1e-3


def _worker(which=("batch_norm", "warpctc", "gru", "beam_search")) -> None:
    import jax
    assert jax.device_count() == DEVICES
    for kind in which:
        if kind == "batch_norm":
            _check_batch_norm()
        elif kind == "beam_search":
            _check_beam_search()
        else:
            _check_equal_to_whole(kind)
        print(kind, "ok", flush=True)
    print("OK")


def test_lod_data_parallel_row_mixing_and_sequence_ops():
    """4 devices: batch_norm over LoD rows per device and synchronized (see the module doc)."""
    proc = subprocess.run([sys.executable, __file__], env=dict(os.environ), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stdout[-2000:] + proc.stderr[-4000:]


if __name__ == "__main__":
    _worker(*([sys.argv[1:]] if sys.argv[1:] else []))
