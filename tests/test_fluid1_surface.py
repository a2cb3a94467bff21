"""Fluid 1.x scripts' first lines: module paths, fluid.data / layers.data, scope_guard, Fluid's
keyword spellings, the scalar rule, return_numpy=False, and what is refused (docs/fluid1.md)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import numpy as np
import pytest

import fluidjax as fluid

FLUID_PATHS = ["layers", "layers.learning_rate_scheduler", "core", "executor", "framework", "param_attr", "io", "nets", "clip", "regularizer",
               "initializer", "optimizer", "unique_name", "backward", "data_feeder", "reader", "compiler",
               "lod_tensor"]


@pytest.mark.parametrize("path", FLUID_PATHS)
def test_every_fluid_module_path_imports(path):
    module = importlib.import_module(f"fluidjax.{path}")
    parent = fluid
    for part in path.split("."):
        parent = getattr(parent, part)
    assert parent is module


def test_fluid_import_forms_in_a_fresh_process():
    code = """
import fluidjax as fluid
import fluidjax.layers as layers
from fluidjax.executor import Executor, global_scope, scope_guard
from fluidjax.framework import Program, program_guard, default_main_program
from fluidjax.param_attr import ParamAttr
from fluidjax import core, unique_name
from fluidjax.initializer import Constant
from fluidjax.backward import append_backward
assert layers is fluid.layer and Executor is fluid.Executor and core.Scope is fluid.Scope
assert core.VarDesc.VarType.FP32 == 5 and fluid.Tensor is fluid.LoDTensor
"""
    subprocess.run([sys.executable, "-c", code], check=True, cwd="/")


def _program():
    main, startup = fluid.Program(), fluid.Program()
    return main, startup


def test_fluid_data_has_the_batch_dim_and_layers_data_appends_it():
    main, startup = _program()
    with fluid.program_guard(main, startup):
        assert fluid.data("a", [None, 13]).shape == (-1, 13)
        assert fluid.data("b", [4, 3], dtype="int64").shape == (4, 3)
        assert fluid.layers.data("c", shape=[13]).shape == (-1, 13)
        assert fluid.layers.data("d", shape=[3, 32, 32]).shape == (-1, 3, 32, 32)
        assert fluid.layers.data("e", shape=[-1, 5]).shape == (-1, 5)           # an unknown dim: no append
        assert fluid.layers.data("f", shape=[None, 5]).shape == (-1, 5)
        assert fluid.layers.data("g", shape=[7], append_batch_size=False).shape == (7,)
        assert fluid.layers.data("h", shape=[1], dtype=fluid.core.VarDesc.VarType.INT64).dtype == "int64"
        words = fluid.layers.data("w", shape=[1], dtype="int64", lod_level=1)
        assert words.lod_level == 1 and words.shape == (-1, 1)


def test_declaring_data_again_returns_it_and_a_different_declaration_is_refused():
    main, startup = _program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3])
        assert fluid.layers.data("x", shape=[3]) is x
        assert fluid.data("x", [-1, 3]) is x
        with pytest.raises(ValueError, match="already exists.*shape"):
            fluid.layers.data("x", shape=[4])


def test_fluid_keyword_spellings_build_the_same_ops():
    main, startup = _program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[4])
        a = fluid.layers.fc(input=x, size=3, act="relu")
        b = fluid.layers.fc(x, output_size=3, activation="relu")
        with pytest.raises(ValueError, match="not both"):
            fluid.layers.fc(x, size=3, output_size=3)
        img = fluid.layers.data("img", shape=[1, 8, 8])
        conv = fluid.layers.conv2d(input=img, num_filters=2, filter_size=3, act="relu")
        s = fluid.layers.elementwise_add(a, b, act="tanh")
    types = [op.type for op in main.global_block().ops]
    assert types.count("relu") == 3 and "tanh" in types and a.shape == b.shape == (-1, 3)
    assert conv.shape == (-1, 2, 6, 6) and s.shape == (-1, 3)


def test_scope_guard_keeps_state_in_the_given_scope():
    main, startup = _program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[2])
        y = fluid.layers.fc(input=x, size=1, param_attr="w", bias_attr=False)
    exe = fluid.Executor(fluid.CPUPlace())
    inner = fluid.core.Scope()
    outer = fluid.global_scope()
    with fluid.scope_guard(inner):
        assert fluid.global_scope() is inner
        exe.run(startup)
        out, = exe.run(main, feed={"x": np.ones((3, 2), "float32")}, fetch_list=[y])
    assert fluid.global_scope() is outer
    assert inner.find_var("w") is not None and outer.find_var("w") is None
    w = np.asarray(inner.find_var("w").get_tensor())
    np.testing.assert_allclose(out, np.ones((3, 2)) @ w, rtol=1e-6)


def test_a_fetched_scalar_is_0d_and_answers_index_0():
    main, startup = _program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[2])
        avg = fluid.layers.mean(x)
    # a Paddle 2.x program's mean is 0-d (its bytes declare []); fluid.layers.mean declares Fluid
    # 1.x's [1] (tests/test_fluid1_feed_rules.py): declared 0-d here, as Paddle 2.x writes it
    avg.shape = ()
    exe = fluid.Executor(fluid.CPUPlace())
    xs = np.arange(6, dtype="float32").reshape(3, 2)
    value, = exe.run(main, feed={"x": xs}, fetch_list=[avg])
    assert value.shape == () and value[0] == value[-1] == float(value) == pytest.approx(2.5)
    assert value.item() == pytest.approx(2.5) and np.mean(value) == pytest.approx(2.5)
    with pytest.raises(IndexError):
        value[1]


def test_return_numpy_false_gives_lod_tensors():
    main, startup = _program()
    with fluid.program_guard(main, startup):
        words = fluid.layers.data("words", shape=[1], dtype="float32", lod_level=1)
        doubled = fluid.layers.scale(words, scale=2.0)
    exe = fluid.Executor(fluid.CPUPlace())
    t = fluid.create_lod_tensor(np.arange(5, dtype="float32").reshape(5, 1), [[2, 3]], fluid.CPUPlace())
    out, = exe.run(main, feed={"words": t}, fetch_list=[doubled], return_numpy=False)
    assert isinstance(out, fluid.LoDTensor)
    assert out.recursive_sequence_lengths() == [[2, 3]] and out.lod() == [[0, 2, 5]]
    np.testing.assert_array_equal(np.array(out), 2 * np.arange(5).reshape(5, 1))


def test_gradients_of_an_input():
    main, startup = _program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3])
        y = fluid.layers.reduce_sum(fluid.layers.square(x))
        dx, = fluid.gradients(y, [x])
    xs = np.arange(6, dtype="float32").reshape(2, 3)
    got, = fluid.Executor().run(main, feed={"x": xs}, fetch_list=[dx])
    np.testing.assert_allclose(got, 2 * xs)


@pytest.mark.parametrize("expr", ["fluid.dygraph.guard()", "fluid.enable_dygraph()", "fluid.dygraph.Linear(2, 3)",
                                  "fluid.transpiler.DistributeTranspiler()", "fluid.DistributeTranspiler()"])
def test_what_is_not_offered_says_so(expr):
    with pytest.raises(fluid.NotOfferedError, match="not offered"):
        eval(expr)


def test_places_and_strategies_exist():
    assert fluid.in_dygraph_mode() is False
    assert len(fluid.cpu_places(2)) == 2 and fluid.is_compiled_with_cuda() in (True, False)
    strategy = fluid.ExecutionStrategy()
    strategy.num_threads = 4
    with fluid.name_scope("encoder"):
        pass


def test_a_persistable_variable_of_another_program_is_used_by_name():
    """A reinforcement-learning target network as Fluid 1.x scripts sync it: ops of a third
    program read one program's parameter and write another's (soft and hard updates); the values
    live in the scope by name. A non-persistable Variable of another program stays an error."""
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe = fluid.Executor(fluid.CPUPlace())
        nets = []
        for name in ("w", "target_w"):
            main, startup = fluid.Program(), fluid.Program()
            with fluid.program_guard(main, startup):
                x = fluid.layers.data("x", shape=[3])
                y = fluid.layers.fc(x, size=2, param_attr=fluid.ParamAttr(name=name), bias_attr=False)
            exe.run(startup)
            nets.append((main, main.global_block().var(name), y))
        (_, w, y), (_, target, _) = nets
        w0, t0 = (np.array(scope.find_var(n).get_tensor()) for n in ("w", "target_w"))
        soft = fluid.Program()
        with fluid.program_guard(soft):
            mixed = fluid.layers.elementwise_add(fluid.layers.scale(target, 0.9), fluid.layers.scale(w, 0.1))
            fluid.layers.assign(mixed, target)
        assert soft.global_block().var("w").persistable and soft.global_block().var("target_w").persistable
        exe.run(soft)
        np.testing.assert_allclose(np.array(scope.find_var("target_w").get_tensor()), 0.9 * t0 + 0.1 * w0, rtol=1e-6)
        np.testing.assert_array_equal(np.array(scope.find_var("w").get_tensor()), w0)
        hard = fluid.Program()
        with fluid.program_guard(hard):
            fluid.layers.assign(w, target)
        exe.run(hard)
        np.testing.assert_array_equal(np.array(scope.find_var("target_w").get_tensor()), w0)
        with fluid.program_guard(fluid.Program()), pytest.raises(fluid.VariableNotFoundError, match="not persistable"):
            fluid.layers.scale(y, 2.0)


def test_fluid_initializers_numpy_array_bilinear_and_init_on_cpu():
    """NumpyArrayInitializer gives the array; BilinearInitializer gives Paddle's bilinear
    upsampling kernel (NumPy of its formula, and Paddle's own initializer); init_on_cpu is
    accepted and force_init_on_cpu reports it."""
    import math

    value = np.arange(6, dtype="float32").reshape(2, 3)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        assert not fluid.initializer.force_init_on_cpu()
        with fluid.initializer.init_on_cpu():
            assert fluid.initializer.force_init_on_cpu()
            w = fluid.layers.create_parameter([2, 3], "float32", name="w",
                                              default_initializer=fluid.initializer.NumpyArrayInitializer(value))
        assert not fluid.initializer.force_init_on_cpu()
        up = fluid.layers.create_parameter([3, 1, 4, 4], "float32", name="up",
                                           default_initializer=fluid.initializer.BilinearInitializer())
        with pytest.raises(ValueError, match="shape"):
            fluid.layers.create_parameter([3, 2], "float32", name="bad",
                                          default_initializer=fluid.initializer.NumpyArrayInitializer(value))
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    np.testing.assert_array_equal(np.array(scope.find_var(w.name).get_tensor()), value)
    f = math.ceil(4 / 2)
    c = (2 * f - 1 - f % 2) / (2.0 * f)
    # Fluid's formula as Paddle computes it: y = (i / K) % K with a true division
    want = [(1 - abs(i % 4 / f - c)) * (1 - abs((i / 4) % 4 / f - c)) for i in range(48)]
    got = np.array(scope.find_var(up.name).get_tensor())
    np.testing.assert_allclose(got, np.reshape(want, (3, 1, 4, 4)), rtol=1e-6)

    paddle = pytest.importorskip("paddle")   # after fluidjax; not on a device image without Paddle

    paddle.enable_static()
    pmain, pstart = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(pmain, pstart):
        pw = paddle.static.create_parameter([3, 1, 4, 4], "float32", name="up",
                                            default_initializer=paddle.nn.initializer.Bilinear())
    pscope = paddle.static.Scope()
    with paddle.static.scope_guard(pscope):
        paddle.static.Executor(paddle.CPUPlace()).run(pstart)
        np.testing.assert_allclose(got, np.array(pscope.find_var(pw.name).get_tensor()), rtol=1e-6)
