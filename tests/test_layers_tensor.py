"""Tensor layer functions: programs built with ``fj.layer``, run by fluidjax and by Paddle 2.6 (from
our serialized program) on the same feeds; gradients against Paddle's backward; random layers;
build-time errors for bad inputs."""

import numpy as np
import pytest

import fluidjax as fj
import paddle_oracle as po
from fluidjax import layer

RNG = np.random.default_rng(11)


_both = po.run_both


def _fixed(name, shape, dtype):
    """A data variable without a batch dim (``layer.data`` always puts -1 in front)."""
    return fj.default_main_program().global_block().create_var(
        name, shape, dtype, stop_gradient=True, need_check_feed=True, is_data=True)


def _assert_same(ours, theirs, rtol=1e-5, atol=1e-6):
    for a, b in zip(ours, theirs):
        if a.shape == (1,) and b.shape == ():
            b = b.reshape(1)       # a Fluid 1.x layer's [1] result; Paddle 2.6 runs the bytes 0-d
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        if a.dtype == bool or np.issubdtype(a.dtype, np.integer):
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def _assert_built_shapes(fetch, values):
    """Shapes known when the program was built (-1 = batch) agree with the run."""
    for var, value in zip(fetch, values):
        assert len(var.shape) == value.ndim, (var.name, var.shape, value.shape)
        assert all(d < 0 or d == r for d, r in zip(var.shape, value.shape)), (var.name, var.shape, value.shape)
        assert var.dtype == value.dtype.name, (var.name, var.dtype, value.dtype)


def test_shape_and_layout_layers_match_paddle():
    x = layer.data("x", dims=[3, 4])
    outs = [
        layer.reshape(x, [0, 12]), layer.reshape(x, [-1, 2, 6]), layer.reshape(x, [0, 4, 3], activation="relu"),
        layer.transpose(x, [0, 2, 1]), layer.flatten(x, 0), layer.flatten(x, start_axis=1),
        layer.squeeze(layer.unsqueeze(x, [1, -1]), [1]), layer.unsqueeze(x, 0),
        layer.broadcast_to(layer.unsqueeze(x, [1]), [-1, 2, 3, 4]), layer.tile(x, [1, 2, 1]), layer.tile(x, [2]),
    ]
    assert outs[0].shape == (-1, 12) and outs[1].shape == (-1, 2, 6) and outs[3].shape == (-1, 4, 3)
    assert outs[4].shape == (-1,) and outs[5].shape == (-1, 12) and outs[6].shape == (-1, 3, 4, 1)
    assert outs[7].shape == (1, -1, 3, 4) and outs[8].shape == (-1, 2, 3, 4) and outs[10].shape == (-1, 3, 8)
    feed = {"x": RNG.uniform(-1, 1, (2, 3, 4)).astype("float32")}
    ours, theirs = _both(outs, feed)
    _assert_same(ours, theirs)
    _assert_built_shapes(outs, ours)
    np.testing.assert_array_equal(ours[4], feed["x"].reshape(-1))


def test_joining_splitting_and_slicing_layers_match_paddle():
    x = layer.data("x", dims=[6])
    y = layer.data("y", dims=[2])
    a, b, c = layer.split(x, 3, dim=1)
    p, q = layer.split(x, [1, -1], dim=-1)
    rows = layer.unstack(layer.reshape(x, [0, 2, 3]), axis=1)
    outs = [
        a, b, c, p, q, *rows,
        layer.concat([x, y, a], axis=1), layer.concat([y, a], axis=-1), layer.stack([a, b, c], axis=1),
        layer.stack([y, b], axis=-1),
        layer.slice(x, axes=[1], starts=[1], ends=[-1]), layer.slice(x, axes=[-1], starts=[-4], ends=[10 ** 9]),
        layer.strided_slice(x, axes=[1], starts=[0], ends=[6], strides=[2]),
        layer.strided_slice(x, axes=[1], starts=[-1], ends=[-1], strides=[-1]),
    ]
    assert q.shape == (-1, 5) and rows[0].shape == (-1, 3) and outs[7].shape == (-1, 10)
    assert outs[9].shape == (-1, 3, 2) and outs[11].shape == (-1, 4) and outs[14].shape == (-1, 6)
    feed = {"x": RNG.uniform(-1, 1, (3, 6)).astype("float32"), "y": RNG.uniform(-1, 1, (3, 2)).astype("float32")}
    ours, theirs = _both(outs, feed)
    _assert_same(ours, theirs)
    _assert_built_shapes(outs, ours)
    np.testing.assert_array_equal(ours[-1], feed["x"][:, ::-1])


