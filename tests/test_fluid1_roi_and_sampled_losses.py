"""Fluid 1.8's ROI pooling variants (psroi_pool, prroi_pool, deformable_roi_pooling,
roi_perspective_transform) and losses over many classes (nce, sampled_softmax_with_cross_entropy,
hsigmoid, center_loss).

Oracles: Paddle 2.6.2 running our serialized program (forward and backward) for the ops it still
has (psroi_pool, deformable_psroi_pooling, nce, hierarchical_sigmoid); NumPy written here from the
documented semantics for the others (prroi_pool, roi_perspective_transform, sample_logits,
center_loss), with finite differences for their gradients.
"""

from __future__ import annotations

import numpy as np
import pytest

import fluidjax as fluid
from fluidjax.frontend.layer_helper import LayerHelper
from fluidjax.ir.errors import ShapeError

import paddle_oracle  # noqa: E402  (imports paddle after jax)

L = fluid.layers


def _run(main, startup, feed, fetch, return_numpy=True):
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        out = exe.run(main, feed=feed, fetch_list=fetch, return_numpy=return_numpy)
        params = paddle_oracle.persistable_values(main, scope)
    return out, params


def _lod_feed(value, lengths):
    return fluid.create_lod_tensor(value, lengths, fluid.CPUPlace())


# -- psroi_pool -------------------------------------------------------------------------------------
def test_psroi_pool_with_lod_rois_matches_paddle_forward_and_grad():
    rng = np.random.default_rng(0)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [2, 12, 6, 7], "float32")
        x.stop_gradient = False
        rois = fluid.data("rois", [None, 4], "float32", lod_level=1)
        out = L.psroi_pool(x, rois, 3, 0.5, 2, 2)
        # mean (LoD-aware) over the ROI rows: a row-mixing reduce_sum refuses count-carrying rows
        loss = L.mean(L.elementwise_mul(out, fluid.data("w", [3, 3, 2, 2], "float32")))
        fluid.backward.append_backward(loss)
    xv = rng.standard_normal((2, 12, 6, 7)).astype("float32")
    wv = rng.standard_normal((3, 3, 2, 2)).astype("float32")
    rv = np.array([[0, 0, 8, 9], [2.4, 1.6, 11, 7], [1, 3, 5.5, 10]], "float32")
    (got, gx), params = _run(main, startup, {"x": xv, "w": wv, "rois": _lod_feed(rv, [[2, 1]])},
                             [out, "x@GRAD"])
    want, wgx = paddle_oracle.run(main.serialize(), {"x": xv, "w": wv, "rois": rv}, [out.name, "x@GRAD"],
                                  params, lods={"rois": [[2, 1]]})
    assert got.shape == (3, 3, 2, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gx, wgx, rtol=1e-5, atol=1e-6)
    assert np.abs(gx[1]).sum() > 0 and np.abs(gx[0]).sum() > 0      # both images reached


def test_psroi_pool_with_rois_num_matches_paddle():
    """Paddle 2.x's form of the op: plain ROIs and RoisNum (the ROI count of each image)."""
    rng = np.random.default_rng(11)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [2, 8, 5, 6], "float32")
        rois = fluid.data("rois", [4, 4], "float32")
        num = fluid.data("num", [2], "int32")
        helper = LayerHelper("psroi_pool")
        out = helper.create_tmp("float32")
        helper.append_op("psroi_pool", {"X": x, "ROIs": rois, "RoisNum": num}, {"Out": out},
                         {"output_channels": 2, "spatial_scale": 1.0, "pooled_height": 2, "pooled_width": 2})
    feed = {"x": rng.standard_normal((2, 8, 5, 6)).astype("float32"), "num": np.array([1, 3], "int32"),
            "rois": np.array([[0, 0, 3, 4], [1, 1, 5, 4], [2.6, 0.4, 4, 2], [0, 2, 1, 3]], "float32")}
    (got,), _ = _run(main, startup, feed, [out])
    want, = paddle_oracle.run(main.serialize(), feed, [out.name])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_psroi_pool_checks_channels_at_build_time():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data("x", [1, 10, 6, 6], "float32")
        rois = fluid.data("rois", [None, 4], "float32", lod_level=1)
        with pytest.raises(ShapeError, match="output_channels"):
            L.psroi_pool(x, rois, 3, 1.0, 2, 2)


