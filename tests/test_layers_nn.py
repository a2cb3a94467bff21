"""NN layer functions: small models built with ``fj.layer``, run by fluidjax and by Paddle 2.6 (our
serialized program, with the same parameter values and feeds); batch-norm statistics, dropout and
``clone(for_test=True)``; build-time errors."""

import numpy as np
import pytest

import fluidjax as fj
import paddle_oracle as po
from fluidjax import layer

RNG = np.random.default_rng(11)


def _rand(*shape, low=-1.0, high=1.0, dtype="float32"):
    return RNG.uniform(low, high, shape).astype(dtype)


_persistables = po.persistable_values


_both = po.run_both


def _assert_same(ours, theirs, rtol=1e-5, atol=1e-5):
    for a, b in zip(ours, theirs):
        if a.shape == (1,) and b.shape == ():
            b = b.reshape(1)       # a Fluid 1.x layer's [1] result; Paddle 2.6 runs the bytes 0-d
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        if np.issubdtype(a.dtype, np.integer) or a.dtype == bool:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


# -- forward agreement with Paddle --------------------------------------------------------------------
def test_conv_and_pool_layers_match_paddle():
    img = layer.data("img", shape=[3, 9, 8])
    a = layer.conv2d(img, num_filters=4, filter_size=3, padding=1, activation="relu")
    b = layer.conv2d(img, num_filters=6, filter_size=[3, 2], stride=2, padding="SAME", bias_attr=False)
    c = layer.conv2d(img, num_filters=6, filter_size=3, groups=3, use_cudnn=False, padding=[1, 0, 2, 1])
    d = layer.conv2d(a, num_filters=4, filter_size=3, dilation=2, groups=2)
    t = layer.conv2d_transpose(a, num_filters=2, filter_size=4, stride=2, padding=1)
    t2 = layer.conv2d_transpose(a, num_filters=2, output_size=[19, 17], stride=2)
    p1 = layer.pool2d(a, pool_size=2, pool_stride=2)
    p2 = layer.pool2d(a, pool_size=3, pool_type="avg", pool_stride=2, pool_padding=1, exclusive=False,
                      ceil_mode=True)
    p3 = layer.pool2d(a, pool_type="avg", global_pooling=True)
    p4 = layer.adaptive_pool2d(a, pool_size=[2, 3], pool_type="avg")
    assert [op.type for op in fj.default_main_program().global_block().ops].count("depthwise_conv2d") == 1
    assert a.shape == (-1, 4, 9, 8) and b.shape == (-1, 6, 5, 4) and c.shape == (-1, 6, 8, 9)
    assert t.shape == (-1, 2, 18, 16) and t2.shape == (-1, 2, 19, 17) and p1.shape == (-1, 4, 4, 4)
    assert p3.shape == (-1, 4, 1, 1) and p4.shape == (-1, 4, 2, 3)
    ours, theirs = _both([a, b, c, d, t, t2, p1, p2, p3, p4], {"img": _rand(2, 3, 9, 8)})
    _assert_same(ours, theirs, rtol=1e-4, atol=1e-5)


def test_nhwc_conv_and_pool_match_paddle():
    img = layer.data("img", shape=[7, 6, 3])
    a = layer.conv2d(img, num_filters=4, filter_size=3, padding=1, data_format="NHWC", activation="tanh")
    p = layer.pool2d(a, pool_size=2, pool_stride=2, data_format="NHWC")
    t = layer.conv2d_transpose(p, num_filters=3, filter_size=2, stride=2, data_format="NHWC")
    assert a.shape == (-1, 7, 6, 4) and p.shape == (-1, 3, 3, 4) and t.shape == (-1, 6, 6, 3)
    _assert_same(*_both([a, p, t], {"img": _rand(2, 7, 6, 3)}), rtol=1e-4, atol=1e-5)


def test_conv2d_default_filter_initializer_is_paddles_normal():
    img = layer.data("img", shape=[16, 8, 8])
    layer.conv2d(img, num_filters=64, filter_size=3)
    ops = fj.default_startup_program().global_block().ops
    init = next(op for op in ops if op.type == "gaussian_random")
    assert init.attrs["std"] == pytest.approx((2.0 / (3 * 3 * 16)) ** 0.5)
    bias_init = next(op for op in ops if op.type == "fill_constant")
    assert bias_init.attrs["value"] == 0.0


