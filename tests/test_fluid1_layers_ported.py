"""Fluid 1.8 layers that were refused while their ops existed (``frontend/vision_layers.py``,
``detection_layers.py``, ``creation_layers.py``): each program is built the way a Fluid 1.x script
builds it, then run in fluidjax and, serialized, in Paddle 2.6.2 with the same parameters."""

from __future__ import annotations

import jax  # noqa: F401  (before paddle)
import numpy as np
import pytest

import fluidjax as fluid
import paddle_oracle as po

L = fluid.layers
RNG = np.random.default_rng(20)


def _params(scope, program):
    return {v.name: np.asarray(scope.find_var(v.name).get_tensor()).copy()
            for v in program.list_vars() if v.persistable and scope.find_var(v.name) is not None}


def _build(build):
    """``build()`` (returns the fetch list) in fresh programs, the startup run: (main, exe, scope, fetch)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup):
        fetch = build()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return main, exe, scope, fetch


def _run_both(build, feed, lods=None):
    """Build with ``build()`` (returns the fetch list) in fresh programs; run in fluidjax and in
    Paddle with the same parameters: (ours, theirs)."""
    main, exe, scope, fetch = _build(build)
    names = [f.name for f in fetch]
    ours = exe.run(main, feed=feed, fetch_list=names, scope=scope)
    theirs = po.run(main.serialize(), feed, names, _params(scope, main), lods=lods)
    return ours, theirs


def _close(ours, theirs, rtol=1e-5, atol=1e-5):
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape == (1,) and b.shape == ():
            b = b.reshape(1)       # a Fluid 1.x layer's [1] result; Paddle 2.6 runs the bytes 0-d
        assert a.shape == b.shape, f"output {i}: {a.shape} vs Paddle's {b.shape}"
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {i}")


VOL = RNG.uniform(-1, 1, (2, 3, 4, 6, 6)).astype("float32")
IMG = RNG.uniform(-1, 1, (2, 3, 8, 8)).astype("float32")


def test_volumetric_layers_match_paddle():
    def build():
        v = fluid.data("v", [-1, 3, 4, 6, 6], "float32")
        return [L.conv3d(v, 4, 3, padding=1, act="relu"),
                L.conv3d(v, 2, [1, 3, 3], stride=[1, 2, 2], padding="SAME", groups=1, bias_attr=False),
                L.conv3d_transpose(v, 2, filter_size=2, stride=2),
                L.conv3d_transpose(v, 3, output_size=[8, 12, 12], stride=2, act="tanh"),
                L.pool3d(v, 2, "avg", 2), L.pool3d(v, 3, "max", 1, pool_padding=1),
                L.pool3d(v, global_pooling=True, pool_type="avg"), L.adaptive_pool3d(v, [2, 3, 3], "avg"),
                L.resize_trilinear(v, out_shape=[6, 8, 8]), L.resize_trilinear(v, [5, 9, 9], align_corners=False),
                L.image_resize(v, scale=2, resample="TRILINEAR")]

    _close(*_run_both(build, {"v": VOL}), rtol=1e-4, atol=1e-5)


def test_adaptive_max_pool3d_matches_numpy():
    # Paddle 2.6.2's CPU pool3d kernel with adaptive=True and max pooling gives wrong bins (an
    # earlier bin's maximum repeated), so this one is checked against NumPy's bins.
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        out = L.adaptive_pool3d(fluid.data("v", [-1, 3, 4, 6, 6], "float32"), [1, 2, 2], "max")
    (got,) = fluid.Executor(fluid.CPUPlace()).run(main, feed={"v": VOL}, fetch_list=[out])
    np.testing.assert_array_equal(got, VOL.reshape(2, 3, 1, 4, 2, 3, 2, 3).max(axis=(3, 5, 7)))


def test_image_sampling_layers_match_paddle():
    rois = np.array([[0, 0, 4, 4], [1, 1, 6, 6], [2, 2, 7, 7]], "float32")

    def build():
        img = fluid.data("img", [-1, 3, 8, 8], "float32")
        r = fluid.data("rois", [-1, 4], "float32")
        rl = fluid.data("rois_lod", [3], "int64")
        theta = fluid.data("theta", [-1, 2, 3], "float32")
        off = fluid.data("off", [-1, 18, 8, 8], "float32")
        mask = fluid.data("mask", [-1, 9, 8, 8], "float32")
        grid = L.affine_grid(theta, [2, 3, 5, 5])
        return [L.image_resize(img, [4, 6]), L.interpolate(img, [16, 16], resample="NEAREST"),
                L.image_resize(img, scale=1.5, align_corners=False, align_mode=0),
                L.roi_align(img, r, 2, 2, 0.5, 2, rois_lod=rl), L.roi_align(img, r, 3, 3, rois_lod=rl),
                L.roi_pool(img, r, 2, 2, rois_lod=rl), grid, L.grid_sampler(img, grid),
                L.deformable_conv(img, off, mask, 4, 3, padding=1),
                L.deformable_conv(img, off, None, 4, 3, padding=1, modulated=False, bias_attr=False)]

    feed = {"img": IMG, "rois": rois, "rois_lod": np.array([0, 2, 3], "int64"),
            "theta": RNG.uniform(-1, 1, (2, 2, 3)).astype("float32"),
            "off": RNG.uniform(-0.5, 0.5, (2, 18, 8, 8)).astype("float32"),
            "mask": RNG.uniform(0, 1, (2, 9, 8, 8)).astype("float32")}
    _close(*_run_both(build, feed), rtol=1e-4, atol=1e-5)


def test_detection_layers_match_paddle():
    n, m, classes = 1, 6, 3
    corners = RNG.uniform(0, 0.5, (n, m, 2))
    boxes = np.concatenate([corners, corners + RNG.uniform(0.1, 0.5, (n, m, 2))], -1).astype("float32")
    scores = RNG.uniform(0, 1, (n, classes, m)).astype("float32")
    fpn = np.array([[0, 0, 30, 30], [0, 0, 200, 200], [10, 10, 500, 400], [5, 5, 60, 90]], "float32")

    def build():
        feat = fluid.data("feat", [-1, 3, 4, 4], "float32")
        image = fluid.data("image", [-1, 3, 32, 32], "float32")
        b = fluid.data("boxes", [-1, m, 4], "float32")
        s = fluid.data("scores", [-1, classes, m], "float32")
        head = fluid.data("head", [-1, 2 * (5 + classes), 4, 4], "float32")
        size = fluid.data("size", [-1, 2], "int32")
        rois = fluid.data("fpn", [-1, 4], "float32")
        pb, pv = L.prior_box(feat, image, [8.0, 16.0], [12.0, 24.0], [1.0, 2.0], flip=True, clip=True)
        pb2, _ = L.prior_box(feat, image, 8.0, steps=[8.0, 8.0], min_max_aspect_ratios_order=True)
        priors = L.reshape(pb, [-1, 4])
        encoded = L.box_coder(priors, L.reshape(pv, [-1, 4]), L.reshape(b, [-1, 4]))
        decoded = L.box_coder(priors, [0.1, 0.1, 0.2, 0.2], encoded, "decode_center_size")
        per_row = L.box_coder(priors, None, L.transpose(encoded, [1, 0, 2]), "decode_center_size", axis=1)
        yb, ys = L.yolo_box(head, size, [10, 13, 16, 30], classes, 0.01, 8)
        nms, idx = L.matrix_nms(b, s, 0.1, 0.2, 4, 5, return_index=True)
        levels, restore = L.distribute_fpn_proposals(rois, 2, 4, 3, 224)
        return [pb, pv, pb2, encoded, decoded, per_row, yb, ys, nms, idx, *levels, restore]

    feed = {"feat": IMG[:1, :, :4, :4], "image": np.zeros((1, 3, 32, 32), "float32"), "boxes": boxes,
            "scores": scores, "head": RNG.uniform(-2, 2, (1, 16, 4, 4)).astype("float32"),
            "size": np.array([[32, 40]], "int32"), "fpn": fpn}
    _close(*_run_both(build, feed, lods={"fpn": [[4]]}), rtol=1e-4, atol=1e-5)


def test_creation_layers_match_paddle():
    def build():
        x = fluid.data("x", [3, 4], "float32")
        arr = L.create_array("float32")
        L.array_write(x, L.fill_constant([1], "int64", 0), arr)
        L.array_write(L.scale(x, 2.0), L.fill_constant([1], "int64", 1), arr)
        cat, sizes = L.tensor_array_to_tensor(arr, axis=1)
        stacked, _ = L.tensor_array_to_tensor(arr, axis=0, use_stack=True)
        rows, cols = L.nonzero(L.greater_than(x, L.full([1], 0.2)), as_tuple=True)
        p = L.create_parameter([3, 4], "float32", default_initializer=fluid.initializer.Uniform(-1, 1))
        return [L.linspace(0, 1, 5, "float32"), L.linspace(-3, 9, 4, "int32"), L.linspace(2.0, 1.0, 1, "float64"),
                L.full([2, 3], 1.5), L.full([2], 7, dtype="int64"), L.eye(3), L.eye(2, 4, [2, 3], "int32"),
                cat, stacked, L.nonzero(L.greater_than(x, L.full([1], 0.2))), rows, cols, L.elementwise_add(p, x)]

    _close(*_run_both(build, {"x": RNG.uniform(-1, 1, (3, 4)).astype("float32")}))


def test_tensor_array_to_tensor_sizes():
    # Paddle 2.6.2 fetches OutIndex empty; Fluid documents it as each element's size along axis.
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [3, 4], "float32")
        arr = L.create_array("float32")
        L.array_write(x, L.fill_constant([1], "int64", 0), arr)
        L.array_write(L.scale(x, 3.0), L.fill_constant([1], "int64", 1), arr)
        cat, sizes = L.tensor_array_to_tensor(arr)
    xs = RNG.uniform(-1, 1, (3, 4)).astype("float32")
    got, got_sizes = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": xs}, fetch_list=[cat, sizes])
    np.testing.assert_allclose(got, np.concatenate([xs, 3 * xs], 1), rtol=1e-6)
    np.testing.assert_array_equal(got_sizes, [4, 4])


def test_randn_create_tensor_and_refusals_of_the_rest():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 5
    with fluid.program_guard(main, startup):
        r = L.randn([2000, 3], dtype="float64")
        t = L.create_tensor("float32", name="holder")
        L.assign(L.fill_constant([2], "float32", 4.0), t)
    assert r.stop_gradient and r.dtype == "float64" and t.name == "holder"
    exe = fluid.Executor(fluid.CPUPlace())
    values, held = exe.run(main, fetch_list=[r, t])
    assert values.shape == (2000, 3) and abs(values.mean()) < 0.1 and abs(values.std() - 1) < 0.1
    np.testing.assert_array_equal(held, [4.0, 4.0])
    with pytest.raises(ValueError, match="give filter_size or output_size"):
        with fluid.program_guard(fluid.Program(), fluid.Program()):
            L.conv3d_transpose(fluid.data("v", [-1, 3, 4, 6, 6], "float32"), 2)


# -- losses (frontend/loss_layers.py) ---------------------------------------------------------------------
def test_losses_match_paddle():
    n, c = 6, 4

    def build():
        x = fluid.data("x", [n, c], "float32")
        y = fluid.data("y", [n, c], "float32")
        p = fluid.data("p", [n, 1], "float32")
        lab = fluid.data("lab", [n, 1], "int64")
        binary = fluid.data("binary", [n, 1], "float32")
        probs = L.softmax(x)
        return [L.mse_loss(x, y), L.kldiv_loss(L.log(probs), L.softmax(y)),
                L.kldiv_loss(L.log(probs), L.softmax(y), "batchmean"), L.kldiv_loss(x, L.softmax(y), "none"),
                L.log_loss(L.sigmoid(p), binary), L.rank_loss(binary, p, L.scale(p, 0.5, 0.1)),
                L.bpr_loss(x, lab), L.teacher_student_sigmoid_loss(p, L.scale(binary, 2.0, -1.0)),
                L.npair_loss(x, y, lab), L.dice_loss(probs, lab)]

    feed = {"x": RNG.uniform(-1, 1, (n, c)).astype("float32"), "y": RNG.uniform(-1, 1, (n, c)).astype("float32"),
            "p": RNG.uniform(-2, 2, (n, 1)).astype("float32"), "lab": np.array([[0], [1], [3], [1], [2], [0]]),
            "binary": np.array([[1], [0], [1], [1], [0], [0]], "float32")}
    ours, theirs = _run_both(build, feed)
    _close(ours, theirs, rtol=1e-5, atol=1e-6)
    x, y = feed["x"].astype(np.float64), feed["y"].astype(np.float64)
    np.testing.assert_allclose(ours[0], ((x - y) ** 2).mean(), rtol=1e-6)
    onehot = np.eye(c)[feed["lab"][:, 0]]
    probs = np.exp(x) / np.exp(x).sum(1, keepdims=True)
    dice = 1 - 2 * (probs * onehot).sum(1) / (probs.sum(1) + onehot.sum(1) + 1e-5)
    np.testing.assert_allclose(ours[-1], dice.mean(), rtol=1e-5)


def test_losses_paddle_dropped_match_numpy():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        a = fluid.data("a", [5, 3], "float32")
        b = fluid.data("b", [5, 3], "float32")
        w = fluid.data("w", [5, 3], "float32")
        lab = fluid.data("lab", [5, 1], "float32")
        cls = fluid.data("cls", [5, 1], "int32")
        fg = fluid.data("fg", [1], "int32")
        left, right = L.slice(a, [1], [0], [1]), L.slice(b, [1], [0], [1])
        outs = [L.smooth_l1(a, b), L.smooth_l1(a, b, w, w, sigma=2.0), L.margin_rank_loss(lab, left, right, 0.2),
                L.sigmoid_focal_loss(a, cls, fg, gamma=2.0, alpha=0.25)]
    feed = {"a": RNG.uniform(-2, 2, (5, 3)).astype("float32"), "b": RNG.uniform(-1, 1, (5, 3)).astype("float32"),
            "w": RNG.uniform(0.5, 2, (5, 3)).astype("float32"), "lab": np.array([[1], [-1], [1], [1], [-1]], "float32"),
            "cls": np.array([[1], [0], [3], [-1], [2]], "int32"), "fg": np.array([2], "int32")}
    got = fluid.Executor(fluid.CPUPlace()).run(main, feed=feed, fetch_list=outs)
    a, b, w = (feed[k].astype(np.float64) for k in "abw")

    def smooth(d, sigma):
        s2 = sigma ** 2
        return np.where(np.abs(d) < 1 / s2, 0.5 * s2 * d * d, np.abs(d) - 0.5 / s2)

    np.testing.assert_allclose(got[0], smooth(a - b, 1.0).sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(got[1], (w * smooth(w * (a - b), 2.0)).sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(got[2], np.maximum(0, -feed["lab"] * (a[:, :1] - b[:, :1]) + 0.2), rtol=1e-5)
    p = 1 / (1 + np.exp(-a))
    k = np.arange(1, 4)[None, :]
    pos, neg = (feed["cls"] == k).astype(float), ((feed["cls"] != k) & (feed["cls"] != -1)).astype(float)
    focal = (-pos * 0.25 * (1 - p) ** 2 * np.log(p) - neg * 0.75 * p ** 2 * np.log(1 - p)) / 2
    np.testing.assert_allclose(got[3], focal, rtol=1e-5, atol=1e-7)


# -- tensor layers over new ops (frontend/tensor_math_layers.py) --------------------------------------------
def test_tensor_layers_match_paddle_and_numpy():
    def build():
        a = fluid.data("a", [4, 3], "float32")
        b = fluid.data("b", [4, 3], "float32")
        m = fluid.data("m", [3, 5], "float32")
        idx = fluid.data("idx", [3, 1], "int64")
        sel = fluid.data("sel", [4, 1], "int32")
        ids = fluid.data("ids", [4, 1], "int64")
        frames = fluid.data("frames", [6, 8, 2, 2], "float32")
        return [L.cross(a, b), L.trace(L.matmul(a, a, transpose_y=True)), L.addmm(L.ones([1, 5], "float32"), a, m, 0.5),
                L.diag_embed(a, 1), L.scatter_nd_add(a, idx, L.slice(b, [0], [0], [3])), L.scatter_nd(idx, m, [5, 5]),
                L.multiplex([a, b], sel), L.shard_index(ids, 20, 2, 1), L.temporal_shift(frames, 3)]

    a, b = (RNG.uniform(-1, 1, (4, 3)).astype("float32") for _ in range(2))
    m = RNG.uniform(-1, 1, (3, 5)).astype("float32")
    feed = {"a": a, "b": b, "m": m, "idx": np.array([[2], [0], [2]]), "sel": np.array([[1], [0], [0], [1]], "int32"),
            "ids": np.array([[3], [12], [19], [9]]), "frames": RNG.uniform(-1, 1, (6, 8, 2, 2)).astype("float32")}
    ours, theirs = _run_both(build, feed)
    _close(ours, theirs)
    np.testing.assert_allclose(ours[0], np.cross(a, b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[1], np.trace(a @ a.T), rtol=1e-5)
    np.testing.assert_allclose(ours[2], 1 + 0.5 * a @ m, rtol=1e-5)
    expected = a.copy()
    np.add.at(expected, [2, 0, 2], b[:3])
    np.testing.assert_allclose(ours[4], expected, rtol=1e-6)
    np.testing.assert_array_equal(ours[6], np.where(feed["sel"] == 1, b, a))
    np.testing.assert_array_equal(ours[7][:, 0], [-1, 2, 9, -1])
