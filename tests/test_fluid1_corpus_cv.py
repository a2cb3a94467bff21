"""The computer-vision scripts of the PaddlePaddle/models corpus (docs/fluid1.md, "Corpus"): each
mechanism they needed, checked against Paddle 2.6.2 running the same program bytes or NumPy."""

from __future__ import annotations

import jax  # noqa: F401  (before paddle)
import numpy as np
import pytest

import fluidjax as fluid
from fluidjax.ir.errors import ShapeError
import paddle_oracle as po


def _programs():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    return main, startup


_run_both = po.run_programs_both


# -- resize with a run-time size tensor (YOLOv3's upsample) ---------------------------------------
@pytest.mark.parametrize("how", ["actual_shape", "out_shape_var", "out_shape_list"])
def test_resize_nearest_size_from_the_inputs_shape(how):
    """yolov3.py's upsample: ``resize_nearest(x, scale=2, actual_shape=shape(x)[2:4] * 2)``; the
    size tensor (OutSize / SizeTensor) is computed from shapes, so it is known at trace."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3, 5, 7], dtype="float32")
        hw = fluid.layers.cast(fluid.layers.slice(fluid.layers.shape(x), axes=[0], starts=[2], ends=[4]), "int32")
        size = hw * 2
        if how == "actual_shape":
            y = fluid.layers.resize_nearest(x, scale=2, actual_shape=size)
        elif how == "out_shape_var":
            y = fluid.layers.resize_nearest(x, out_shape=size)
        else:
            h = fluid.layers.slice(size, axes=[0], starts=[0], ends=[1])
            y = fluid.layers.resize_nearest(x, out_shape=[h, 14])
        loss = fluid.layers.mean(y * y)
    op = next(o for o in main.global_block().ops if o.type == "nearest_interp_v2")
    assert (op.input("OutSize") if how != "out_shape_list" else op.input("SizeTensor"))
    feed = {"x": np.random.RandomState(0).randn(2, 3, 5, 7).astype("float32")}
    ours, theirs = _run_both(main, startup, feed, [y, loss])
    assert ours[0].shape == (2, 3, 10, 14)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5)
    want = feed["x"].repeat(2, axis=2).repeat(2, axis=3)
    np.testing.assert_allclose(ours[0], want)


def test_resize_bilinear_actual_shape_trains():
    """The size tensor is no gradient input: the image's gradient flows, checked against Paddle."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[2, 4, 4], dtype="float32")
        x.stop_gradient = False
        size = fluid.layers.cast(fluid.layers.slice(fluid.layers.shape(x), axes=[0], starts=[2], ends=[4]),
                                 "int32") + 2
        y = fluid.layers.resize_bilinear(x, out_shape=[6, 6], actual_shape=size)
        loss = fluid.layers.reduce_sum(y * y)
        grad, = fluid.backward.gradients([loss], [x])
    feed = {"x": np.random.RandomState(1).randn(1, 2, 4, 4).astype("float32")}
    ours, theirs = _run_both(main, startup, feed, [y, grad])
    assert ours[0].shape == (1, 2, 6, 6)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_resize_actual_shape_must_be_a_variable():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3, 5, 7], dtype="float32")
        with pytest.raises(TypeError, match="actual_shape"):
            fluid.layers.resize_nearest(x, scale=2, actual_shape=[10, 14])