def test_norm_layers_match_paddle():
    x = layer.data("x", shape=[4, 3, 5])
    ln = layer.layer_norm(x, begin_norm_axis=2, activation="relu")
    ln_all = layer.layer_norm(x, scale=False, shift=False)
    gn = layer.group_norm(x, groups=2)
    inn = layer.instance_norm(x)
    assert ln.shape == (-1, 4, 3, 5)
    _assert_same(*_both([ln, ln_all, gn, inn], {"x": _rand(3, 4, 3, 5)}), rtol=1e-4, atol=1e-5)


def test_other_nn_layers_match_paddle():
    x = layer.data("x", shape=[3, 4])
    y = layer.data("y", shape=[4, 5])
    ids = layer.data("ids", shape=[6], dtype="int64")
    mm = layer.matmul(x, y, alpha=0.5)
    mt = layer.matmul(x, x, transpose_y=True)
    ls = layer.log_softmax(x, axis=1)
    emb = layer.embedding(ids, size=[10, 3])
    emb_pad = layer.embedding(ids, size=[10, 3], padding_idx=-1)
    pr = layer.prelu(x, mode="all")
    pc = layer.prelu(x, mode="channel")
    pe = layer.prelu(x, mode="element")
    assert emb.shape == (-1, 6, 3) and mm.shape == (-1, 3, 5) and mt.shape == (-1, 3, 3)
    ids_value = RNG.integers(0, 10, (2, 6)).astype("int64")
    ids_value[0, :2] = 9
    feed = {"x": _rand(2, 3, 4), "y": _rand(2, 4, 5), "ids": ids_value}
    ours, theirs = _both([mm, mt, ls, emb, emb_pad, pr, pc, pe], feed)
    _assert_same(ours, theirs)
    assert not ours[4][0, :2].any()  # the padding row (-1 → 9) reads as zeros


def test_resize_layers_match_paddle():
    img = layer.data("img", shape=[2, 4, 5])
    outs = [layer.resize_bilinear(img, out_shape=[7, 9]),
            layer.resize_bilinear(img, scale=1.5, align_corners=False, align_mode=0),
            layer.resize_bilinear(img, out_shape=[3, 3], align_corners=False),
            layer.resize_nearest(img, out_shape=[8, 10]),
            layer.resize_nearest(img, scale=2.0, align_corners=False)]
    assert outs[1].shape == (-1, 2, 6, 7) and outs[4].shape == (-1, 2, 8, 10)
    _assert_same(*_both(outs, {"img": _rand(2, 2, 4, 5)}))


def test_loss_and_metric_layers_match_paddle():
    logits = layer.data("logits", dims=5)
    label = layer.data("label", dims=1, dtype="int64")
    target = layer.data("target", dims=5)
    loss, softmax = layer.softmax_with_cross_entropy(logits, label, return_softmax=True)
    soft = layer.softmax_with_cross_entropy(logits, layer.softmax(target), soft_label=True)
    ignored = layer.softmax_with_cross_entropy(logits, label, ignore_index=2)
    hub = layer.huber_loss(logits, target, delta=0.5)
    sig = layer.sigmoid_cross_entropy_with_logits(logits, layer.sigmoid(target), normalize=True)
    acc1 = layer.accuracy(logits, label)
    acc3 = layer.accuracy(logits, label, k=3)
    assert loss.shape == (-1, 1) and softmax.shape == (-1, 5) and acc1.shape == (1,) and acc1.dtype == "float32"
    feed = {"logits": _rand(8, 5), "label": RNG.integers(0, 5, (8, 1)).astype("int64"), "target": _rand(8, 5)}
    ours, theirs = _both([loss, softmax, soft, ignored, hub, sig, acc1, acc3], feed)
    _assert_same(ours, theirs)
    top = np.argsort(-feed["logits"], axis=1)
    assert ours[6] == pytest.approx(np.mean(top[:, 0] == feed["label"][:, 0]))


