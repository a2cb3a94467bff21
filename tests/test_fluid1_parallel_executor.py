"""``fluid.ParallelExecutor`` (a ``CompiledProgram.with_data_parallel`` run by an Executor).

The oracle is one device running the whole batch, as in ``tests/test_data_parallel.py``: a
ParallelExecutor training run over 8 devices (XLA's forced host devices, in a subprocess: this
file run as a script) gives the same losses and parameters as a plain Executor on the full
batches, whether fed one dict, a list of 8 per-device dicts, or a started ``py_reader``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

if __name__ == "__main__":   # the worker: 8 host devices before jax is imported
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    os.environ["JAX_PLATFORMS"] = "cpu"

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import fluidjax as fluid  # noqa: E402
from fluidjax import layers  # noqa: E402

DEVICES, BATCH, STEPS = 8, 32, 6


def _model(with_reader: bool = False):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        if with_reader:
            reader = layers.py_reader(4, [(-1, 16), (-1, 1)], ["float32", "int64"], name="pe_reader")
            x, y = layers.read_file(reader)
        else:
            reader = None
            x = fluid.data("x", [None, 16], "float32")
            y = fluid.data("y", [None, 1], "int64")
        h = layers.fc(x, 32, act="relu")
        h = layers.batch_norm(h)
        p = layers.fc(h, 5, act="softmax")
        loss = layers.mean(layers.cross_entropy(p, y))
        fluid.optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup, reader, x, y, loss


def _batches():
    rng = np.random.default_rng(2)
    return [(rng.normal(size=(BATCH, 16)).astype("float32"), rng.integers(0, 5, (BATCH, 1)).astype("int64"))
            for _ in range(STEPS)]


def _params(scope, program):
    return {v.name: np.array(scope.find_var(v.name).get_tensor())
            for v in program.global_block().all_parameters()}


def _single(batches):
    main, startup, _, x, y, loss = _model()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        losses = [float(exe.run(main, feed={x.name: bx, y.name: by}, fetch_list=[loss])[0]) for bx, by in batches]
    return losses, _params(scope, main)


def _parallel(batches, how):
    main, startup, reader, x, y, loss = _model(with_reader=how == "py_reader")
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    build = fluid.BuildStrategy()
    build.reduce_strategy = fluid.BuildStrategy.ReduceStrategy.AllReduce
    build.fuse_all_reduce_ops = True
    build.enable_inplace = True
    strategy = fluid.ExecutionStrategy()
    strategy.num_threads = 4
    strategy.num_iteration_per_drop_scope = 10
    losses = []
    with fluid.scope_guard(scope):
        exe.run(startup)
        pe = fluid.ParallelExecutor(use_cuda=False, loss_name=loss.name, main_program=main, build_strategy=build,
                                    exec_strategy=strategy)
        if how == "py_reader":
            reader.decorate_tensor_provider(lambda: iter(batches))
            reader.start()
            try:
                while True:
                    losses.append(float(np.mean(pe.run(fetch_list=[loss.name])[0])))
            except fluid.core.EOFException:
                reader.reset()
        for bx, by in batches if how != "py_reader" else ():
            if how == "per_device":
                part = BATCH // DEVICES
                feed = [{x.name: bx[part * i:part * (i + 1)], y.name: by[part * i:part * (i + 1)]}
                        for i in range(DEVICES)]
                value, = pe.run(fetch_list=[loss], feed=feed)
            else:
                value, = pe.run([loss.name], feed_dict={x.name: bx, y.name: by})
            losses.append(float(np.mean(value)))
    return {"devices": pe.device_count, "losses": losses, "params": _params(scope, main)}


def worker() -> dict:
    import jax
    batches = _batches()
    want_losses, want_params = _single(batches)
    out = {"jax_devices": jax.device_count(), "single": want_losses, "modes": {}}
    for how in ("one_dict", "per_device", "py_reader"):
        r = _parallel(batches, how)
        rel = max(float(np.max(np.abs(r["params"][n] - want_params[n])) / (np.max(np.abs(want_params[n])) + 1e-12))
                  for n in want_params)
        out["modes"][how] = {"devices": r["devices"], "losses": r["losses"], "param_rel": rel,
                             "params_match_names": sorted(r["params"]) == sorted(want_params)}
    return out


@pytest.fixture(scope="module")
def report() -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=os.path.dirname(os.path.abspath(__file__)))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("how", ["one_dict", "per_device", "py_reader"])
def test_parallel_executor_trains_as_one_device_on_the_full_batch(report, how):
    r = report["modes"][how]
    assert report["jax_devices"] == DEVICES and r["devices"] == DEVICES
    assert r["params_match_names"]
    assert len(r["losses"]) == STEPS
    np.testing.assert_allclose(r["losses"], report["single"], rtol=1e-5)
    assert r["param_rel"] <= 1e-5
    assert report["single"][-1] < report["single"][0]


def test_one_device_parallel_executor_and_fluid_settings():
    main, startup, _, x, y, loss = _model()
    batches = _batches()[:2]
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    build = fluid.BuildStrategy()
    for name, value in {"memory_optimize": True, "fuse_elewise_add_act_ops": True, "debug_graphviz_path": "/tmp/g",
                        "gradient_scale_strategy": fluid.BuildStrategy.GradientScaleStrategy.CoeffNumDevice,
                        "reduce_strategy": fluid.BuildStrategy.ReduceStrategy.Reduce}.items():
        setattr(build, name, value)
    assert fluid.BuildStrategy().reduce_strategy == fluid.BuildStrategy.ReduceStrategy.AllReduce
    pe = fluid.ParallelExecutor(True, loss_name=loss.name, build_strategy=build, main_program=main)
    test_pe = fluid.ParallelExecutor(False, main_program=main.clone(for_test=True), share_vars_from=pe)
    assert pe.device_count >= 1
    got = [float(np.mean(pe.run([loss], feed={x.name: bx, y.name: by})[0])) for bx, by in batches]
    assert np.isfinite(got).all() and len(got) == 2
    evaluated, = test_pe.run([loss.name], feed={x.name: batches[0][0], y.name: batches[0][1]})
    assert np.isfinite(np.asarray(evaluated)).all()
    with pytest.raises(ValueError, match="num_trainers"):
        fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main, num_trainers=2)
    from fluidjax.parallel_executor import ParallelExecutor
    assert ParallelExecutor is fluid.ParallelExecutor


if __name__ == "__main__":
    print(json.dumps(worker()))