# -- reshape with a run-time shape (face_detection's pyramidbox) -----------------------------------
def test_reshape_actual_shape_is_the_shape_input():
    """pyramidbox.py: ``reshape(trans, shape=compile_shape, actual_shape=assign(np.array([0, -1, k])))``:
    ``shape`` is the build-time shape, the ``Shape`` input the run-time one."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[4, 3, 2], dtype="float32")
        t = fluid.layers.transpose(x, perm=[0, 2, 3, 1])
        compile_shape = [t.shape[0], int(np.prod(t.shape[1:])) // 4, 4]
        run_shape = fluid.layers.assign(np.array([0, -1, 4]).astype("int32"))
        y = fluid.layers.reshape(t, shape=compile_shape, actual_shape=run_shape)
        loss = fluid.layers.mean(y)
    assert tuple(y.shape) == (-1, 6, 4)
    op = next(o for o in main.global_block().ops if o.type == "reshape2")
    assert op.input("Shape") == [run_shape.name]
    feed = {"x": np.arange(2 * 24, dtype="float32").reshape(2, 4, 3, 2)}
    ours, theirs = _run_both(main, startup, feed, [y, loss])
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_array_equal(ours[0], feed["x"].transpose(0, 2, 3, 1).reshape(2, 6, 4))


# -- concat of an input with extra trailing 1-dims (the CGAN generator) --------------------------
def test_concat_input_with_extra_trailing_unit_dims_joins_as_fluid_did():
    """CGAN_network.py: ``concat([noise (N, 100), reshape(label, [-1, 1, 1, 1])], 1)`` — Fluid 1.x
    gave (N, 101) (its check stops at the first input's rank, its kernel copies elements from the
    axis on); Paddle 2.6.2 refuses, so NumPy is the oracle, the gradient by jax.grad's rule."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        noise = fluid.layers.data("noise", shape=[5], dtype="float32")
        noise.stop_gradient = False
        label = fluid.layers.data("label", shape=[1], dtype="float32")
        y = fluid.layers.reshape(label, shape=[-1, 1, 1, 1])
        xy = fluid.layers.concat([noise, y], 1)
        loss = fluid.layers.reduce_sum(xy * xy)
        grad, = fluid.backward.gradients([loss], [noise])
    assert tuple(xy.shape) == (-1, 6)
    r = np.random.RandomState(2)
    feed = {"noise": r.randn(3, 5).astype("float32"), "label": r.randn(3, 1).astype("float32")}
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    out, g = exe.run(main, feed=feed, fetch_list=[xy, grad])
    np.testing.assert_array_equal(out, np.concatenate([feed["noise"], feed["label"]], 1))
    np.testing.assert_allclose(g, 2 * feed["noise"], rtol=1e-6)


def test_concat_extra_dims_that_are_not_one_stay_a_rank_error():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        a = fluid.layers.data("a", shape=[5], dtype="float32")
        b = fluid.layers.data("b", shape=[1, 2], dtype="float32")
        with pytest.raises(ShapeError, match="same rank"):
            fluid.layers.concat([a, b], 1)


# -- grouped convolution's filter gradient (ResNeXt, SE-ResNeXt, DPN) ------------------------------
@pytest.mark.parametrize("stride,padding,dilation,fmt", [(1, 1, 1, "NCHW"), (2, [1, 0], 1, "NCHW"),
                                                          (1, 2, 2, "NCHW"), (2, 1, 1, "NHWC")])
def test_grouped_conv2d_gradients_equal_paddles(stride, padding, dilation, fmt):
    """groups=4 conv2d: output, input gradient and filter gradient (computed tap by tap, XLA's
    grouped filter gradient being ~100x slower on CPU) against Paddle 2.6.2 on the same bytes."""
    main, startup = _programs()
    shape = [8, 9, 7] if fmt == "NCHW" else [9, 7, 8]
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=shape, dtype="float32")
        x.stop_gradient = False
        y = fluid.layers.conv2d(x, num_filters=12, filter_size=3, stride=stride, padding=padding,
                                dilation=dilation, groups=4, bias_attr=False, data_format=fmt)
        loss = fluid.layers.reduce_sum(y * y)
        w = main.global_block().all_parameters()[0]
        gx, gw = fluid.backward.gradients([loss], [x, w])
    feed = {"x": np.random.RandomState(3).randn(2, *shape).astype("float32")}
    ours, theirs = _run_both(main, startup, feed, [y, gx, gw])
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("groups,stride,padding", [(8, 2, 1), (2, 2, 0), (4, 1, 2)])
def test_grouped_conv2d_transpose_gradients_equal_paddles(groups, stride, padding):
    """pyramidbox's upsampling: conv2d_transpose with groups (= channels there); filter gradient tap
    by tap on the zero-dilated input, against Paddle 2.6.2."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[8, 5, 6], dtype="float32")
        x.stop_gradient = False
        y = fluid.layers.conv2d_transpose(x, num_filters=8, filter_size=4, stride=stride, padding=padding,
                                          groups=groups, bias_attr=False)
        loss = fluid.layers.reduce_sum(y * y)
        w = main.global_block().all_parameters()[0]
        gx, gw = fluid.backward.gradients([loss], [x, w])
    feed = {"x": np.random.RandomState(4).randn(2, 8, 5, 6).astype("float32")}
    ours, theirs = _run_both(main, startup, feed, [y, gx, gw])
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4)


# -- py_reader slots take samples of their rank at any size (R-CNN's images) -----------------------
def test_py_reader_slot_takes_images_of_their_own_size():
    """rcnn/models/model_builder.py declares the image slot [-1, 3, max_size, max_size] and its
    reader feeds each (padded) minibatch at its own size; Fluid 1.5's DataFeeder reshaped only on a
    rank difference. The fed size then decides the step's shapes (NumPy oracle)."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        reader = fluid.layers.py_reader(capacity=4, shapes=[[-1, 3, 8, 8], [-1, 1]], dtypes=["float32", "int64"])
        img, label = fluid.layers.read_file(reader)
        total = fluid.layers.reduce_sum(img, dim=[1, 2, 3])
    r = np.random.RandomState(5)
    batches = [[(r.rand(3, h, w).astype("float32"), [1]) for _ in range(2)] for h, w in ((8, 8), (6, 10), (12, 4))]
    reader.decorate_paddle_reader(lambda: iter(batches))
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    reader.start()
    for batch in batches:
        got, = exe.run(main, fetch_list=[total])
        np.testing.assert_allclose(got, [s[0].sum() for s in batch], rtol=1e-5)
    reader.reset()
    # a data variable of layers.data keeps the size check of its samples
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data("x", shape=[2], dtype="float32")
        with pytest.raises(fluid.FeedError, match="has shape"):
            fluid.DataFeeder([x], fluid.CPUPlace()).feed([([1.0, 2.0, 3.0],)])


