"""Small Fluid 1.x calls scripts make: ``memory_optimize`` / ``release_memory`` (no-ops that warn
once), ``fluid.profiler``, ``exe.run(use_program_cache=True)``, ``_decay_step_counter``,
``Program._lr_schedule_guard``, ``bool(Variable)``, and ``WeightNormParamAttr`` (checked against
a NumPy transcription of weight normalization: forward and one SGD step)."""

from __future__ import annotations

import glob
import warnings

import numpy as np
import pytest

import fluidjax as fluid
from fluidjax import layers
from fluidjax.frontend import memory_optimization

# Fluid's OpRole values (paddle/fluid/framework/op_proto_maker.h): Optimize 0x0002, LRSched 0x0010.
FLUID_OPTIMIZE, FLUID_LRSCHED = 0x0002, 0x0010


def _tiny():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 3], "float32")
        loss = layers.mean(layers.fc(x, 2))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, x, loss


def test_memory_optimize_and_release_memory_do_nothing_and_warn_once():
    main, _, _, _ = _tiny()
    before = main.serialize()
    memory_optimization._warned.clear()
    with pytest.warns(DeprecationWarning, match="memory_optimize"):
        assert fluid.memory_optimize(main, skip_opt_set={"x"}, print_log=True, level=1) is None
    with pytest.warns(DeprecationWarning, match="release_memory"):
        fluid.release_memory(main, skip_opt_set=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fluid.memory_optimize(main)                     # the second call is silent
        fluid.transpiler.memory_optimize(main)
        fluid.release_memory(main)
    assert main.serialize() == before


def test_profiler_times_runs_and_writes_a_jax_trace(tmp_path, capsys):
    import fluidjax.profiler as profiler
    main, startup, x, loss = _tiny()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    original = fluid.Executor.run
    feed = {"x": np.ones((4, 3), "float32")}
    with profiler.profiler("CPU", "total", profile_path=str(tmp_path / "prof")):
        for _ in range(3):
            exe.run(main, feed=feed, fetch_list=[loss])
    report = capsys.readouterr().out
    assert "Profiling Report" in report and "sorted by: total" in report
    row = next(line for line in report.splitlines() if line.startswith("run program"))
    assert int(row[48:55]) == 3                           # the Calls column
    assert glob.glob(str(tmp_path / "prof" / "**" / "*.xplane.pb"), recursive=True)
    assert fluid.Executor.run is original                 # the timing wrapper is gone after stop

    profiler.start_profiler("All")
    exe.run(main, feed=feed, fetch_list=[loss])
    profiler.reset_profiler()
    exe.run(main, feed=feed, fetch_list=[loss])
    exe.run(main, feed=feed, fetch_list=[loss])
    profiler.stop_profiler("calls")
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("run program"))
    assert int(row[48:55]) == 2                           # reset dropped the first run
    assert fluid.Executor.run is original
    with pytest.raises(ValueError, match="state"):
        profiler.start_profiler("TPU")
    with pytest.raises(ValueError, match="sorted_key"):
        with profiler.profiler("CPU", "fastest"):
            pass
    with pytest.warns(UserWarning, match="cuda_profiler"):
        with profiler.cuda_profiler("/tmp/nvprof.txt", "csv"):
            exe.run(main, feed=feed, fetch_list=[loss])


def test_run_accepts_use_program_cache():
    main, startup, x, loss = _tiny()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, use_program_cache=True)
    feed = {"x": np.ones((2, 3), "float32")}
    a = [float(exe.run(main, feed=feed, fetch_list=[loss], use_program_cache=True)[0])]
    traced = exe.trace_count
    a += [float(exe.run(main, feed=feed, fetch_list=[loss], use_program_cache=True)[0]) for _ in range(2)]
    assert a[0] > a[1] > a[2]                             # SGD on mean(fc) lowers it every step
    assert exe.trace_count == traced                      # the plan was reused


def test_decay_step_counter_counts_runs_from_begin():
    from fluidjax.layers.learning_rate_scheduler import _decay_step_counter
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        step = _decay_step_counter(begin=5)
        fluid.layers.learning_rate_scheduler._decay_step_counter()       # same counter, no second increment
    exe = fluid.Executor()
    exe.run(startup)
    got = [float(exe.run(main, fetch_list=[step])[0][0]) for _ in range(3)]
    assert got == [5.0, 6.0, 7.0] and step.dtype == "float32"


def test_lr_schedule_guard_marks_ops():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [None, 2])
        with main._lr_schedule_guard():
            a = layers.scale(x, 2.0)
        with main._lr_schedule_guard(is_with_opt=True):
            layers.scale(a, 2.0)
        layers.scale(a, 3.0)
    roles = [int(op.attrs["op_role"]) for op in main.global_block().ops]
    assert roles == [FLUID_LRSCHED, FLUID_LRSCHED | FLUID_OPTIMIZE, 0]


