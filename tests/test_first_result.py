"""Time to first result: startup programs drawn on the host, the persistent compilation cache."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer


def _values(program, scope):
    return {v.name: np.asarray(scope.find_var(v.name).get_tensor()) for v in program.global_block().vars.values()
            if v.persistable and scope.find_var(v.name) is not None}


def _generator(*entropy):
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(list(entropy))))


def test_a_deep_startup_program_compiles_nothing():
    main, startup = fj.Program(), fj.Program()
    startup.random_seed = 3
    with fj.program_guard(main, startup):
        h = layer.data("x", input_size=16)
        for _ in range(100):
            h = layer.fc(h, 16)
        fj.optimizer.Adam(0.1).minimize(layer.mean(h))
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    assert exe.trace_count == 0
    values = _values(startup, scope)
    assert len(values) == 200 * 5 + 1     # 200 parameters, each with 2 moments and 2 beta pows; the lr
    out, = exe.run(main, feed={"x": np.ones((2, 16), np.float32)}, fetch_list=[h], scope=scope)
    assert out.shape == (2, 16) and np.all(np.isfinite(out))


def test_initial_values_follow_the_documented_numpy_contract():
    startup = fj.Program()
    startup.random_seed = 42
    block = startup.global_block()
    specs = [
        ("uniform_random", {"shape": [30, 20], "min": -0.5, "max": 2.0}),
        ("gaussian_random", {"shape": [40], "mean": 1.0, "std": 3.0}),
        ("truncated_gaussian_random", {"shape": [500], "mean": 0.0, "std": 2.0}),
        ("fill_constant", {"shape": [2, 3], "value": 7.5}),
        ("uniform_random", {"shape": [5], "min": 0.0, "max": 1.0, "seed": 99}),
        ("randint", {"shape": [6], "low": 3, "high": 9, "dtype": 3}),
    ]
    names = []
    for i, (kind, attrs) in enumerate(specs):
        dtype = "int64" if kind == "randint" else "float32"
        var = block.create_var(f"v{i}", shape=attrs["shape"], dtype=dtype, persistable=True)
        block.append_op(kind, outputs={"Out": var}, attrs=dict(attrs, dtype=fj.ir.dtypes.to_enum(dtype)))
        names.append(var.name)
    scope = fj.Scope()
    fj.Executor().run(startup, scope=scope)
    got = {n: np.asarray(scope.find_var(n).get_tensor()) for n in names}

    expect_u = _generator(42, 0).random((30, 20), np.float32) * 2.5 - 0.5
    np.testing.assert_array_equal(got["v0"], expect_u.astype(np.float32))
    expect_g = _generator(42, 1).standard_normal(40, np.float32) * 3.0 + 1.0
    np.testing.assert_array_equal(got["v1"], expect_g)
    assert np.all(np.abs(got["v2"]) <= 4.0) and 1.0 < got["v2"].std() < 2.0   # truncated at 2 std
    np.testing.assert_array_equal(got["v3"], np.full((2, 3), 7.5, np.float32))
    np.testing.assert_array_equal(got["v4"], _generator(99).random(5, np.float32))   # the op's own seed
    np.testing.assert_array_equal(got["v5"], _generator(42, 5).integers(3, 9, 6, dtype=np.int64))


def test_host_drawn_parameters_have_the_initializers_statistics():
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", input_size=400)
        layer.fc(x, 300, param_attr=fj.ParamAttr(initializer=fj.initializer.Normal(0.5, 0.2)))
        layer.fc(x, 300)                                         # Xavier uniform
    scope = fj.Scope()
    fj.Executor().run(startup, scope=scope)
    values = _values(startup, scope)
    normal, xavier = values["fc_0.w_0"], values["fc_1.w_0"]
    assert abs(normal.mean() - 0.5) < 0.005 and abs(normal.std() - 0.2) < 0.005
    limit = np.sqrt(6.0 / 700)
    assert xavier.min() >= -limit and xavier.max() < limit and abs(xavier.std() - limit / np.sqrt(3)) < 0.002


def test_startup_programs_with_other_ops_still_compile_and_run():
    startup = fj.Program()
    block = startup.global_block()
    a = block.create_var("a", shape=[3], persistable=True)
    b = block.create_var("b", shape=[3], persistable=True)
    block.append_op("fill_constant", outputs={"Out": a}, attrs={"shape": [3], "value": 2.0, "dtype": 5})
    block.append_op("scale", inputs={"X": a}, outputs={"Out": b}, attrs={"scale": 3.0})
    scope, exe = fj.Scope(), fj.Executor()
    exe.run(startup, scope=scope)
    assert exe.trace_count == 1
    np.testing.assert_array_equal(np.asarray(scope.find_var("b").get_tensor()), [6.0, 6.0, 6.0])


_CACHE_SCRIPT = textwrap.dedent("""
    import jax
    hits = []
    jax.monitoring.register_event_listener(lambda name, **kw: hits.append(name) if "cache_hit" in name else None)
    import numpy as np, fluidjax as fj
    from fluidjax import layer
    from fluidjax.lowering import compile_cache
    x = layer.data("x", input_size=64)
    h = x
    for _ in range(12):
        h = layer.fc(h, 64, activation="tanh")
    loss = layer.mean(h)
    fj.optimizer.Adam(0.01).minimize(loss)
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    exe.run(feed={"x": np.ones((4, 64), np.float32)}, fetch_list=[loss])
    print("CACHE", compile_cache.cache_dir, len(hits))
""")


def _cache_run(env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("CACHE")][-1]
    _, where, hits = line.split()
    return where, int(hits)


@pytest.mark.slow
def test_the_compilation_cache_is_on_by_default_and_serves_a_second_process(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path), "FLUIDJAX_COMPILATION_CACHE": ""}
    where, hits = _cache_run(env)
    assert where == str(tmp_path / "fluidjax" / "xla") and hits == 0
    assert any(name.endswith("-cache") for name in os.listdir(where))
    where, hits = _cache_run(env)
    assert hits >= 1                                           # the training step came from disk


def test_the_compilation_cache_can_be_moved_or_turned_off(tmp_path):
    where, _ = _cache_run({"FLUIDJAX_COMPILATION_CACHE": str(tmp_path / "elsewhere")})
    assert where == str(tmp_path / "elsewhere")
    where, hits = _cache_run({"FLUIDJAX_COMPILATION_CACHE": "off", "XDG_CACHE_HOME": str(tmp_path / "x")})
    assert where == "None" and hits == 0 and not (tmp_path / "x").exists()


def test_parameters_set_from_numpy_compile_the_step_once():
    import jax

    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, secs, **kw: compiles.append(name) if name == "/jax/core/compile/backend_compile_duration" else None)
    x = layer.data("x", input_size=4)
    loss = layer.mean(layer.fc(x, 3))
    fj.optimizer.Adam(0.1).minimize(loss)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(fj.default_startup_program(), scope=scope)
    for p in fj.default_main_program().all_parameters():                 # weights loaded from NumPy
        scope.find_var(p.name).get_tensor().set(np.ones(p.shape, np.float32))
    before = len(compiles)
    for _ in range(3):
        exe.run(feed={"x": np.ones((2, 4), np.float32)}, fetch_list=[loss], scope=scope)
    assert len(compiles) - before == 1