def test_variable_astype_is_a_cast():
    """deeplabv3+/train.py: ``fluid.layers.argmax(logit, axis=1).astype('int32')``."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3, 2], dtype="float32")
        pred = fluid.layers.argmax(x, axis=1).astype("int32")
        half = (x * 2).astype("float64")
    assert pred.dtype == "int32" and half.dtype == "float64"
    assert [op.type for op in main.global_block().ops].count("cast") == 2
    feed = {"x": np.random.RandomState(6).randn(2, 3, 2).astype("float32")}
    ours, theirs = _run_both(main, startup, feed, [pred, half])
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_array_equal(ours[0], feed["x"].argmax(1).astype("int32"))
    assert ours[1].dtype == np.float64
    np.testing.assert_allclose(ours[1], theirs[1])


# -- smooth_l1_loss of rows whose number is data (R-CNN's rpn_loss) --------------------------------
def test_smooth_l1_loss_takes_counted_rows():
    """rcnn/models/model_builder.py: ``smooth_l1_loss`` of the rows rpn_target_assign gathers (their
    number is data); the loss is row-wise, so it honours the count (here rows picked by nonzero).
    Paddle 2.6.2 has no smooth_l1_loss op: NumPy is the oracle."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[6, 4], dtype="float32", append_batch_size=False)
        y = fluid.layers.data("y", shape=[6, 4], dtype="float32", append_batch_size=False)
        keep = fluid.layers.data("keep", shape=[6], dtype="float32", append_batch_size=False)
        idx = fluid.layers.nonzero(fluid.layers.greater_than(keep, fluid.layers.fill_constant([1], "float32", 0.0)))
        xs, ys = fluid.layers.gather(x, idx), fluid.layers.gather(y, idx)
        loss = fluid.layers.smooth_l1(xs, ys, inside_weight=ys * 0 + 1, outside_weight=ys * 0 + 1, sigma=3.0)
        total = fluid.layers.reduce_sum(loss)
    r = np.random.RandomState(7)
    feed = {"x": r.randn(6, 4).astype("float32"), "y": r.randn(6, 4).astype("float32"),
            "keep": np.array([1, -1, 1, 1, -1, 1], "float32")}
    exe = fluid.Executor(fluid.CPUPlace())
    ours = exe.run(main, feed=feed, fetch_list=[loss, total])
    kept = feed["keep"] > 0
    d = np.abs(feed["x"][kept] - feed["y"][kept])
    s2 = 9.0
    want = np.where(d < 1 / s2, 0.5 * s2 * d * d, d - 0.5 / s2).sum(1, keepdims=True)
    assert np.asarray(ours[0]).shape == (4, 1)
    np.testing.assert_allclose(ours[0], want, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ours[1]).reshape(-1), [want.sum()], rtol=1e-5)