def test_cos_sim_layer():
    a = layer.data("a", dims=4)
    b = layer.data("b", dims=4)
    out = layer.cos_sim(a, b)
    assert out.shape == (-1, 1)
    av, bv = _rand(3, 4), _rand(3, 4)
    (value,) = fj.Executor().run(feed={"a": av, "b": bv}, fetch_list=[out])
    expected = (av * bv).sum(1) / np.linalg.norm(av, axis=1) / np.linalg.norm(bv, axis=1)
    np.testing.assert_allclose(value[:, 0], expected, rtol=1e-5)


# -- training: gradients, batch-norm statistics, dropout, clone(for_test=True) ---------------------------
def _small_cnn(dropout_prob=None):
    img = layer.data("img", shape=[2, 6, 6])
    label = layer.data("label", dims=1, dtype="int64")
    h = layer.conv2d(img, num_filters=4, filter_size=3, padding=1)
    h = layer.batch_norm(h, activation="relu", momentum=0.8, moving_mean_name="bn_mean",
                         moving_variance_name="bn_var")
    h = layer.pool2d(h, pool_size=2, pool_stride=2)
    if dropout_prob is not None:
        h = layer.dropout(h, dropout_prob=dropout_prob)
    logits = layer.fc(h, output_size=3)
    loss = layer.mean(layer.softmax_with_cross_entropy(logits, label))
    return img, label, h, logits, loss


def test_cnn_gradients_match_paddle():
    import paddle

    _, _, _, _, loss = _small_cnn()
    main = fj.default_main_program()
    forward_bytes = main.serialize()
    params_grads = fj.append_backward(loss)
    params = [p.name for p, _ in params_grads]
    assert "bn_mean" not in params and "bn_var" not in params and len(params) == 6
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    values = _persistables(main)
    feed = {"img": _rand(4, 2, 6, 6), "label": RNG.integers(0, 3, (4, 1)).astype("int64")}
    ours = exe.run(feed=feed, fetch_list=[loss.name] + [p + "@GRAD" for p in params])
    prog = po.parse(forward_bytes)
    with paddle.static.program_guard(prog):
        block = prog.global_block()
        grads = paddle.static.gradients([block.var(loss.name)], [block.var(p) for p in params])
    theirs = po.run(prog, feed, [loss.name] + [g.name for g in grads], values)
    _assert_same(ours, theirs, rtol=1e-4, atol=1e-6)


def test_batch_norm_training_updates_moving_statistics_like_paddle():
    import paddle

    x = layer.data("x", shape=[3, 4, 4])
    y = layer.batch_norm(x, momentum=0.7, moving_mean_name="mm", moving_variance_name="mv")
    main = fj.default_main_program()
    startup = fj.default_startup_program()
    assert main.global_block().var("mm").persistable and not main.global_block().var("mm").trainable
    bn_op = next(op for op in main.global_block().ops if op.type == "batch_norm")
    assert bn_op.output("MeanOut") == ["mm"] and bn_op.output("VarianceOut") == ["mv"]
    exe = fj.Executor()
    exe.run(startup)
    np.testing.assert_array_equal(np.asarray(fj.global_scope().find_var("mm").get_tensor()), np.zeros(3))
    np.testing.assert_array_equal(np.asarray(fj.global_scope().find_var("mv").get_tensor()), np.ones(3))
    paddle_scope = paddle.static.Scope()
    initial = _persistables(main)
    for name, value in initial.items():
        paddle_scope.var(name).get_tensor().set(value, paddle.CPUPlace())
    prog = po.parse(main.serialize())
    mean, var = np.zeros(3), np.ones(3)
    for step in range(3):
        xs = _rand(5, 3, 4, 4, low=-1 + step, high=2 + step)
        (ours,) = exe.run(feed={"x": xs}, fetch_list=[y])
        (theirs,) = po.run(prog, {"x": xs}, [y.name], scope=paddle_scope)
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
        mean = 0.7 * mean + 0.3 * xs.mean(axis=(0, 2, 3))
        var = 0.7 * var + 0.3 * xs.var(axis=(0, 2, 3))
        got = _persistables(main)
        theirs_stats = po.scope_values(paddle_scope, ["mm", "mv"])
        for name, expected in (("mm", mean), ("mv", var)):
            np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got[name], theirs_stats[name], rtol=1e-5, atol=1e-6)


