"""Fluid 1.8 layers that were refused until their ops were written (issue 20): bilinear_tensor_product,
spectral_norm, fsp_matrix, iou_similarity, add_position_encoding, sequence_scatter, similarity_focus,
image_resize_short and the random layers, built the way a Fluid 1.x script builds them and run in fluidjax
and, serialized, in Paddle 2.6.2 with the same parameters; the layers over ops Paddle 2.6 no longer has
(space_to_depth, pad_constant_like, random_crop, gaussian_random_batch_size_like) against NumPy."""

from __future__ import annotations

import jax  # noqa: F401  (before paddle)
import numpy as np

import fluidjax as fluid
import paddle_oracle as po
from test_fluid1_layers_ported import _build, _close, _params

L = fluid.layers
RNG = np.random.default_rng(21)


def _run_both(build, feed, lods=None, paddle_feed=None):
    main, exe, scope, fetch = _build(build)
    names = [f.name for f in fetch]
    ours = exe.run(main, feed=feed, fetch_list=names, scope=scope)
    theirs = po.run(main.serialize(), paddle_feed or feed, names, _params(scope, main), lods=lods)
    return ours, theirs, _params(scope, main)


def test_feature_layers_match_paddle():
    x, y = RNG.uniform(-1, 1, (4, 3)).astype("float32"), RNG.uniform(-1, 1, (4, 5)).astype("float32")
    img = RNG.uniform(-1, 1, (2, 3, 6, 10)).astype("float32")
    w = RNG.uniform(-1, 1, (6, 4, 3)).astype("float32")

    def build():
        a, b = fluid.data("x", [-1, 3], "float32"), fluid.data("y", [-1, 5], "float32")
        im = fluid.data("img", [-1, 3, 6, 10], "float32")
        weight = fluid.data("w", [6, 4, 3], "float32")
        return [L.bilinear_tensor_product(a, b, 4, act="tanh"),
                L.bilinear_tensor_product(a, b, 2, bias_attr=False),
                L.spectral_norm(weight, dim=1, power_iters=3),
                L.fsp_matrix(im, L.scale(im, 2.0)),
                L.similarity_focus(im, axis=1, indexes=[0, 2]),
                L.image_resize_short(im, 4), L.image_resize_short(im, 9, resample="NEAREST")]

    ours, theirs, params = _run_both(build, {"x": x, "y": y, "img": img, "w": w})
    _close(ours, theirs, rtol=1e-4)
    assert ours[5].shape == (2, 3, 4, 7) and ours[6].shape == (2, 3, 9, 15)   # 10 * 4 / 6 = 6.67 -> 7
    mat = np.moveaxis(w, 1, 0).reshape(4, -1)
    np.testing.assert_allclose(ours[2], w / np.linalg.svd(mat, compute_uv=False)[0], rtol=0.05)


def test_sequence_and_box_layers_match_paddle():
    seq = RNG.uniform(-1, 1, (7, 4)).astype("float32")
    boxes = np.array([[0, 0, 2, 2], [1, 1, 3, 3], [0, 0, 1, 1]], "float32")
    ids = np.array([[0], [2], [1], [3], [3]], "int64")
    upd = RNG.uniform(-1, 1, (5, 1)).astype("float32")
    base = RNG.uniform(-1, 1, (2, 4)).astype("float32")

    def build():
        s = fluid.data("seq", [-1, 4], "float32", lod_level=1)
        bx = fluid.data("boxes", [-1, 4], "float32")
        i = fluid.data("ids", [-1, 1], "int64", lod_level=1)
        u = fluid.data("upd", [-1, 1], "float32", lod_level=1)
        x = fluid.data("base", [-1, 4], "float32")
        return [L.add_position_encoding(s, 0.5, 1.5), L.iou_similarity(bx, bx), L.iou_similarity(bx, bx, False),
                L.sequence_scatter(x, i, u)]

    lods = {"seq": [[3, 4]], "ids": [[2, 3]], "upd": [[2, 3]]}
    feed = {"seq": fluid.create_lod_tensor(seq, lods["seq"], fluid.CPUPlace()), "boxes": boxes,
            "ids": fluid.create_lod_tensor(ids, lods["ids"], fluid.CPUPlace()),
            "upd": fluid.create_lod_tensor(upd, lods["upd"], fluid.CPUPlace()), "base": base}
    ours, theirs, _ = _run_both(build, feed, lods=lods,
                                paddle_feed={"seq": seq, "boxes": boxes, "ids": ids, "upd": upd, "base": base})
    _close(ours, theirs)
    np.testing.assert_allclose(ours[1][0], [1.0, 1 / 7, 0.25], rtol=1e-6)          # areas 4, 4, 1
    expected = base.copy()
    expected[0, [0, 2]] += upd[:2, 0]
    expected[1, [1, 3, 3]] += 0
    for j, c in zip(range(2, 5), [1, 3, 3]):
        expected[1, c] += upd[j, 0]
    np.testing.assert_allclose(ours[3], expected, rtol=1e-6)


def test_layers_over_fluid1_ops_match_numpy():
    img = RNG.uniform(-1, 1, (2, 4, 4, 6)).astype("float32")
    small = RNG.uniform(-1, 1, (2, 4, 3, 2)).astype("float32")

    def build():
        im = fluid.data("img", [-1, 4, 4, 6], "float32")
        sm = fluid.data("small", [-1, 4, 3, 2], "float32")
        return [L.space_to_depth(im, 2), L.pad_constant_like(im, sm, 0.5), L.random_crop(im, [3, 5]),
                L.gaussian_random_batch_size_like(im, [-1, 3000], std=2.0),
                L.uniform_random_batch_size_like(im, [-1, 3], min=1.0, max=2.0),
                L.randperm(6), L.sampling_id(L.softmax(L.reshape(im, [-1, 96])))]

    main, exe, scope, fetch = _build(build)
    s2d, padded, crop, gauss, uni, perm, ids = exe.run(main, feed={"img": img, "small": small}, fetch_list=fetch,
                                                       scope=scope)
    # Fluid's kernel (darknet's reorg) with C / blocksize² = 1 channel: input pixel (k, j, i) lands at
    # (2j + k // 2, 2i + k % 2) of one [2H, 2W] picture, whose memory is read as [4C, H/2, W/2].
    picture = np.zeros((2, 8, 12), "float32")
    for k in range(4):
        picture[:, k // 2::2, k % 2::2] = img[:, k]
    np.testing.assert_array_equal(s2d, picture.reshape(2, 16, 2, 3))
    np.testing.assert_array_equal(padded, np.pad(small, [(0, 0), (0, 0), (0, 1), (0, 4)], constant_values=0.5))
    assert crop.shape == (2, 4, 3, 5)
    assert any(np.array_equal(crop[0, 0], img[0, 0, r:r + 3, c:c + 5]) for r in range(2) for c in range(2))
    assert gauss.shape == (2, 3000) and abs(gauss.std() - 2.0) < 0.1 and abs(gauss.mean()) < 0.1
    assert uni.shape == (2, 3) and (uni >= 1).all() and (uni < 2).all()
    assert sorted(perm.tolist()) == list(range(6)) and perm.dtype == np.int64
    assert ids.shape == (2,) and ids.dtype == np.int64 and ((ids >= 0) & (ids < 96)).all()