# -- prroi_pool (NumPy: the exact integral of the bilinear interpolation) ---------------------------
def _bilinear(img, y, x):
    """The feature map interpolated at (y, x), zero outside its pixels."""
    h, w = img.shape
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    total = 0.0
    for yy in (y0, y0 + 1):
        for xx in (x0, x0 + 1):
            if 0 <= yy < h and 0 <= xx < w:
                total += img[yy, xx] * max(0.0, 1 - abs(y - yy)) * max(0.0, 1 - abs(x - xx))
    return total


def _prroi_reference(x, rois, image, scale, ph, pw):
    out = np.zeros((len(rois), x.shape[1], ph, pw))
    for r, (x1, y1, x2, y2) in enumerate(np.asarray(rois, np.float64) * scale):
        bw, bh = max(x2 - x1, 0) / pw, max(y2 - y1, 0) / ph
        for c in range(x.shape[1]):
            img = x[image[r], c].astype(np.float64)
            for i in range(ph):
                for j in range(pw):
                    ys, ye, xs, xe = y1 + i * bh, y1 + (i + 1) * bh, x1 + j * bw, x1 + (j + 1) * bw
                    if bw * bh <= 0:
                        continue
                    total = 0.0
                    # The interpolation is bilinear on each unit cell: its integral over a
                    # rectangle inside a cell is the area times its value at the centre.
                    for cy in range(int(np.floor(ys)), int(np.ceil(ye))):
                        for cx in range(int(np.floor(xs)), int(np.ceil(xe))):
                            a0, a1 = max(ys, cy), min(ye, cy + 1)
                            b0, b1 = max(xs, cx), min(xe, cx + 1)
                            if a1 > a0 and b1 > b0:
                                total += (a1 - a0) * (b1 - b0) * _bilinear(img, (a0 + a1) / 2, (b0 + b1) / 2)
                    out[r, c, i, j] = total / (bw * bh)
    return out


def _prroi_program(dtype, with_nums):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [2, 2, 5, 6], dtype)
        x.stop_gradient = False
        if with_nums:
            rois = fluid.data("rois", [3, 4], dtype)
            nums = fluid.data("nums", [2], "int64")
        else:
            rois = fluid.data("rois", [None, 4], dtype, lod_level=1)
            nums = None
        rois.stop_gradient = False
        out = L.prroi_pool(x, rois, 0.8, 2, 3, batch_roi_nums=nums)
        weight = fluid.data("g", [3, 2, 2, 3], dtype)
        loss = L.reduce_sum(L.elementwise_mul(out, weight))
        fluid.backward.append_backward(loss)
    return main, startup, out


_PR_X = np.random.default_rng(1).standard_normal((2, 2, 5, 6))
_PR_ROIS = np.array([[0.3, 0.2, 4.1, 3.3], [-1.0, 1.5, 6.7, 7.2], [2.2, 0.6, 2.9, 5.9]])
_PR_G = np.random.default_rng(2).standard_normal((3, 2, 2, 3))


def test_prroi_pool_matches_the_exact_integral_with_lod_and_with_batch_roi_nums():
    want = _prroi_reference(_PR_X, _PR_ROIS, [0, 0, 1], 0.8, 2, 3)
    for with_nums in (False, True):
        main, startup, out = _prroi_program("float32", with_nums)
        feed = {"x": _PR_X.astype("float32"), "g": _PR_G.astype("float32")}
        if with_nums:
            feed.update(rois=_PR_ROIS.astype("float32"), nums=np.array([2, 1], "int64"))
        else:
            feed["rois"] = _lod_feed(_PR_ROIS.astype("float32"), [[2, 1]])
        (got,), _ = _run(main, startup, feed, [out])
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_prroi_pool_gradients_of_input_and_rois_match_finite_differences():
    main, startup, out = _prroi_program("float64", True)
    base = {"x": _PR_X, "g": _PR_G, "rois": _PR_ROIS, "nums": np.array([2, 1], "int64")}
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    gx, gr = exe.run(main, feed=base, fetch_list=["x@GRAD", "rois@GRAD"])

    def loss(**change):
        feed = dict(base, **change)
        o, = exe.run(main, feed=feed, fetch_list=[out])
        return float((o * _PR_G).sum())

    eps = 1e-6
    for (n, c, i, j) in [(0, 1, 2, 3), (1, 0, 4, 5), (0, 0, 0, 0)]:
        xp, xm = _PR_X.copy(), _PR_X.copy()
        xp[n, c, i, j] += eps
        xm[n, c, i, j] -= eps
        np.testing.assert_allclose(gx[n, c, i, j], (loss(x=xp) - loss(x=xm)) / (2 * eps), rtol=1e-5, atol=1e-7)
    for (r, k) in [(0, 0), (0, 3), (1, 1), (2, 2)]:
        rp, rm = _PR_ROIS.copy(), _PR_ROIS.copy()
        rp[r, k] += eps
        rm[r, k] -= eps
        np.testing.assert_allclose(gr[r, k], (loss(rois=rp) - loss(rois=rm)) / (2 * eps), rtol=1e-5, atol=1e-7)