def test_bool_of_a_variable_says_to_use_cond():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data("x", [None, 2])
        flag = layers.reduce_sum(x) > 0
        with pytest.raises(TypeError, match=r"layers\.cond") as info:
            if flag:
                pass
        assert isinstance(info.value, fluid.FluidJaxError)
        with pytest.raises(TypeError, match="layers.While"):
            while flag:
                break


# -- WeightNormParamAttr ---------------------------------------------------------------------------------
def _norm(v, dim):
    axes = tuple(d for d in range(v.ndim) if d != dim) if dim is not None else tuple(range(v.ndim))
    return np.sqrt(np.sum(v * v, axis=axes, keepdims=True)), axes


def _weight_norm_step(g, v, dim, grad_w, lr):
    """One SGD step on g and v for the upstream gradient ``grad_w`` of w = g * v / ||v||."""
    n, axes = _norm(v, dim)
    grad_g = np.sum(grad_w * v / n, axis=axes, keepdims=True)
    grad_v = g / n * grad_w - g * v * np.sum(grad_w * v, axis=axes, keepdims=True) / n ** 3
    return g - lr * grad_g, v - lr * grad_v


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_weight_norm_fc_forward_and_sgd_step_match_numpy(dim):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    lr = 0.5
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 4], "float32")
        attr = fluid.WeightNormParamAttr(dim=dim, name="wn", initializer=fluid.initializer.Normal(0.0, 1.0))
        y = layers.fc(x, 3, param_attr=attr, bias_attr=False)
        loss = layers.reduce_sum(layers.square(y))
        fluid.optimizer.SGD(lr).minimize(loss)
    params = sorted(p.name for p in main.global_block().all_parameters())
    assert params == ["wn_g", "wn_v"]
    assert main.global_block().var("wn_g").shape == ((1, 3) if dim == 1 else (4, 1) if dim == 0 else (1, 1))
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    xs = np.random.default_rng(0).normal(size=(5, 4)).astype("float32")
    with fluid.scope_guard(scope):
        exe.run(startup)
        g0 = np.array(scope.find_var("wn_g").get_tensor()).astype("float64")
        v0 = np.array(scope.find_var("wn_v").get_tensor()).astype("float64")
        np.testing.assert_allclose(g0, _norm(v0, dim)[0], rtol=1e-6)      # g starts as ||v||
        out, = exe.run(main, feed={"x": xs}, fetch_list=[y])
        g1 = np.array(scope.find_var("wn_g").get_tensor())
        v1 = np.array(scope.find_var("wn_v").get_tensor())
    w0 = g0 * v0 / _norm(v0, dim)[0]
    np.testing.assert_allclose(w0, v0, rtol=1e-6)                         # so w starts as v
    y0 = xs.astype("float64") @ w0
    np.testing.assert_allclose(out, y0, rtol=1e-5, atol=1e-6)
    want_g, want_v = _weight_norm_step(g0, v0, dim, xs.T.astype("float64") @ (2 * y0), lr)
    np.testing.assert_allclose(g1, want_g, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(v1, want_v, rtol=1e-4, atol=1e-5)
    assert not np.allclose(v1, v0)


def test_weight_norm_conv2d_forward_matches_numpy_after_g_is_changed():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        img = fluid.data("img", [None, 2, 5, 5], "float32")
        y = layers.conv2d(img, 3, 3, param_attr=fluid.WeightNormParamAttr(dim=0, name="cw"), bias_attr=False)
    assert main.global_block().var("cw_g").shape == (3, 1, 1, 1)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    xs = np.random.default_rng(1).normal(size=(2, 2, 5, 5)).astype("float32")
    g = np.array([[[[0.5]]], [[[2.0]]], [[[-1.0]]]], "float32")
    with fluid.scope_guard(scope):
        exe.run(startup)
        scope.find_var("cw_g").get_tensor().set(g, fluid.CPUPlace())
        v = np.array(scope.find_var("cw_v").get_tensor()).astype("float64")
        out, = exe.run(main, feed={"img": xs}, fetch_list=[y])
    w = g * v / _norm(v, 0)[0]
    want = np.zeros((2, 3, 3, 3))
    for i in range(3):
        for j in range(3):
            want[:, :, i, j] = np.einsum("nchw,ochw->no", xs[:, :, i:i + 3, j:j + 3], w)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    assert fluid.WeightNormParamAttr.params_with_weight_norm
    assert fluid.param_attr.WeightNormParamAttr is fluid.WeightNormParamAttr
    with pytest.raises(ValueError, match="out of range"):
        with fluid.program_guard(fluid.Program(), fluid.Program()):
            layers.fc(fluid.data("x", [None, 4]), 3, param_attr=fluid.WeightNormParamAttr(dim=2))