def test_clone_for_test_uses_inference_behaviour():
    img, label, h, logits, loss = _small_cnn(dropout_prob=0.5)
    main = fj.default_main_program()
    test_prog = main.clone(for_test=True)
    for op in test_prog.global_block().ops:
        if op.type in ("batch_norm", "dropout"):
            assert op.attrs["is_test"] is True
    fj.append_backward(loss)
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    feed = {"img": _rand(4, 2, 6, 6), "label": RNG.integers(0, 3, (4, 1)).astype("int64")}
    for _ in range(2):  # training moves the statistics and draws fresh dropout masks
        exe.run(main, feed=feed, fetch_list=[loss])
    a, b = exe.run(main, feed=feed, fetch_list=[h])[0], exe.run(main, feed=feed, fetch_list=[h])[0]
    assert not np.array_equal(a, b)
    stats = {k: v.copy() for k, v in _persistables(main).items() if k in ("bn_mean", "bn_var")}
    assert not np.allclose(stats["bn_mean"], 0)
    first = exe.run(test_prog, feed=feed, fetch_list=[h, logits])
    second = exe.run(test_prog, feed=feed, fetch_list=[h, logits])
    for x, y in zip(first, second):
        np.testing.assert_array_equal(x, y)  # deterministic: no dropout mask, fixed statistics
    after = _persistables(main)
    for name in stats:
        np.testing.assert_array_equal(after[name], stats[name])  # inference leaves the statistics alone
    # Paddle runs the inference program the same way (moving statistics, dropout scaled by 1 - p).
    theirs = po.run(test_prog.serialize(), feed, [h.name, logits.name], after)
    _assert_same(first, theirs, rtol=1e-4, atol=1e-5)


def test_dropout_layer_masks_and_gradient():
    x = layer.data("x", dims=[50, 40], stop_gradient=False)
    h = layer.dropout(x, dropout_prob=0.25, dropout_implementation="upscale_in_train")
    fixed = layer.dropout(x, dropout_prob=0.25, seed=3)
    loss = layer.mean(h)
    fj.append_backward(loss)
    ops = fj.default_main_program().global_block().ops
    mask_name = next(op for op in ops if op.type == "dropout").output("Mask")[0]
    exe = fj.Executor()
    xs = _rand(2, 50, 40, low=0.5, high=1.5)
    out1, mask1, grad1, f1 = exe.run(feed={"x": xs}, fetch_list=[h, mask_name, "x@GRAD", fixed])
    out2, f2 = exe.run(feed={"x": xs}, fetch_list=[h, fixed])
    assert mask1.dtype == np.uint8 and abs(mask1.mean() - 0.75) < 0.03
    np.testing.assert_allclose(out1, xs * mask1 / 0.75, rtol=1e-6)
    np.testing.assert_allclose(grad1, mask1 / 0.75 / xs.size, rtol=1e-6)  # the backward reuses the mask
    assert not np.array_equal(out1, out2)
    np.testing.assert_array_equal(f1, f2)  # seed= fixes the mask


# -- build-time errors -----------------------------------------------------------------------------------
def test_conv2d_channel_mismatch_is_a_shape_error_at_build_time():
    img = layer.data("img", shape=[3, 8, 8])
    with pytest.raises(fj.ShapeError, match="conv2d") as info:
        layer.conv2d(img, num_filters=4, filter_size=3, groups=2)
    assert "3 channels" in str(info.value)
    block = fj.default_main_program().global_block()
    w = block.create_parameter("w_bad", (4, 5, 3, 3))
    out = block.create_var("out")
    with pytest.raises(fj.ShapeError) as info:
        block.append_op("conv2d", {"Input": img, "Filter": w}, {"Output": out})
    message = str(info.value)
    assert "'conv2d'" in message and "3 channels" in message and "test_layers_nn.py" in message
    assert not any(op.type == "conv2d" for op in block.ops)


