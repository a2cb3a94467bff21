"""Math layer functions: small models built with ``fj.layer``, run by fluidjax and by Paddle 2.6
(from our serialized program) on the same feeds; plus build-time errors for bad inputs."""

import numpy as np
import pytest

import fluidjax as fj
import paddle_oracle as po
from fluidjax import layer

RNG = np.random.default_rng(7)


_both = po.run_both


def _assert_same(ours, theirs, rtol=1e-5, atol=1e-6):
    for a, b in zip(ours, theirs):
        if a.shape == (1,) and b.shape == ():
            b = b.reshape(1)       # a Fluid 1.x layer's [1] result; Paddle 2.6 runs the bytes 0-d
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        if a.dtype == bool or np.issubdtype(a.dtype, np.integer):
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def test_reductions_and_searches_match_paddle():
    x = layer.data("x", dims=[3, 5])
    s = layer.reduce_sum(x, dim=1)
    m = layer.reduce_mean(x, dim=[1, 2], keep_dim=True)
    total = layer.reduce_max(x)
    p = layer.reduce_prod(layer.scale(x, 0.5, 1.0), dim=-1)
    mn = layer.reduce_min(x, dim=0)
    am = layer.argmax(x, axis=2)
    an = layer.argmin(s, axis=1)
    values, indices = layer.topk(x, k=2)
    cs = layer.cumsum(x, axis=1, reverse=True)
    assert s.shape == (-1, 5) and m.shape == (-1, 1, 1) and total.shape == (1,) and mn.shape == (3, 5)
    assert am.shape == (-1, 3) and am.dtype == "int64" and values.shape == (-1, 3, 2) and indices.dtype == "int64"
    xs = RNG.uniform(-1, 1, (4, 3, 5)).astype("float32")
    ours, theirs = _both([s, m, total, p, mn, am, an, values, indices, cs], {"x": xs})
    _assert_same(ours, theirs)
    assert ours[2].shape == (1,)  # a full reduction is [1], as in Fluid 1.x (Paddle 2.x bytes: 0-d)


def test_activations_match_paddle():
    x = layer.data("x", dims=[6])
    outs = [
        layer.relu6(layer.scale(x, 8.0)), layer.leaky_relu(x, alpha=0.1), layer.elu(x, alpha=0.5),
        layer.gelu(x), layer.gelu(x, approximate=True), layer.swish(x), layer.silu(x),
        layer.hard_swish(layer.scale(x, 4.0)), layer.hard_sigmoid(x, slope=0.3), layer.softplus(x, beta=2.0),
        layer.softsign(x), layer.exp(x), layer.abs(x), layer.square(x), layer.sign(x), layer.floor(x),
        layer.ceil(x), layer.round(layer.scale(x, 3.0)), layer.clip(x, -0.5, 0.25),
    ]
    pos = layer.abs(x)
    outs += [layer.log(pos), layer.sqrt(pos), layer.rsqrt(pos), layer.reciprocal(pos), layer.pow(pos, 1.5)]
    xs = RNG.uniform(-1, 1, (3, 6)).astype("float32")
    xs[np.abs(xs) < 0.05] = 0.5
    _assert_same(*_both(outs, {"x": xs}))


def test_activation_layers_train_through_fc():
    """fc with an activation layer function; W's gradient matches Paddle's own backward."""
    import paddle

    x = layer.data("x", dims=[4])
    h = layer.fc(x, output_size=3, activation=layer.gelu,
                 param_attr=fj.ParamAttr(name="w", initializer=fj.initializer.Constant(0.3)), bias_attr=False)
    loss = layer.mean(layer.softplus(layer.elementwise_max(h, layer.scale(h, -0.5))))
    forward_bytes = fj.default_main_program().serialize()
    fj.ir.append_backward(loss)
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    xs = RNG.uniform(-1, 1, (5, 4)).astype("float32")
    ours = exe.run(feed={"x": xs}, fetch_list=[loss.name, "w@GRAD"])
    w = np.asarray(fj.global_scope().find_var("w").get_tensor())
    theirs_prog = po.parse(forward_bytes)
    with paddle.static.program_guard(theirs_prog):
        block = theirs_prog.global_block()
        (w_grad,) = paddle.static.gradients([block.var(loss.name)], [block.var("w")])
    theirs = po.run(theirs_prog, {"x": xs}, [loss.name, w_grad.name], {"w": w})
    _assert_same(ours, theirs, rtol=1e-5, atol=1e-7)


def test_binary_math_comparisons_and_logic_match_paddle():
    a = layer.data("a", dims=[2, 3])
    b = layer.data("b", dims=[1, 3])
    c = layer.data("c", dims=[2, 3])
    outs = [
        layer.elementwise_max(a, b), layer.elementwise_min(a, c, activation="relu"),
        layer.elementwise_pow(layer.abs(a), c), layer.elementwise_mod(a, c), layer.elementwise_floordiv(a, c),
        layer.sums([a, c, a]),
    ]
    gt = layer.greater_than(a, c)
    le = layer.less_equal(a, b)
    outs += [
        layer.equal(a, a), layer.not_equal(a, c), layer.less_than(a, b), le, gt, layer.greater_equal(c, a),
        layer.logical_and(gt, le), layer.logical_or(gt, le), layer.logical_xor(gt, le), layer.logical_not(gt),
        layer.where(gt, a, c), layer.isfinite(layer.log(a)),
    ]
    assert gt.dtype == "bool" and gt.shape == (-1, 2, 3) and gt.stop_gradient
    feed = {"a": RNG.uniform(-2, 2, (4, 2, 3)).astype("float32"),
            "b": RNG.uniform(-2, 2, (4, 1, 3)).astype("float32"),
            "c": RNG.uniform(0.5, 2, (4, 2, 3)).astype("float32")}
    _assert_same(*_both(outs, feed))


def test_broadcast_mismatch_is_a_shape_error_at_build_time():
    x = layer.data("x", dims=[3, 4])
    y = layer.data("y", dims=[5])
    with pytest.raises(fj.ShapeError, match="do not broadcast") as err:
        layer.elementwise_max(x, y)
    assert "test_layers_math.py" in str(err.value)  # names the user's line
    with pytest.raises(fj.ShapeError, match="do not broadcast"):
        layer.less_than(x, y)
    with pytest.raises(fj.ShapeError, match="do not broadcast"):
        layer.logical_or(layer.isfinite(x), layer.isfinite(y))


def test_bad_inputs_are_clear_errors_at_build_time():
    x = layer.data("x", dims=[3, 4])
    with pytest.raises(fj.ShapeError, match="out of range"):
        layer.reduce_sum(x, dim=3)
    with pytest.raises(fj.ShapeError, match="out of range"):
        layer.argmax(x, axis=-4)
    with pytest.raises(fj.ShapeError, match="k=9"):
        layer.topk(x, k=9)
    with pytest.raises(fj.ShapeError, match="equal shapes"):
        layer.sums([x, layer.data("z", dims=[4, 3])])
    with pytest.raises(fj.ShapeError, match="dtype|float64"):
        layer.elementwise_pow(x, layer.data("d", dims=[3, 4], dtype="float64"))
    with pytest.raises(fj.ShapeError, match="one shape"):
        layer.where(layer.isfinite(x), x, layer.data("w", dims=[4]))
    with pytest.raises(fj.ShapeError, match="bool"):
        layer.where(x, x, x)
    with pytest.raises(ValueError, match="min"):
        layer.clip(x, 1.0, -1.0)
    # Only the isfinite op made for the where test went in: failed layers append nothing.
    assert [op.type for op in fj.default_main_program().global_block().ops] == ["isfinite_v2"]
