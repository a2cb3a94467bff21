"""Paddle as the oracle, both directions: Paddle runs our programs; we run Paddle's."""

import numpy as np

import fluidjax as fj
import paddle_oracle as po
from fluidjax import layer


def _feeds(n=8, seed=0):
    rng = np.random.default_rng(seed)
    xs = rng.random((n, 4096), dtype=np.float32)
    ls = rng.dirichlet(np.ones(100), n).astype(np.float32)
    return xs, ls


def test_paddle_parses_and_runs_our_programs():
    x = layer.data("images", input_size=64 * 64)
    y = layer.fc(x, output_size=100, activation="softmax")
    l = layer.data("label", dims=100)
    cost = layer.cross_entropy(y, l)
    avg = layer.mean(cost)
    startup_bytes = fj.default_startup_program().serialize()
    main_bytes = fj.default_main_program().serialize()
    startup = po.parse(startup_bytes)
    assert [op.type for op in startup.global_block().ops] == ["uniform_random", "fill_constant"]
    main = po.parse(main_bytes)
    assert [op.type for op in main.global_block().ops] == ["mul", "elementwise_add", "softmax",
                                                          "cross_entropy", "mean"]
    assert tuple(main.global_block().var("fc_0.w_0").shape) == (4096, 100)
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    xs, ls = _feeds()
    ours = exe.run(feed={"images": xs, "label": ls}, fetch_list=[cost, avg])
    scope = fj.global_scope()
    params = {n: np.asarray(scope.find_var(n).get_tensor()) for n in ("fc_0.w_0", "fc_0.b_0")}
    theirs = po.run(main_bytes, {"images": xs, "label": ls}, [cost.name, avg.name], params)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_paddle_runs_our_startup_program_too():
    x = layer.data("x", input_size=5)
    layer.fc(x, output_size=3, param_attr=fj.ParamAttr(initializer=fj.initializer.Constant(0.25)))
    import paddle

    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        exe.run(po.parse(fj.default_startup_program().serialize()))
    w = np.array(scope.find_var("fc_0.w_0").get_tensor())
    np.testing.assert_array_equal(w, np.full((5, 3), 0.25, np.float32))


def test_we_run_a_program_built_by_paddle():
    import paddle

    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, 32], "float32")
        label = paddle.static.data("label", [-1, 1], "int64")
        h = paddle.static.nn.fc(x, 16, activation="relu")
        logits = paddle.static.nn.fc(h, 10)
        prob = paddle.nn.functional.softmax(logits)
        loss = paddle.nn.functional.cross_entropy(prob, label, use_softmax=False, reduction="none")
        avg = paddle.mean(loss)
    scope = paddle.static.Scope()
    pexe = paddle.static.Executor(paddle.CPUPlace())
    rng = np.random.default_rng(1)
    xs = rng.random((6, 32), dtype=np.float32)
    ls = rng.integers(0, 10, (6, 1)).astype(np.int64)
    with paddle.static.scope_guard(scope):
        pexe.run(startup)
        expected = pexe.run(main, feed={"x": xs, "label": ls}, fetch_list=[prob, avg])
    params = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}

    data = main.desc.serialize_to_string()
    prog = fj.Program.parse(data)
    assert prog.serialize() == data  # byte-exact round trip of Paddle's bytes
    ours_scope = fj.Scope()
    for name, value in params.items():
        ours_scope.var(name).get_mutable(fj.LoDTensor).set(value)
    got = fj.Executor().run(prog, feed={"x": xs, "label": ls}, fetch_list=[prob.name, avg.name], scope=ours_scope)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