# -- deformable_roi_pooling -------------------------------------------------------------------------
@pytest.mark.parametrize("position_sensitive", [False, True])
def test_deformable_roi_pooling_matches_paddle_forward_and_grads(position_sensitive):
    rng = np.random.default_rng(3)
    ph = pw = 2
    channels = 8
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [2, channels, 7, 8], "float32")
        x.stop_gradient = False
        rois = fluid.data("rois", [None, 4], "float32", lod_level=1)
        trans = fluid.data("trans", [3, 2, 2, 2], "float32")
        trans.stop_gradient = False
        out = L.deformable_roi_pooling(x, rois, trans, spatial_scale=1.0,
                                       group_size=[2, 2] if position_sensitive else [1, 1],
                                       pooled_height=ph, pooled_width=pw, sample_per_part=3, trans_std=0.1,
                                       position_sensitive=position_sensitive)
        assert out.block.ops[-1].type == "deformable_psroi_pooling"   # Paddle's op behind the layer
        oc = channels // 4 if position_sensitive else channels
        loss = L.mean(L.elementwise_mul(out, fluid.data("g", [3, oc, ph, pw], "float32")))
        fluid.backward.append_backward(loss)
    feed = {"x": rng.standard_normal((2, channels, 7, 8)).astype("float32"),
            "trans": rng.uniform(-0.4, 0.4, (3, 2, 2, 2)).astype("float32"),
            "g": rng.standard_normal((3, oc, ph, pw)).astype("float32")}
    rv = np.array([[1, 1, 5, 4], [0.4, 2.2, 6.3, 5.6], [2, 0, 6, 3]], "float32")
    fetch = [out, "x@GRAD", "trans@GRAD"]
    got, params = _run(main, startup, dict(feed, rois=_lod_feed(rv, [[1, 2]])), fetch)
    want = paddle_oracle.run(main.serialize(), dict(feed, rois=rv), [out.name, "x@GRAD", "trans@GRAD"], params,
                             lods={"rois": [[1, 2]]})
    assert got[0].shape == (3, oc, ph, pw)
    for ours, theirs in zip(got, want):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
    assert np.abs(got[2]).sum() > 0


# -- roi_perspective_transform (NumPy) --------------------------------------------------------------
def _inside(px, py, qx, qy, tol=1e-4):
    """Point in a quadrilateral, boundary (within tol) included: a crossing count plus edge tests."""
    crossings = 0
    for k in range(4):
        xs, ys, xe, ye = qx[k], qy[k], qx[(k + 1) % 4], qy[(k + 1) % 4]
        if abs(ys - ye) < tol:
            if abs(py - ys) < tol and min(xs, xe) - tol <= px <= max(xs, xe) + tol:
                return True
            continue
        t = (py - ys) * (xe - xs) / (ye - ys) + xs
        if abs(t - px) < tol and min(ys, ye) - tol <= py <= max(ys, ye) + tol:
            return True
        if py <= min(ys, ye) + tol or py > max(ys, ye) + tol:
            continue
        if t - px > tol:
            crossings += 1
    return crossings % 2 == 1