def test_bad_nn_inputs_are_clear_errors_at_build_time():
    img = layer.data("img", shape=[3, 4, 4])
    with pytest.raises(fj.ShapeError, match="pool2d"):
        layer.pool2d(img, pool_size=5)
    with pytest.raises(fj.ShapeError, match="int64 or int32"):
        layer.embedding(img, size=[10, 3])
    logits = layer.data("logits", dims=5)
    with pytest.raises(fj.ShapeError, match="softmax_with_cross_entropy"):
        # a float hard label declared with need_check_feed (fluid.data); layer.data's is advice
        # and becomes int64 with a warning (tests/test_fluid1_feed_rules.py)
        layer.softmax_with_cross_entropy(logits, fj.data("fl", [-1, 1]))
    with pytest.raises(fj.ShapeError, match="group_norm"):
        layer.group_norm(img, groups=2)
    with pytest.raises(fj.ShapeError, match="matmul"):
        m = layer.data("m", shape=[3, 4])
        layer.matmul(m, m)
    with pytest.raises(ValueError, match="dropout_prob"):
        layer.dropout(img, dropout_prob=1.5)


def test_paddle_built_cnn_trains_in_fluidjax():
    """A model built with Paddle's own API (its op slots and attributes) runs in fluidjax: a
    training step gives Paddle's outputs and moves the batch-norm statistics as Paddle does."""
    import paddle
    import paddle.nn.functional as F
    from fluidjax.lowering.lod_tensor import LoDTensor

    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        img = paddle.static.data("img", [-1, 3, 8, 8])
        ids = paddle.static.data("ids", [-1, 5], "int64")
        label = paddle.static.data("label", [-1, 1], "int64")
        h = paddle.static.nn.batch_norm(paddle.static.nn.conv2d(img, 4, 3, padding=1), act="relu")
        up = paddle.static.nn.conv2d_transpose(h, 2, filter_size=2, stride=2)
        h = F.max_pool2d(h, 2, 2)
        outs = [up, F.avg_pool2d(h, 2, 2, ceil_mode=True, exclusive=False), F.adaptive_avg_pool2d(h, 3),
                F.interpolate(h, scale_factor=2, mode="bilinear"), F.interpolate(h, size=[5, 7], mode="nearest"),
                paddle.static.nn.group_norm(h, 2), paddle.static.nn.instance_norm(h),
                paddle.static.nn.prelu(h, mode="channel")]
        e = paddle.static.nn.layer_norm(paddle.static.nn.embedding(ids, [20, 6]), begin_norm_axis=2)
        logits = paddle.static.nn.fc(paddle.reshape(h, [-1, 64]), 5)
        outs += [e, paddle.matmul(e, e, transpose_y=True), logits, F.cross_entropy(logits, label, reduction="none"),
                 F.log_softmax(logits), paddle.static.accuracy(F.softmax(logits), label, k=2)]
    feed = {"img": _rand(2, 3, 8, 8), "ids": RNG.integers(0, 20, (2, 5)), "label": np.array([[1], [3]])}
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        names = [v.name for v in main.list_vars() if v.persistable and scope.find_var(v.name) is not None]
        params = {n: np.array(scope.find_var(n).get_tensor()) for n in names}
        theirs = exe.run(main, feed=feed, fetch_list=outs)
    stats_names = [n for n in names if n.startswith("batch_norm") and n.endswith(("w_1", "w_2"))]
    ours_scope = fj.Scope()
    for name, value in params.items():
        ours_scope.var(name).get_mutable(LoDTensor).set(value)
    program = fj.Program.parse(main.desc.serialize_to_string())
    ours = fj.Executor().run(program, feed=feed, fetch_list=[v.name for v in outs], scope=ours_scope)
    _assert_same(ours, [np.asarray(t) for t in theirs], rtol=1e-4, atol=1e-5)
    assert len(stats_names) == 2
    for name in stats_names:
        np.testing.assert_allclose(np.asarray(ours_scope.find_var(name).get_tensor()),
                                   np.array(scope.find_var(name).get_tensor()), rtol=1e-5, atol=1e-6)