def test_indexing_conversion_and_fill_layers_match_paddle():
    x = layer.data("x", dims=[3])
    idx = _fixed("idx", [4], "int64")
    nd = _fixed("nd", [2, 2], "int32")
    table = _fixed("table", [5, 3], "float32")
    rows = _fixed("rows", [2], "int64")
    cols = _fixed("cols", [2], "int64")
    upd = _fixed("upd", [2, 3], "float32")
    label = layer.data("label", dims=[1], dtype="int64")
    outs = [
        layer.gather(table, idx), layer.gather(table, cols, axis=1), layer.gather_nd(table, nd),
        layer.scatter(table, rows, upd), layer.scatter(table, rows, upd, overwrite=False),
        layer.cast(x, "int32"), layer.cast(x, "float64"), layer.assign(x), layer.shape(x),
        layer.one_hot(label, depth=4), layer.fill_constant_batch_size_like(x, [-1, 2], "float32", 1.5),
        layer.fill_constant_batch_size_like(x, [2, -1], "int64", 3, output_dim_idx=1),
        layer.zeros_like(x), layer.ones_like(x), layer.full_like(x, 2.5, "float64"),
        layer.zeros([2, 2], "int32"), layer.ones([3], "float32"),
        layer.pad(x, [0, 0, 1, 2], pad_value=-1.0),
    ]
    assert outs[5].dtype == "int32" and outs[5].stop_gradient and outs[8].shape == (2,)
    assert outs[9].shape == (-1, 4) and outs[10].shape == (-1, 2) and outs[11].shape == (2, -1)
    feed = {"x": RNG.uniform(-3, 3, (4, 3)).astype("float32"), "idx": np.array([4, 0, 0, 2], "int64"),
            "nd": np.array([[0, 1], [4, 2]], "int32"), "table": RNG.uniform(-1, 1, (5, 3)).astype("float32"),
            "rows": np.array([3, 1], "int64"), "cols": np.array([2, 0], "int64"), "upd": RNG.uniform(-1, 1, (2, 3)).astype("float32"),
            "label": np.array([[0], [3], [1], [2]], "int64")}
    ours, theirs = _both(outs, feed)
    _assert_same(ours, theirs)
    _assert_built_shapes(outs, ours)


def test_pad3d_layer_matches_paddle():
    x = layer.data("x", shape=[2, 3, 4, 5], dtype="float32")
    outs = [layer.pad3d(x, [1, 2, 0, 1, 2, 0], mode=m, value=0.5)
            for m in ("constant", "reflect", "replicate", "circular")]
    outs.append(layer.pad3d(x, 1, data_format="NDHWC"))
    feed = {"x": RNG.uniform(-1, 1, (2, 2, 3, 4, 5)).astype("float32")}
    ours, theirs = _both(outs, feed)
    _assert_same(ours, theirs)
    _assert_built_shapes(outs, ours)


def test_range_and_arange_layers():
    outs = [layer.range(0, 10, 3, "int64"), layer.range(1.0, 0.0, -0.25, "float32"), layer.arange(5),
            layer.arange(1, 2, 0.5), layer.range(2, 2, 1, "int32")]
    assert [o.shape for o in outs] == [(4,), (4,), (5,), (2,), (0,)]
    assert outs[2].dtype == "int64" and outs[3].dtype == "float32"
    ours, theirs = _both(outs, {})
    _assert_same(ours, theirs)
    np.testing.assert_array_equal(ours[1], np.arange(1.0, 0.0, -0.25, dtype="float32"))


def test_gradients_through_tensor_layers_match_paddle():
    """A small model through reshape/transpose/concat/slice/gather/pad/...; gradients of the
    input and the weight agree with Paddle's own backward of our serialized forward program."""
    import paddle

    x = layer.data("x", dims=[2, 6], stop_gradient=False)
    idx = _fixed("idx", [3], "int64")
    h = layer.transpose(layer.reshape(x, [0, 3, 4]), [0, 2, 1])            # (-1, 4, 3)
    a, b = layer.split(h, [1, 3], dim=1)                                     # (-1, 1, 3), (-1, 3, 3)
    # (gather along axis 0: Paddle 2.6.2's static gather_grad mishandles a non-zero axis)
    g = layer.transpose(layer.gather(layer.transpose(layer.squeeze(a, [1]), [1, 0]), idx), [1, 0])  # (-1, 3)
    s = layer.strided_slice(b, axes=[1], starts=[-1], ends=[-1], strides=[-2])  # (-1, 2, 3)
    parts = layer.unstack(s, axis=1)
    z = layer.concat([g, layer.flatten(layer.stack(parts, axis=2), 1), layer.slice(g, [1], [1], [3])], axis=1)
    z = layer.pad(layer.tile(layer.unsqueeze(z, [1]), [1, 2, 1]), [0, 0, 0, 1, 1, 0], 0.5)
    z = layer.flatten(layer.broadcast_to(layer.cast(layer.flatten(z, 1), "float64"), [2, -1, 36]), 0, 1)
    y = layer.fc(layer.cast(z, "float32"), output_size=2,
                 param_attr=fj.ParamAttr(name="w", initializer=fj.initializer.Constant(0.1)), bias_attr=False)
    loss = layer.mean(layer.square(y))
    assert z.shape == (-1, 36)
    forward_bytes = fj.default_main_program().serialize()
    fj.ir.append_backward(loss)
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    feed = {"x": RNG.uniform(-1, 1, (3, 2, 6)).astype("float32"), "idx": np.array([2, 0, 2], "int64")}
    ours = exe.run(feed=feed, fetch_list=[loss.name, "w@GRAD", "x@GRAD"])
    w = np.asarray(fj.global_scope().find_var("w").get_tensor())
    prog = po.parse(forward_bytes)
    with paddle.static.program_guard(prog):
        block = prog.global_block()
        grads = paddle.static.gradients([block.var(loss.name)], [block.var("w"), block.var("x")])
    theirs = po.run(prog, feed, [loss.name] + [g.name for g in grads], {"w": w})
    _assert_same(ours, theirs, rtol=1e-5, atol=1e-7)


