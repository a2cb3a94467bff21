"""Frontend: program_guard, ParamAttr, initializers, the seeds' Variable, operator sugar, printing."""

import numpy as np

import fluidjax as fj
from fluidjax import layer


def _startup_values(startup):
    scope = fj.Scope()
    fj.Executor().run(startup, scope=scope)
    return scope


def test_program_guard_builds_into_given_programs():
    main, startup = fj.Program(), fj.Program()
    default = fj.default_main_program()
    with fj.program_guard(main, startup):
        x = layer.data("x", input_size=3)
        layer.fc(x, output_size=2)
        assert fj.default_main_program() is main
    assert fj.default_main_program() is default and not default.global_block().ops
    assert [op.type for op in main.global_block().ops] == ["mul", "elementwise_add"]
    assert sorted(op.type for op in startup.global_block().ops) == ["fill_constant", "uniform_random"]


def test_param_attr_and_initializers():
    x = layer.data("x", input_size=400)
    init = fj.initializer
    layer.fc(x, 300, param_attr=fj.ParamAttr(name="w_const", initializer=init.Constant(0.5), trainable=False),
             bias_attr=fj.ParamAttr(name="b_norm", initializer=init.Normal(1.0, 2.0)))
    layer.fc(x, 300, param_attr=fj.ParamAttr(name="w_unif", initializer=init.Uniform(-0.5, 0.25)), bias_attr=False)
    layer.fc(x, 300, param_attr=fj.ParamAttr(name="w_trunc", initializer=init.TruncatedNormal(0.0, 0.1)))
    layer.fc(x, 300, param_attr=fj.ParamAttr(name="w_xavier_n", initializer=init.Xavier(uniform=False)))
    layer.fc(x, 300, param_attr=fj.ParamAttr(name="w_msra", initializer=init.MSRA()))
    main = fj.default_main_program().global_block()
    assert main.var("w_const").trainable is False and main.var("w_const").stop_gradient
    types = {op.output("Out")[0]: op.type for op in fj.default_startup_program().global_block().ops}
    assert types["w_const"] == "fill_constant" and types["b_norm"] == "gaussian_random"
    assert types["w_trunc"] == "truncated_gaussian_random" and types["w_unif"] == "uniform_random"
    scope = _startup_values(fj.default_startup_program())
    get = lambda n: np.asarray(scope.find_var(n).get_tensor())  # noqa: E731
    assert np.all(get("w_const") == 0.5)
    b = get("b_norm")
    assert abs(b.mean() - 1.0) < 0.4 and abs(b.std() - 2.0) < 0.3
    u = get("w_unif")
    assert u.min() >= -0.5 and u.max() < 0.25 and abs(u.mean() + 0.125) < 0.01
    t = get("w_trunc")
    assert np.abs(t).max() <= 0.2 + 1e-6 and 0.07 < t.std() < 0.1
    assert abs(get("w_xavier_n").std() - np.sqrt(2 / 700)) < 0.003
    assert np.abs(get("w_msra")).max() <= np.sqrt(6 / 400) + 1e-6
    assert scope.find_var("fc_1.b_0") is None  # bias_attr=False: no bias


def test_seed_variable_constructor():
    v = fj.Variable("X", shape=[784, 10], data_type="int32", value=0)
    s = fj.Variable("S", data_type="string", value="aa")
    assert isinstance(v, fj.Variable) and v.persistable and v.shape == (784, 10) and v.dtype == "int32"
    assert isinstance(s, fj.Variable) and s.persistable and s.dtype is None
    scope = fj.global_scope()
    assert scope.find_var("X") is None and scope.find_var("S") is None
    fj.Executor().run(fj.default_startup_program())
    x = np.asarray(scope.find_var("X").get_tensor())
    assert x.dtype == np.int32 and x.shape == (784, 10) and not x.any()
    assert scope.find_var("S").get(str) == "aa"


def test_operator_sugar_matches_numpy():
    a = layer.data("a", input_size=3)
    b = layer.data("b", input_size=3)
    outs = [a + b, a - b, a * b, a / b, a + 2, a - 2, 2 - a, a * 3, 3 * a, a / 4, 4 / a, -a]
    types = [op.type for op in fj.default_main_program().global_block().ops]
    assert types[:4] == ["elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div"]
    assert types.count("scale") >= 7
    av = np.array([[1.0, 2.0, 4.0]], np.float32)
    bv = np.array([[2.0, 5.0, 8.0]], np.float32)
    got = fj.Executor().run(feed={"a": av, "b": bv}, fetch_list=outs)
    expected = [av + bv, av - bv, av * bv, av / bv, av + 2, av - 2, 2 - av, av * 3, 3 * av, av / 4, 4 / av, -av]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-6)


def test_program_printing_and_html():
    x = layer.data("images", input_size=64)
    layer.fc(x, output_size=10, activation="softmax")
    text = str(fj.default_main_program())
    assert "images : shape=(-1, 64)" in text and "fc_0.w_0 : shape=(64, 10)" in text
    assert "= mul(" in text and "softmax" in text
    html = fj.default_main_program()._repr_html_()
    assert "<table>" in html and "fc_0.w_0" in html and "(64, 10)" in html


def test_clone_for_test_sets_is_test_and_copies():
    x = layer.data("x", input_size=4)
    y = layer.fc(x, output_size=2)
    main = fj.default_main_program()
    clone = main.clone(for_test=True)
    assert clone is not main and clone.serialize() != b""
    assert [op.type for op in clone.global_block().ops] == [op.type for op in main.global_block().ops]
    assert clone.global_block().var("fc_0.w_0").is_parameter
    assert clone.global_block().var(y.name).shape == (-1, 2)
    clone.global_block().create_var("extra", (1,), "float32")
    assert not main.global_block().has_var("extra")