# -- gradients of a target with unknown dims (the GANs' gradient penalty) ---------------------------
def test_gradients_of_a_batch_of_scores_seed_by_the_run_time_shape():
    """StarGAN/AttGAN/STGAN's gradient_penalty: ``fluid.gradients(pred, x)`` with pred [-1, 1]: the
    seed of ones takes pred's run-time shape (a shape op feeding fill_constant's ShapeTensor, as
    Paddle's calc_gradient); the gradient and the penalty against Paddle 2.6.2."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3], dtype="float32")
        pred = fluid.layers.fc(fluid.layers.tanh(fluid.layers.fc(x, 5)), 1)
        grad = fluid.gradients(pred, x)[0]
        norm = fluid.layers.sqrt(fluid.layers.reduce_sum(fluid.layers.square(grad), dim=1) + 1e-16)
        gp = fluid.layers.reduce_mean(fluid.layers.square(norm - 1.0))
    types = [op.type for op in main.global_block().ops]
    assert "shape" in types
    feed = {"x": np.random.RandomState(8).randn(4, 3).astype("float32")}
    ours, theirs = _run_both(main, startup, feed, [grad, gp])
    assert ours[0].shape == (4, 3)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[1].reshape(-1), np.asarray(theirs[1]).reshape(-1), rtol=1e-5)


# -- a Variable of the main program used in its clone (AttGAN/STGAN trainers) ----------------------
def test_variable_of_the_main_program_resolves_by_name_in_its_clone():
    """trainer/AttGAN.py builds ``label_trg_ = (label_trg * 2 - 1) * thres`` in the main program, then
    each trainer clones it and builds its network under ``program_guard(clone)`` using that Variable:
    the clone computes the same-named copy, so the name resolves (Fluid's ops hold names). A
    Variable the other program does not compute stays an error."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3], dtype="float32")
        shifted = (x * 2.0 - 1.0) * 0.5
        clone = main.clone()
        with fluid.program_guard(clone, startup):
            y = fluid.layers.elementwise_mul(fluid.layers.fill_constant([1], "float32", 3.0), shifted)
            out = fluid.layers.reduce_sum(y, dim=1)
    assert y.block.program is clone
    feed = {"x": np.random.RandomState(9).randn(2, 3).astype("float32")}
    ours, theirs = _run_both(clone, startup, feed, [out])
    np.testing.assert_allclose(ours[0], ((feed["x"] * 2 - 1) * 0.5 * 3).sum(1), rtol=1e-5)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(fluid.VariableNotFoundError if hasattr(fluid, "VariableNotFoundError") else Exception,
                           match="belongs to"):
            fluid.layers.scale(shifted, 2.0)


# -- DataLoader() is the loader (PaddleCV/video's model.dataloader()) --------------------------------
def test_calling_a_data_loader_returns_the_loader():
    """video/models/model.py: ``self.dataloader = DataLoader.from_generator(...)`` shadows the
    ``dataloader()`` method, so train.py's ``train_model.dataloader()`` calls the loader: Fluid 1.8's
    ``__call__`` returns the loader itself, which is then iterated or given its generator."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", shape=[None, 2], dtype="float32")
        total = fluid.layers.reduce_sum(x)
        loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=4, iterable=True)
    assert loader() is loader
    loader().set_sample_list_generator(lambda: iter([[(np.ones(2, "float32") * i,)] for i in range(3)]),
                                       places=fluid.CPUPlace())
    exe = fluid.Executor(fluid.CPUPlace())
    got = [float(np.asarray(exe.run(main, feed=d, fetch_list=[total])[0]).reshape(-1)[0]) for d in loader()]
    assert got == [0.0, 2.0, 4.0]
    first = next(loader())
    assert float(np.asarray(exe.run(main, feed=first, fetch_list=[total])[0]).reshape(-1)[0]) == 0.0


def test_shape_given_as_one_int_variable_is_one_dim():
    """AttGAN/STGAN's gradient penalty: ``uniform_random(shape=layers.shape(a)[0])`` — Fluid 1.x's
    ``shape(a)[0]`` was a [1] tensor, so the shape has one dim: the batch size, read at trace."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        a = fluid.layers.data("a", shape=[3, 2], dtype="float32")
        alpha = fluid.layers.uniform_random(shape=fluid.layers.shape(a)[0], min=0.0, max=1.0)
        ones = fluid.layers.fill_constant(shape=fluid.layers.shape(a)[0], dtype="float32", value=2.0)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    got, two = exe.run(main, feed={"a": np.zeros((5, 3, 2), "float32")}, fetch_list=[alpha, ones])
    assert got.shape == (5,) and np.all((got >= 0) & (got < 1)) and len(np.unique(got)) == 5
    np.testing.assert_array_equal(two, np.full(5, 2.0, "float32"))