def _perspective_reference(x, rois, image, th, tw, scale):
    n, c, h, w = x.shape
    out = np.zeros((len(rois), c, th, tw))
    mask = np.zeros((len(rois), 1, th, tw), np.int32)
    mats = np.zeros((len(rois), 9))
    for r, roi in enumerate(np.asarray(rois, np.float64) * scale):
        qx, qy = roi[0::2], roi[1::2]
        side = lambda a, b: np.hypot(qx[a] - qx[b], qy[a] - qy[b])  # noqa: E731
        est_w, est_h = (side(0, 1) + side(2, 3)) / 2, (side(1, 2) + side(3, 0)) / 2
        nh = max(2, th)
        nw = max(2, min(int(np.floor(est_w * (nh - 1) / est_h + 0.5)) + 1, tw))
        # The projective map sending (0,0), (nw-1,0), (nw-1,nh-1), (0,nh-1) to the corners.
        dx1, dx2, dx3 = qx[1] - qx[2], qx[3] - qx[2], qx[0] - qx[1] + qx[2] - qx[3]
        dy1, dy2, dy3 = qy[1] - qy[2], qy[3] - qy[2], qy[0] - qy[1] + qy[2] - qy[3]
        det = dx1 * dy2 - dx2 * dy1 + 1e-5
        g = (dx3 * dy2 - dx2 * dy3) / det / (nw - 1)
        hh = (dx1 * dy3 - dx3 * dy1) / det / (nh - 1)
        a = (qx[1] - qx[0]) / (nw - 1) + g * qx[1]
        b = (qx[3] - qx[0]) / (nh - 1) + hh * qx[3]
        d = (qy[1] - qy[0]) / (nw - 1) + g * qy[1]
        e = (qy[3] - qy[0]) / (nh - 1) + hh * qy[3]
        mats[r] = [a, b, qx[0], d, e, qy[0], g, hh, 1]
        for oh in range(th):
            for ow in range(tw):
                den = g * ow + hh * oh + 1
                sx, sy = (a * ow + b * oh + qx[0]) / den, (d * ow + e * oh + qy[0]) / den
                if not _inside(sx, sy, qx, qy):
                    continue
                if sx <= -0.5 + 1e-4 or sx >= w - 0.5 - 1e-4 or sy <= -0.5 + 1e-4 or sy >= h - 0.5 - 1e-4:
                    continue
                sx, sy = max(sx, 0.0), max(sy, 0.0)
                mask[r, 0, oh, ow] = 1
                for ch in range(c):
                    out[r, ch, oh, ow] = _bilinear_edge(x[image[r], ch], sy, sx)
    return out, mask, mats


def _bilinear_edge(img, y, x):
    h, w = img.shape
    y0, x0 = min(int(np.floor(y)), h - 1), min(int(np.floor(x)), w - 1)
    y, x = min(y, h - 1), min(x, w - 1)
    y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
    fy, fx = y - y0, x - x0
    return ((1 - fy) * (1 - fx) * img[y0, x0] + fy * (1 - fx) * img[y1, x0] + fy * fx * img[y1, x1]
            + (1 - fy) * fx * img[y0, x1])


