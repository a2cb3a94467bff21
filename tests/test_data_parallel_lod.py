"""Data-parallel training with LoD (variable-length) feeds: each device takes whole sequences.

Oracles: one device running the whole batch (a batch whose sequence count divides over the
devices), an emulation of Paddle's rule on one device (each share run alone from the step's
state, the states averaged: exact for Momentum), and Paddle 2.6.2's own ParallelExecutor on 8 CPU
places running the same forward program bytes. The 8-device runs are XLA's forced host devices
in one subprocess (``tests/dp_lod_worker.py``); two launched processes in another.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fluidjax as fj
from fluidjax.lowering.lod_split import merge_fetch, merge_place_feeds, paddle_shares, split_host
from fluidjax.lowering.lod_value import LoDValue

HERE = Path(__file__).resolve().parent
DEVICES = 8
MODELS = ("lstm", "drnn", "crf", "nested")


# -- the split rule (no devices needed) ---------------------------------------------------------------
def test_paddles_split_rule():
    assert paddle_shares(16, 8) == [2] * 8
    assert paddle_shares(15, 8) == [2] * 7 + [1]
    assert paddle_shares(23, 8) == [3] * 7 + [2]
    assert paddle_shares(8, 8) == [1] * 8
    assert paddle_shares(5, 2) == [3, 2]
    for refused in (10, 12, 7, 13):        # ceil-steps leave a device without a share: Paddle refuses
        with pytest.raises(fj.FeedError, match="refuses"):
            paddle_shares(refused, 8)


def test_nested_lod_splits_at_the_top_level_and_keeps_its_inner_levels():
    # 3 paragraphs of 2, 1, 2 sentences of 1, 2 | 3 | 1, 1 words: rows 0..7
    lod = [[0, 2, 3, 5], [0, 1, 3, 6, 7, 8]]
    data = np.arange(8).reshape(-1, 1)
    (d0, l0), (d1, l1) = split_host(data, lod, [2, 1])
    assert l0 == [[0, 2, 3], [0, 1, 3, 6]] and d0.ravel().tolist() == [0, 1, 2, 3, 4, 5]
    assert l1 == [[0, 2], [0, 1, 2]] and d1.ravel().tolist() == [6, 7]
    merged = merge_fetch([LoDValue(d0, [np.asarray(o) for o in l0]), LoDValue(d1, [np.asarray(o) for o in l1])])
    assert [o.tolist() for o in merged.offsets] == lod and merged.data.ravel().tolist() == list(range(8))
    assert merge_fetch([np.float32(1.0), np.float32(2.0)]).tolist() == [1.0, 2.0]


def test_per_place_feed_dicts_join_with_their_shares():
    a = {"w": fj.create_lod_tensor(np.arange(3).reshape(-1, 1), [[1, 2]]), "y": np.array([[0], [1]])}
    b = {"w": fj.create_lod_tensor(np.arange(3, 7).reshape(-1, 1), [[4]]), "y": np.array([[1]])}
    merged, shares = merge_place_feeds([a, b])
    assert merged["w"].lod() == [[0, 1, 3, 7]] and shares == {"w": [2, 1], "y": [2, 1]}
    with pytest.raises(fj.FeedError, match="different variables"):
        merge_place_feeds([a, {"w": a["w"]}])


def test_one_device_data_parallel_lod_run_equals_the_program():
    """with_data_parallel over this session's one device: the per-device (shard_map) step with a
    LoD feed gives the plain run's losses and parameters."""
    sys.path.insert(0, str(HERE))
    import dp_lod_worker as w
    main, startup, loss, feeds = w.build("crf")
    values = w.batches(3, 3)
    _, scope1, losses1 = w.train(main, startup, loss, feeds, values)
    compiled = fj.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
    _, scope2, losses2 = w.train(compiled, startup, loss, feeds, values)
    np.testing.assert_allclose(np.ravel(losses2), np.ravel(losses1), rtol=1e-6)
    names = w.state_names(main)
    assert w.max_rel(w.read(scope1, names), w.read(scope2, names)) <= 1e-6


# -- 8 devices ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def worker() -> dict:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={DEVICES}", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, str(HERE / "dp_lod_worker.py")], env=env, capture_output=True,
                          text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_even_batches_train_like_one_device(worker, model):
    r = worker[model]
    assert r["devices"] == DEVICES
    for key in [k for k in r if k.startswith("even_")]:
        assert r[key]["param_rel"] <= 1e-5, (key, r[key])
        # Fetched: each device's mean loss (Paddle merges per-device fetches); their mean is the batch's.
        assert r[key]["fetched_shape"] == [DEVICES] and r[key]["loss_rel"] <= 1e-5, r[key]
        assert r[key]["traces"] <= 2
    assert "even_full" in worker["lstm"]       # sharding="full" (FSDP) with LoD feeds too


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_uneven_batches_follow_paddles_rule(worker, model):
    """15 sequences on 8 devices: 2 each, the last 1; the step is the average of the per-share mean
    losses' gradients (CoeffNumDevice), not the global batch's."""
    r = worker[model]["uneven"]
    assert r["param_rel"] <= 1e-5, r
    # Momentum's velocities too (float32: the emulation averages in float64; measured <= 1.2e-5).
    assert r["state_rel"] <= 1e-4, r
    if model == "crf":       # a different step from one device on the whole batch
        assert r["one_device_rel"] > 1e-4, r


