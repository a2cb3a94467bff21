"""fj.nets: each composite network against NumPy, and Paddle running the program fluidjax built."""

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer


def _run(build, feeds, seed=3):
    main, startup = fj.Program(), fj.Program()
    startup.random_seed = seed
    with fj.program_guard(main, startup):
        out = build()
    scope = fj.Scope()
    exe = fj.Executor(fj.CPUPlace())
    exe.run(startup, scope=scope)
    got, = exe.run(main, feed=feeds, fetch_list=[out], scope=scope)
    params = {p.name: np.asarray(scope.find_var(p.name).get_tensor()) for p in main.global_block().all_parameters()}
    return main, out, np.asarray(got), params


def _paddle_runs_it(main, out, feeds, params, expected):
    from tests import paddle_oracle  # fluidjax (and jax) are imported first, then Paddle

    got, = paddle_oracle.run(main.serialize(), feeds, [out.name], params=params)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_glu_halves_and_gates():
    x = np.random.default_rng(0).normal(size=(4, 6, 3)).astype("float32")
    main, out, got, _ = _run(lambda: fj.nets.glu(layer.data("x", shape=[6, 3]), dim=1), {"x": x})
    assert out.shape == (-1, 3, 3)
    np.testing.assert_allclose(got, x[:, :3] * _sigmoid(x[:, 3:]), rtol=1e-6)
    _paddle_runs_it(main, out, {"x": x}, {}, got)


def test_glu_refuses_odd_dimension():
    with fj.program_guard(fj.Program(), fj.Program()):
        with pytest.raises(fj.ShapeError, match="even"):
            fj.nets.glu(layer.data("x", shape=[5]), dim=-1)


@pytest.mark.parametrize("heads", [1, 2])
def test_scaled_dot_product_attention(heads):
    rng = np.random.default_rng(1)
    q = rng.normal(size=(2, 3, 4)).astype("float32")
    k = rng.normal(size=(2, 5, 4)).astype("float32")
    v = rng.normal(size=(2, 5, 6)).astype("float32")

    def build():
        return fj.nets.scaled_dot_product_attention(layer.data("q", shape=[3, 4]), layer.data("k", shape=[5, 4]),
                                                    layer.data("v", shape=[5, 6]), num_heads=heads)

    feeds = {"q": q, "k": k, "v": v}
    main, out, got, params = _run(build, feeds)
    assert out.shape == (-1, 3, 6)
    if heads == 1:
        qs, ks, vs = q, k, v
    else:                                      # the three projections, in the order they were made
        ws = sorted(n for n in params if n.endswith(".w_0"))
        bs = sorted(n for n in params if n.endswith(".b_0"))
        qs, ks, vs = (x @ params[w] + params[b] for x, w, b in zip((q, k, v), ws, bs))
    def heads_of(x):
        return x.reshape(x.shape[0], x.shape[1], heads, -1).transpose(0, 2, 1, 3)
    weights = _softmax(heads_of(qs) @ heads_of(ks).transpose(0, 1, 3, 2) * (4 // heads) ** -0.5)
    expected = (weights @ heads_of(vs)).transpose(0, 2, 1, 3).reshape(2, 3, 6)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    _paddle_runs_it(main, out, feeds, params, got)


def test_scaled_dot_product_attention_checks_its_inputs():
    with fj.program_guard(fj.Program(), fj.Program()):
        q = layer.data("q", shape=[3, 4])
        with pytest.raises(fj.ShapeError, match="same size"):
            fj.nets.scaled_dot_product_attention(q, layer.data("k", shape=[5, 8]), layer.data("v", shape=[5, 8]))
        with pytest.raises(fj.ShapeError, match="num_heads"):
            fj.nets.scaled_dot_product_attention(q, q, layer.data("v2", shape=[3, 5]), num_heads=2)


def _conv_nchw(x, w, b, pad):
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((n, f, oh, ow), np.float64)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,fc->nfhw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
    return out + b.reshape(1, f, 1, 1)


def _max_pool2(x):
    n, c, h, w = x.shape
    return x[:, :, :h // 2 * 2, :w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def test_simple_img_conv_pool():
    x = np.random.default_rng(2).normal(size=(2, 3, 8, 8)).astype("float32")

    def build():
        return fj.nets.simple_img_conv_pool(layer.data("img", shape=[3, 8, 8]), num_filters=4, filter_size=3,
                                            pool_size=2, pool_stride=2, conv_padding=1, activation="relu")

    main, out, got, params = _run(build, {"img": x})
    assert out.shape == (-1, 4, 4, 4)
    w = next(v for n, v in params.items() if n.endswith(".w_0"))
    b = next(v for n, v in params.items() if n.endswith(".b_0"))
    expected = _max_pool2(np.maximum(_conv_nchw(x, w, b, 1), 0))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    _paddle_runs_it(main, out, {"img": x}, params, got)


def test_img_conv_group_with_batch_norm():
    x = np.random.default_rng(3).normal(size=(2, 2, 6, 6)).astype("float32")

    def build():
        return fj.nets.img_conv_group(layer.data("img", shape=[2, 6, 6]), conv_num_filter=[3, 3], pool_size=2,
                                      pool_stride=2, conv_act="relu", conv_with_batchnorm=[True, False])

    main, out, got, params = _run(build, {"img": x})
    types = [op.type for op in main.global_block().ops]
    assert types == ["conv2d", "elementwise_add", "batch_norm", "relu", "conv2d", "elementwise_add", "relu", "pool2d"]
    assert out.shape == (-1, 3, 3, 3)
    _paddle_runs_it(main, out, {"img": x}, params, got)


def test_img_conv_group_checks_per_conv_lists():
    with fj.program_guard(fj.Program(), fj.Program()):
        with pytest.raises(ValueError, match="conv_padding has 3 entries for 2"):
            fj.nets.img_conv_group(layer.data("img", shape=[2, 6, 6]), conv_num_filter=[3, 3], pool_size=2,
                                   conv_padding=[1, 1, 1])


def test_fc_of_a_list_sums_one_product_per_input():
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(3, 4)).astype("float32"), rng.normal(size=(3, 2)).astype("float32")

    def build():
        return layer.fc([layer.data("a", shape=[4]), layer.data("b", shape=[2])], 5, activation="tanh")

    main, out, got, params = _run(build, {"a": a, "b": b})
    assert [op.type for op in main.global_block().ops] == ["mul", "mul", "sum", "elementwise_add", "tanh"]
    ops = main.global_block().ops
    w0, w1 = (params[op.input("Y")[0]] for op in ops[:2])
    bias = params[ops[3].input("Y")[0]]
    np.testing.assert_allclose(got, np.tanh(a @ w0 + b @ w1 + bias), rtol=1e-5, atol=1e-6)
    _paddle_runs_it(main, out, {"a": a, "b": b}, params, got)