def test_random_layers_shapes_dtypes_and_seeds():
    u = layer.uniform_random([200, 50], min=2.0, max=4.0, seed=5)
    g = layer.gaussian_random([10000], mean=1.0, std=0.5, dtype="float64")
    r = layer.randint(3, 9, shape=[2000])
    r32 = layer.randint(4, shape=[100], dtype="int32")
    assert u.shape == (200, 50) and g.dtype == "float64" and r.dtype == "int64" and r32.dtype == "int32"
    assert all(v.stop_gradient for v in (u, g, r, r32))
    fetch = [u, g, r, r32]
    first = fj.Executor().run(fetch_list=fetch, scope=fj.Scope())
    second = fj.Executor().run(fetch_list=fetch, scope=fj.Scope())
    np.testing.assert_array_equal(first[0], second[0])  # seed=5 fixes u
    assert not np.array_equal(first[1], second[1])      # g follows no seed
    assert 2.0 <= first[0].min() and first[0].max() < 4.0 and abs(first[0].mean() - 3.0) < 0.05
    assert abs(first[1].mean() - 1.0) < 0.05 and abs(first[1].std() - 0.5) < 0.05
    assert first[2].min() == 3 and first[2].max() == 8 and set(np.unique(first[3])) <= {0, 1, 2, 3}
    fj.default_main_program().random_seed = 17
    again = [fj.Executor().run(fetch_list=[g], scope=fj.Scope())[0] for _ in range(2)]
    np.testing.assert_array_equal(*again)


def test_reshape_to_an_incompatible_size_is_a_shape_error():
    x = layer.data("x", dims=[3, 4])
    with pytest.raises(fj.ShapeError, match="reshape2") as err:
        layer.reshape(x, [0, 5])
    assert "test_layers_tensor.py" in str(err.value)  # names the user's line
    with pytest.raises(fj.ShapeError, match="do not divide"):
        layer.reshape(x, [0, -1, 5])
    with pytest.raises(fj.ShapeError, match="more than one -1"):
        layer.reshape(x, [-1, -1])


def test_bad_inputs_are_clear_errors_at_build_time():
    x = layer.data("x", dims=[3, 4])
    y = layer.data("y", dims=[5, 4])
    with pytest.raises(fj.ShapeError, match="differ in dim 1"):
        layer.concat([x, y], axis=2)
    with pytest.raises(fj.ShapeError, match="add up to"):
        layer.split(x, [1, 1], dim=1)
    with pytest.raises(fj.ShapeError, match="equal parts"):
        layer.split(x, 2, dim=1)
    with pytest.raises(fj.ShapeError, match="permutation"):
        layer.transpose(x, [0, 1, 1])
    with pytest.raises(fj.ShapeError, match="one shape"):
        layer.stack([x, y])
    with pytest.raises(fj.ShapeError, match="only expand"):
        layer.broadcast_to(x, [-1, 3, 8])
    with pytest.raises(fj.ShapeError, match="int32 or int64"):
        layer.gather(x, x)
    with pytest.raises(fj.ShapeError, match="unknown"):
        layer.unstack(x, axis=0)
    with pytest.raises(fj.ShapeError, match="out of range"):
        layer.slice(x, axes=[3], starts=[0], ends=[1])
    with pytest.raises(fj.ShapeError, match="out of range"):
        layer.unsqueeze(x, [5])
    with pytest.raises(fj.ShapeError, match="5-d"):
        layer.pad3d(x, 1)
    with pytest.raises(fj.ShapeError, match="Updates"):
        layer.scatter(y, _fixed("i", [2], "int64"), _fixed("u", [2, 5], "float32"))
    with pytest.raises(TypeError, match="Python number"):
        layer.range(0, layer.shape(x), 1, "int32")
    # a shape given as a Variable is the op's Shape input (Fluid 1.8 takes it too), not an error
    reshaped = layer.reshape(x, layer.shape(x))
    assert reshaped.block.ops[-1].inputs.get("Shape") and len(reshaped.shape) == len(x.shape)
    with pytest.raises(ValueError, match="low < high"):
        layer.randint(5, 5)
