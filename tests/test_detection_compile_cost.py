"""What made the R-CNN corpus scripts (PaddleCV rcnn/train.py, Faster and Mask R-CNN) slow a step,
and the lowerings that fixed it, checked against Paddle 2.6.2 running the same program bytes or
against JAX's own autodiff (docs/fluid1.md, "Corpus")."""

from __future__ import annotations

import jax  # noqa: F401  (before paddle)
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import fluidjax as fluid
import paddle_oracle as po
from fluidjax.lowering.ops import conv as conv_ops


def _programs():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 11
    return main, startup


_run_both = po.run_programs_both


# -- conv2d_transpose's filter gradient (Mask R-CNN's mask upsampling) ----------------------------
@pytest.mark.parametrize("kwargs,fmt", [
    (dict(filter_size=2, stride=2), "NCHW"),                          # rcnn's SuffixNet upsampling
    (dict(filter_size=4, stride=2, padding=1), "NCHW"),
    (dict(filter_size=3, stride=2, padding=[1, 0]), "NCHW"),
    (dict(filter_size=3, stride=2, output_size=[12, 14]), "NCHW"),   # output_size past the natural size
    (dict(filter_size=3, stride=1, padding=2, dilation=2), "NCHW"),
    (dict(filter_size=2, stride=3, groups=2), "NCHW"),               # stride above the kernel: gaps
    (dict(filter_size=3, stride=2, padding=1), "NHWC"),
])
def test_conv2d_transpose_gradients_equal_paddles(kwargs, fmt):
    """conv2d_transpose's output, input gradient and filter gradient (now computed tap by tap on
    strided slices of the output gradient) against Paddle 2.6.2 on the same program bytes."""
    main, startup = _programs()
    shape = [4, 5, 6] if fmt == "NCHW" else [5, 6, 4]
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=shape, dtype="float32")
        x.stop_gradient = False
        y = fluid.layers.conv2d_transpose(x, num_filters=6, bias_attr=False, data_format=fmt, **kwargs)
        loss = fluid.layers.reduce_sum(y * y * 0.5 + y)
        w = main.global_block().all_parameters()[0]
        gx, gw = fluid.backward.gradients([loss], [x, w])
    feed = {"x": np.random.RandomState(5).randn(2, *shape).astype("float32")}
    ours, theirs = _run_both(main, startup, feed, [y, gx, gw])
    assert ours[2].shape == tuple(w.shape)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4)


def _reference_transposed(x, w, strides, pads, dil, out, groups):
    """conv2d_transpose by plain autodiff of XLA's lhs-dilated convolution (the old lowering)."""
    c_in, c_out_g, kh, kw = w.shape
    kernel = w.reshape(groups, c_in // groups, c_out_g, kh, kw).transpose(0, 2, 1, 3, 4)
    kernel = kernel.reshape(groups * c_out_g, c_in // groups, kh, kw)[:, :, ::-1, ::-1]
    padding = []
    for size, k, s, d, p, o in zip(x.shape[2:], (kh, kw), strides, dil, pads, out):
        lo = d * (k - 1) - p[0]
        padding.append((lo, o - 1 - (size - 1) * s - lo + d * (k - 1)))
    return lax.conv_general_dilated(x, kernel, (1, 1), padding, lhs_dilation=strides, rhs_dilation=dil,
                                    dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=groups)


def test_transposed_filter_gradient_is_products_not_a_dilated_window():
    """The mask head's shape (2x2, stride 2; here fewer channels): the filter gradient equals
    autodiff of the old lowering, and the compiled gradient holds no convolution with a
    stride-dilated window (XLA CPU's generic loop path, ~25 s a Mask R-CNN step on 2 cores)."""
    r = np.random.RandomState(0)
    x = jnp.asarray(r.randn(8, 64, 7, 7).astype("float32"))
    w = jnp.asarray(r.randn(64, 16, 2, 2).astype("float32"))
    geometry = ([2, 2], [(0, 0), (0, 0)], [1, 1], [14, 14])

    def loss(fn):
        return lambda x_, w_: jnp.sum(jnp.sin(fn(x_, w_, *geometry, 1)))

    ours = jax.jit(jax.grad(loss(lambda *a: conv_ops._transposed_conv(*a[:6], False, a[6])), (0, 1)))
    want = jax.grad(loss(_reference_transposed), (0, 1))(x, w)
    got = ours(x, w)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-3)
    hlo = ours.lower(x, w).compile().as_text()
    convs = [line for line in hlo.splitlines() if " convolution(" in line]
    assert convs, "the forward and input gradient stay convolutions"
    assert not any("rhs_dilate" in line for line in convs), convs
    old = jax.jit(jax.grad(loss(_reference_transposed), 1)).lower(x, w).compile().as_text()
    assert any(" convolution(" in line and "rhs_dilate" in line for line in old.splitlines())


# -- per-sample ops over ROIs (the R-CNN box and mask heads) ----------------------------------------
def test_resnet_head_over_roi_align_rows_equals_paddles():
    """rcnn's heads (one image a batch): roi_align over LoD ROIs, then conv2d, affine_channel,
    pool2d and conv2d_transpose, which compute each ROI from itself (their count role is "rows":
    the ROIs' real count is carried, the padding rows never reach a result); outputs, the loss and
    the filter gradients against Paddle 2.6.2 on the same program bytes and LoD feed."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[4, 12, 12], dtype="float32")
        rois = fluid.layers.data("rois", shape=[4], dtype="float32", lod_level=1)
        r = fluid.layers.roi_align(x, rois, pooled_height=4, pooled_width=4, spatial_scale=1.0, sampling_ratio=2)
        c = fluid.layers.conv2d(r, num_filters=6, filter_size=3, padding=1, bias_attr=False)
        scale = fluid.layers.create_parameter([6], "float32", default_initializer=fluid.initializer.Constant(1.5))
        bias = fluid.layers.create_parameter([6], "float32", default_initializer=fluid.initializer.Constant(0.1))
        a = fluid.layers.relu(fluid.layers.affine_channel(c, scale=scale, bias=bias))
        p = fluid.layers.pool2d(a, pool_size=2, pool_stride=2, pool_type="avg")
        t = fluid.layers.conv2d_transpose(p, num_filters=3, filter_size=2, stride=2, bias_attr=False)
        loss = fluid.layers.reduce_sum(t * t)
        filters = [v for v in main.global_block().all_parameters() if len(v.shape) == 4]
        grads = fluid.backward.gradients([loss], filters)
    r_ = np.random.RandomState(7)
    corners = r_.uniform(0, 6, (5, 2))
    boxes = np.concatenate([corners, corners + r_.uniform(2, 5, (5, 2))], 1).astype("float32")
    feed = {"x": r_.randn(1, 4, 12, 12).astype("float32"), "rois": boxes}
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    params = {v.name: np.asarray(scope.find_var(v.name).get_tensor()).copy()
              for v in main.list_vars() if v.persistable and scope.find_var(v.name) is not None}
    names = [v.name for v in [t, loss] + grads]
    ours = exe.run(main, feed={"x": feed["x"], "rois": fluid.create_lod_tensor(boxes, [[5]], fluid.CPUPlace())},
                   fetch_list=names, scope=scope)
    theirs = po.run(main.serialize(), feed, names, params, lods={"rois": [[5]]})
    assert np.asarray(ours[0]).shape == (5, 3, 4, 4)
    for a_, b_ in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(a_).reshape(np.shape(b_)), b_, rtol=2e-4, atol=2e-4)