@pytest.mark.slow
def test_gradient_scale_one_sums_the_devices_gradients(worker):
    """BuildStrategy.GradientScaleStrategy.One: every device's loss gradient is 1 and the gradients
    are summed — 8 times the batch's for 8 equal shares of a mean loss, which for Momentum is one
    device at 8 times the learning rate — unlike the default average."""
    r = worker["crf"]["scale_one"]
    assert r["param_rel"] <= 1e-5 and r["mean_rel"] > 1e-3, r


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_a_batch_paddle_refuses_is_a_feed_error(worker, model):
    assert "refuses" in worker[model]["refused"]
    assert worker[model]["refused_scope_unchanged"]


@pytest.mark.slow
def test_one_feed_dict_per_device_is_honoured(worker):
    assert worker["lstm"]["per_place"]["state_rel"] <= 1e-5


@pytest.mark.slow
def test_an_epoch_of_random_counts_and_lengths_compiles_a_few_times(worker):
    r = worker["epoch"]
    assert len(r["counts"]) >= 10 and r["finite"], r
    assert r["traces"] <= 11, r


@pytest.mark.slow
def test_uneven_batches_match_paddles_parallel_executor(worker):
    """Paddle 2.6.2's ParallelExecutor on 8 CPU places, the same forward program bytes (Paddle's
    own backward and Momentum), the same 15-sequence batches and initial parameters: the same
    parameters after 5 steps as fluidjax's 8 devices."""
    sys.path.insert(0, str(HERE))
    import dp_lod_worker as w
    main, startup, loss, feeds = w.build("lstm")
    forward_main, forward_startup = fj.Program(), fj.Program()
    forward_main.random_seed = forward_startup.random_seed = 7
    with fj.unique_name.guard(), fj.program_guard(forward_main, forward_startup):
        from benchmarks import book_models as bm
        net = bm.understand_sentiment_lstm(dict_dim=w.DICT, emb_dim=8, hid_dim=36, stacked_num=3)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    params = {p.name: np.asarray(scope.find_var(p.name).get_tensor()).copy()
              for p in main.global_block().all_parameters()}
    values = w.batches(15, seed=1)
    got = _paddle_parallel_executor(forward_main.serialize(), net.loss.name, params, values)
    ours = {k: np.asarray(v, np.float32) for k, v in worker["lstm"]["uneven"]["params"].items()}
    assert set(ours) == set(got)
    assert w.max_rel(got, ours) <= 1e-5           # measured 1.0e-6
    assert w.max_rel(got, params) > 1e-3          # the parameters did move


def _paddle_parallel_executor(program_bytes: bytes, loss_name: str, params: dict, values: list) -> dict:
    import paddle
    from paddle.base import core
    from paddle.base.compiler import DeviceType, _place_obj
    paddle.enable_static()
    prog = paddle.static.Program.parse_from_string(program_bytes)
    startup = paddle.static.Program()
    with paddle.static.program_guard(prog, startup):
        paddle.optimizer.Momentum(learning_rate=0.05, momentum=0.9).minimize(prog.global_block().var(loss_name))
    scope, place = paddle.static.Scope(), paddle.CPUPlace()
    with paddle.static.scope_guard(scope):
        paddle.static.Executor(place).run(startup)
    for name, value in params.items():
        scope.var(name).get_tensor().set(value, place)
    strategy = paddle.static.ExecutionStrategy()
    strategy.num_threads = 1
    strategy._use_device = DeviceType.CPU
    persistable = sorted(n for n, v in prog.global_block().vars.items()
                         if v.persistable and v.type != core.VarDesc.VarType.RAW)
    graph = core.Graph(prog.desc)          # the executor keeps a pointer: keep the graph alive
    pe = core.ParallelExecutor([_place_obj(p) for p in paddle.static.cpu_places(DEVICES)], persistable, loss_name,
                               scope, [], strategy, paddle.static.BuildStrategy(), graph)
    for v in values:
        words, label = core.LoDTensor(), core.LoDTensor()
        words.set(v["ids"], place)
        words.set_recursive_sequence_lengths([v["lengths"]])
        label.set(v["labels"], place)
        pe.feed_and_split_tensor_into_local_scopes({"words": words, "label": label})
        pe.run([loss_name], True)
    # Each place holds its own copy of the parameters; the first's is the one Paddle saves.
    local = pe.local_scopes()[0]
    result = {name: np.array(local.find_var(name).get_tensor()) for name in params}
    del pe, graph
    return result


# -- several processes ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_two_processes_train_the_sentiment_model_like_one_device(tmp_path):
    """Two launched processes of 2 host devices each, each feeding its half of every 16-sequence
    batch as a LoDTensor: the parameters after 5 steps equal one device on the whole batches."""
    sys.path.insert(0, str(HERE))
    import dp_lod_worker as w
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-m", "fluidjax.distributed.launch", "--nproc", "2",
                           "--devices-per-proc", "2", "--timeout", "500", str(HERE / "dp_lod_worker.py"),
                           "--distributed", str(tmp_path / "run")], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    main, startup, loss, feeds = w.build("lstm")
    _, scope, _ = w.train(main, startup, loss, feeds, w.batches(16))
    want = w.read(scope, sorted(p.name for p in main.global_block().all_parameters()))
    for rank in (0, 1):
        got = json.loads((tmp_path / f"run.{rank}.json").read_text())
        assert (got["rank"], got["nproc"], got["devices"]) == (rank, 2, 4)
        assert w.max_rel(want, {k: np.asarray(v) for k, v in got["params"].items()}) <= 1e-5