def test_roi_perspective_transform_matches_numpy_and_its_gradient_is_the_sampling_weights():
    rng = np.random.default_rng(4)
    xv = rng.standard_normal((2, 2, 8, 9))
    rv = np.array([[1, 1, 7, 2, 8, 7, 0.5, 6], [2, 0.5, 6, 1.5, 5.5, 5, 1.5, 4.5],
                   [3, 2, 12, 3, 11, 9, 2, 10]], "float64")
    th, tw, scale = 4, 5, 0.8
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [2, 2, 8, 9], "float64")
        x.stop_gradient = False
        rois = fluid.data("rois", [None, 8], "float64", lod_level=1)
        out, mask, mat = L.roi_perspective_transform(x, rois, th, tw, scale)
        gw = fluid.data("g", [3, 2, th, tw], "float64")
        fluid.backward.append_backward(L.mean(L.elementwise_mul(out, gw)))
    gv = rng.standard_normal((3, 2, th, tw))
    op = [o for o in main.global_block().ops if o.type == "roi_perspective_transform"][0]
    got, _ = _run(main, startup, {"x": xv, "g": gv, "rois": _lod_feed(rv, [[2, 1]])},
                  [out, mask, mat, "x@GRAD", op.outputs["Out2InIdx"][0], op.outputs["Out2InWeights"][0]])
    want_out, want_mask, want_mat = _perspective_reference(xv, rv, [0, 0, 1], th, tw, scale)
    np.testing.assert_allclose(got[2], want_mat, rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(got[1], want_mask)
    assert 0 < want_mask.sum() < want_mask.size                      # inside and outside pixels both tested
    np.testing.assert_allclose(got[0], want_out, rtol=1e-9, atol=1e-12)
    # Out is linear in X: its gradient is the sampling weights scattered back, also what
    # Out2InIdx / Out2InWeights record.
    idx, wts = got[4], got[5]
    assert idx.shape == (3 * 2 * th * tw, 4)
    scattered = np.zeros(xv.size)
    np.add.at(scattered, idx[idx >= 0], (wts * gv.reshape(-1, 1) / gv.size)[idx >= 0])
    np.testing.assert_allclose(got[3].reshape(-1), scattered, rtol=1e-9, atol=1e-12)
    assert (idx[np.repeat(want_mask.reshape(3, 1, -1), 2, 1).reshape(-1) == 0] == -1).all()


# -- nce --------------------------------------------------------------------------------------------
def _nce_program(sampler="uniform", custom_dist=None, seed=0, neg=3, custom_neg=None):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [4, 5], "float32")
        x.stop_gradient = False
        label = fluid.data("label", [4, 2], "int64")
        sw = fluid.data("sw", [4, 1], "float32")
        cost = L.nce(x, label, 7, sample_weight=sw, num_neg_samples=neg, sampler=sampler,
                     custom_dist=custom_dist, seed=seed, param_attr=fluid.ParamAttr(
                         name="nce_w", initializer=fluid.initializer.Uniform(-0.8, 0.8)),
                     bias_attr=fluid.ParamAttr(name="nce_b", initializer=fluid.initializer.Uniform(-0.5, 0.5)))
        loss = L.mean(cost)
        fluid.backward.append_backward(loss)
    op = [o for o in main.global_block().ops if o.type == "nce"][0]
    if custom_neg is not None:
        for o in main.global_block().ops:
            if o.type in ("nce", "nce_grad"):
                o.set_attr("custom_neg_classes", list(custom_neg))
    return main, startup, cost, op


_NCE_FEED = {"x": np.random.default_rng(5).standard_normal((4, 5)).astype("float32"),
             "label": np.array([[0, 3], [1, 6], [2, 2], [5, 4]], "int64"),
             "sw": np.array([[1.0], [0.5], [2.0], [1.5]], "float32")}


@pytest.mark.parametrize("sampler", ["uniform", "log_uniform", "custom_dist"])
def test_nce_with_fixed_negative_classes_matches_paddle_forward_and_grads(sampler):
    dist = [0.05, 0.3, 0.1, 0.2, 0.05, 0.2, 0.1] if sampler == "custom_dist" else None
    main, startup, cost, op = _nce_program(sampler, dist, custom_neg=[1, 4, 6])
    fetch = [cost.name, op.outputs["SampleLogits"][0], op.outputs["SampleLabels"][0], "x@GRAD", "nce_w@GRAD",
             "nce_b@GRAD"]
    got, params = _run(main, startup, _NCE_FEED, fetch)
    want = paddle_oracle.run(main.serialize(), _NCE_FEED, fetch, params)
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_array_equal(got[2][:, 2:], [[1, 4, 6]] * 4)
    for ours, theirs in zip(got[:2] + got[3:], want[:2] + want[3:]):
        np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=1e-6)


def test_nce_draws_follow_the_seed_and_the_sampler():
    main, startup, cost, op = _nce_program(seed=11, neg=40)
    labels_name = op.outputs["SampleLabels"][0]
    a, _ = _run(main, startup, _NCE_FEED, [labels_name, cost])
    b, _ = _run(main, startup, _NCE_FEED, [labels_name, cost])
    np.testing.assert_array_equal(a[0], b[0])                      # a fixed seed: the same draws
    np.testing.assert_array_equal(a[0][:, :2], _NCE_FEED["label"])   # true classes first
    assert a[0].min() >= 0 and a[0].max() < 7 and len(np.unique(a[0][:, 2:])) > 3
    main2, startup2, _, op2 = _nce_program(seed=12, neg=40)
    other, _ = _run(main2, startup2, _NCE_FEED, [op2.outputs["SampleLabels"][0]])
    assert not np.array_equal(other[0], a[0])
    # The custom distribution's alias table reproduces it.
    dist = np.array([0.05, 0.4, 0.05, 0.3, 0.0, 0.1, 0.1])
    main, startup, _, op = _nce_program("custom_dist", dist, seed=3, neg=2000)
    draws, _ = _run(main, startup, _NCE_FEED, [op.outputs["SampleLabels"][0]])
    freq = np.bincount(draws[0][:, 2:].reshape(-1), minlength=7) / draws[0][:, 2:].size
    np.testing.assert_allclose(freq, dist, atol=0.02)
    assert freq[4] == 0


# -- sampled_softmax_with_cross_entropy -------------------------------------------------------------
def test_sampled_softmax_with_customized_samples_matches_numpy_and_its_gradient():
    rng = np.random.default_rng(6)
    logits = rng.standard_normal((3, 6))
    label = np.array([[2], [0], [5]], "int64")
    samples = np.array([[2, 1, 2, 4], [0, 3, 5, 1], [5, 5, 0, 2]], "int64")
    probs = rng.uniform(0.1, 0.9, (3, 4))
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        lg = fluid.data("logits", [3, 6], "float64")
        lg.stop_gradient = False
        lb = fluid.data("label", [3, 1], "int64")
        smp = fluid.data("samples", [3, 4], "int64")
        prb = fluid.data("probs", [3, 4], "float64")
        loss = L.sampled_softmax_with_cross_entropy(lg, lb, 3, use_customized_samples=True,
                                                    customized_samples=smp, customized_probabilities=prb)
        assert [o.type for o in main.global_block().ops][:2] == ["sample_logits", "softmax_with_cross_entropy"]
        fluid.backward.append_backward(L.reduce_sum(loss))
    feed = {"logits": logits, "label": label, "samples": samples, "probs": probs}
    (got, grad), _ = _run(main, startup, feed, [loss, "logits@GRAD"])

    def reference(lg):
        out = np.zeros((3, 1))
        for i in range(3):
            z = np.array([lg[i, s] for s in samples[i]]) - np.log(probs[i])
            for j in range(1, 4):                     # a drawn class equal to the true one: removed
                if samples[i, j] == samples[i, 0]:
                    z[j] -= 1e20
            m = z.max()
            out[i, 0] = -(z[0] - m - np.log(np.exp(z - m).sum()))
        return out

    np.testing.assert_allclose(got, reference(logits), rtol=1e-10)
    eps, fd = 1e-6, np.zeros_like(logits)
    for i in range(3):
        for k in range(6):
            p, m = logits.copy(), logits.copy()
            p[i, k] += eps
            m[i, k] -= eps
            fd[i, k] = (reference(p).sum() - reference(m).sum()) / (2 * eps)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-8)


def test_sample_logits_draws_distinct_log_uniform_classes_with_paddle_probabilities():
    k, s = 50, 20
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        lg = fluid.data("logits", [4, k], "float32")
        lb = fluid.data("label", [4, 1], "int64")
        loss = L.sampled_softmax_with_cross_entropy(lg, lb, s, seed=7)
    op = [o for o in main.global_block().ops if o.type == "sample_logits"][0]
    feed = {"logits": np.random.default_rng(8).standard_normal((4, k)).astype("float32"),
            "label": np.array([[3], [0], [49], [7]], "int64")}
    fetch = [op.outputs["Samples"][0], op.outputs["Probabilities"][0], op.outputs["SampledLogits"][0], loss]
    (smp, prob, sl, ls), _ = _run(main, startup, feed, fetch)
    again, _ = _run(main, startup, feed, fetch)
    np.testing.assert_array_equal(smp, again[0])                 # a fixed seed: the same draws
    assert smp.shape == (4, s + 1) and (smp[:, 0] == feed["label"][:, 0]).all()
    drawn = smp[:, 1:]
    assert (drawn == drawn[0]).all() and len(np.unique(drawn[0])) == s     # shared, distinct
    p = np.log((smp + 2.0) / (smp + 1.0)) / np.log(k + 1.0)
    # 1 - (1 - p)^tries for one tries count >= s shared by every entry (s·p if there were no repeats).
    tries = np.log1p(-prob[0, 1]) / np.log1p(-p[0, 1]) if not np.allclose(prob, p * s) else s
    assert tries >= s - 1e-3
    np.testing.assert_allclose(prob, -np.expm1(np.round(tries) * np.log1p(-p)) if tries != s else p * s, rtol=1e-4)
    hit = drawn == smp[:, :1]
    expect = np.take_along_axis(feed["logits"], smp, 1) - np.log(prob)
    expect[:, 1:] -= np.where(hit, 1e20, 0)
    np.testing.assert_allclose(sl, expect, rtol=1e-5, atol=1e-5)
    assert np.isfinite(ls).all() and ls.shape == (4, 1)


# -- hsigmoid ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("custom", [False, True])
def test_hsigmoid_matches_paddle_forward_and_grads(custom):
    rng = np.random.default_rng(9)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [5, 4], "float32")
        x.stop_gradient = False
        label = fluid.data("label", [5, 1], "int64")
        kw = {}
        if custom:
            kw = dict(path_table=fluid.data("table", [5, 3], "int64"), path_code=fluid.data("code", [5, 3], "int64"),
                      is_custom=True)
        out = L.hsigmoid(x, label, 6, param_attr=fluid.ParamAttr(name="hs_w", initializer=fluid.initializer.Uniform(-1, 1)),
                         bias_attr=fluid.ParamAttr(name="hs_b", initializer=fluid.initializer.Uniform(-1, 1)), **kw)
        assert out.block.ops[-1].type == "hierarchical_sigmoid"
        fluid.backward.append_backward(L.mean(out))
    feed = {"x": rng.standard_normal((5, 4)).astype("float32"), "label": np.array([[0], [5], [3], [2], [4]], "int64")}
    if custom:
        feed["table"] = np.array([[0, 2, -1], [1, 4, 5], [3, -1, -1], [0, 1, 2], [5, 3, -1]], "int64")
        feed["code"] = np.array([[1, 0, 0], [0, 1, 1], [1, 0, 0], [0, 0, 1], [1, 1, 0]], "int64")
    fetch = [out.name, "x@GRAD", "hs_w@GRAD", "hs_b@GRAD"]
    got, params = _run(main, startup, feed, fetch)
    want = paddle_oracle.run(main.serialize(), feed, fetch, params)
    for ours, theirs in zip(got, want):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    assert np.abs(got[2]).sum() > 0


# -- center_loss (NumPy) ----------------------------------------------------------------------------
def test_center_loss_moves_the_centres_and_its_gradient_uses_the_batch_diff():
    rng = np.random.default_rng(10)
    xv = rng.standard_normal((5, 3))
    lv = np.array([[0], [2], [0], [1], [0]], "int64")
    c0 = rng.standard_normal((4, 3))
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [5, 3], "float64")
        x.stop_gradient = False
        label = fluid.data("label", [5, 1], "int64")
        loss = L.center_loss(x, label, 4, 0.25, fluid.ParamAttr(
            name="centers", initializer=fluid.initializer.NumpyArrayInitializer(c0)))
        frozen = L.center_loss(x, label, 4, 0.5, fluid.ParamAttr(
            name="frozen", initializer=fluid.initializer.NumpyArrayInitializer(c0)), update_center=False)
        fluid.backward.append_backward(L.reduce_sum(loss))
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        centers = c0.copy()
        for _ in range(2):
            got, gx, fz = exe.run(main, feed={"x": xv, "label": lv}, fetch_list=[loss, "x@GRAD", frozen])
            diff = xv - centers[lv[:, 0]]
            np.testing.assert_allclose(got, 0.5 * (diff ** 2).sum(1, keepdims=True), rtol=1e-12)
            np.testing.assert_allclose(gx, diff, rtol=1e-12)
            np.testing.assert_allclose(fz, 0.5 * ((xv - c0[lv[:, 0]]) ** 2).sum(1, keepdims=True), rtol=1e-12)
            for k in range(4):
                rows = lv[:, 0] == k
                centers[k] = centers[k] + 0.25 * diff[rows].sum(0) / (1 + rows.sum())
            np.testing.assert_allclose(np.asarray(scope.find_var("centers").get_tensor()), centers, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(scope.find_var("frozen").get_tensor()), c0)
    assert not np.allclose(centers, c0)
