"""Fluid 1.x's detection training layers (frontend/detection_target_layers.py; ops in
lowering/ops/detection_target.py and detection_loss.py): bipartite_match, mine_hard_examples,
rpn_target_assign, retinanet_target_assign and yolov3_loss (with its gradient) against Paddle 2.6.2
running our serialized programs; target_assign (gone from Paddle 2.6) and ssd_loss (which needs it
and smooth_l1_loss) against NumPy written here."""

from __future__ import annotations

import numpy as np
import pytest

import fluidjax as fluid
from fluidjax.frontend.layer_helper import LayerHelper
from fluidjax.ir.errors import ShapeError

L = fluid.layers


def _lod(data, lengths):
    t = fluid.LoDTensor(np.asarray(data))
    t.set_recursive_sequence_lengths([list(lengths)])
    return t


def _programs():
    main, startup = fluid.Program(), fluid.Program()
    return main, startup, fluid.program_guard(main, startup)


def _run(main, feed, fetch, return_numpy=True):
    return fluid.Executor().run(main, feed=feed, fetch_list=fetch, return_numpy=return_numpy)


def _paddle(main, feed, fetch, lods=None):
    import paddle_oracle as po
    return po.run_lod(main.serialize(), feed, [v.name for v in fetch], lods=lods)


def _offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(int)


# -- bipartite_match -----------------------------------------------------------------------------
def test_bipartite_match_both_kinds_match_paddle_per_instance():
    rng = np.random.default_rng(0)
    lens = [3, 0, 5, 1]
    dist = rng.uniform(0, 1, (sum(lens), 9)).astype("float32")
    dist[dist < 0.25] = 0
    dist[4, 2] = dist[5, 2] = dist[6, 7] = 0.99                  # ties: the lower column, then row
    main, _, guard = _programs()
    with guard:
        d = L.data("d", shape=[-1, 9], dtype="float32", lod_level=1, append_batch_size=False)
        fetch = [*L.bipartite_match(d), *L.bipartite_match(d, "per_prediction", 0.4)]
    ours = _run(main, {"d": _lod(dist, lens)}, fetch)
    theirs = [np.array(t) for t in _paddle(main, {"d": dist}, fetch, {"d": [lens]})]
    assert ours[0].shape == (4, 9) and ours[0].dtype == np.int32
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)
    assert (ours[0][1] == -1).all() and (ours[1][1] == 0).all()  # an instance without rows
    # A plain (no LoD) matrix is one instance.
    main, _, guard = _programs()
    with guard:
        d = L.data("d", shape=[4, 9], dtype="float32", append_batch_size=False)
        fetch = list(L.bipartite_match(d))
    ours = _run(main, {"d": dist[:4]}, fetch)
    theirs = [np.array(t) for t in _paddle(main, {"d": dist[:4]}, fetch)]
    assert ours[0].shape == (1, 9)
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_allclose(ours[1], theirs[1])


# -- target_assign (NumPy: Paddle 2.6 has no target_assign) ----------------------------------------
def _target_assign_ref(x, lens, match, mismatch, neg=None, neg_lens=None):
    off = _offsets(lens)
    n, p = match.shape
    out = np.full((n, p, x.shape[2]), mismatch, x.dtype)
    weight = np.zeros((n, p, 1), "float32")
    for i in range(n):
        for j in range(p):
            if match[i, j] > -1:
                out[i, j] = x[off[i] + match[i, j], j % x.shape[1]]
                weight[i, j] = 1
    if neg is not None:
        noff = _offsets(neg_lens)
        for i in range(n):
            for k in range(noff[i], noff[i + 1]):
                out[i, neg[k, 0]] = mismatch
                weight[i, neg[k, 0]] = 1
    return out, weight


def test_target_assign_with_and_without_negatives():
    rng = np.random.default_rng(1)
    lens, neg_lens = [2, 3], [2, 1]
    x = rng.normal(size=(5, 6, 3)).astype("float32")
    match = np.array([[0, -1, 1, -1, 0, -1], [2, 2, -1, -1, 0, 1]], "int32")
    neg = np.array([[1], [5], [3]], "int32")
    main, _, guard = _programs()
    with guard:
        xv = L.data("x", shape=[-1, 6, 3], dtype="float32", lod_level=1, append_batch_size=False)
        mv = L.data("m", shape=[2, 6], dtype="int32", append_batch_size=False)
        nv = L.data("n", shape=[-1, 1], dtype="int32", lod_level=1, append_batch_size=False)
        fetch = [*L.target_assign(xv, mv, mismatch_value=7), *L.target_assign(xv, mv, nv, mismatch_value=-2)]
    ours = _run(main, {"x": _lod(x, lens), "m": match, "n": _lod(neg, neg_lens)}, fetch)
    for got, want in zip(ours, [*_target_assign_ref(x, lens, match, 7),
                                *_target_assign_ref(x, lens, match, -2, neg, neg_lens)]):
        np.testing.assert_array_equal(got, want)


def test_target_assign_needs_a_lod_input():
    main, _, guard = _programs()
    with guard:
        xv = L.data("x", shape=[2, 6, 3], dtype="float32", append_batch_size=False)
        mv = L.data("m", shape=[2, 6], dtype="int32", append_batch_size=False)
        out, _ = L.target_assign(xv, mv)
    with pytest.raises(Exception, match="LoD tensor"):
        _run(main, {"x": np.zeros((2, 6, 3), "float32"), "m": np.zeros((2, 6), "int32")}, [out])
    with pytest.raises(ShapeError, match="MatchIndices"):
        with fluid.program_guard(fluid.Program(), fluid.Program()):
            L.target_assign(L.data("x", shape=[-1, 6, 3], lod_level=1, append_batch_size=False),
                            L.data("m", shape=[2, 6], dtype="float32", append_batch_size=False))


# -- mine_hard_examples ----------------------------------------------------------------------------
def _mine_program(mining_type, with_loc):
    main, _, guard = _programs()
    with guard:
        cls = L.data("cls", shape=[3, 10], dtype="float32", append_batch_size=False)
        loc = L.data("loc", shape=[3, 10], dtype="float32", append_batch_size=False)
        idx = L.data("idx", shape=[3, 10], dtype="int32", append_batch_size=False)
        dist = L.data("dist", shape=[3, 10], dtype="float32", append_batch_size=False)
        helper = LayerHelper("mine")
        neg, upd = helper.create_tmp("int32"), helper.create_tmp("int32")
        inputs = {"ClsLoss": cls, "MatchIndices": idx, "MatchDist": dist}
        if with_loc:
            inputs["LocLoss"] = loc
        helper.append_op("mine_hard_examples", inputs, {"NegIndices": neg, "UpdatedMatchIndices": upd},
                         {"neg_pos_ratio": 1.5, "neg_dist_threshold": 0.5, "mining_type": mining_type,
                          "sample_size": 4})
    return main, [neg, upd]


@pytest.mark.parametrize("mining_type, with_loc", [("max_negative", False), ("hard_example", True)])
def test_mine_hard_examples_matches_paddle(mining_type, with_loc):
    rng = np.random.default_rng(2)
    feed = {"cls": rng.permutation(30).reshape(3, 10).astype("float32") / 7,
            "loc": rng.uniform(0, 1, (3, 10)).astype("float32"),
            "idx": np.where(rng.uniform(size=(3, 10)) < 0.3, rng.integers(0, 3, (3, 10)), -1).astype("int32"),
            "dist": rng.uniform(0, 1, (3, 10)).astype("float32")}
    feed["idx"][1] = -1                                                     # no positives: no negatives
    main, fetch = _mine_program(mining_type, with_loc)
    ours = _run(main, feed, fetch)
    theirs = _paddle(main, feed, fetch)
    assert ours[0].shape == np.array(theirs[0]).shape and len(ours[0]) > 0
    np.testing.assert_array_equal(ours[0], np.array(theirs[0]))       # each image's, back to back
    np.testing.assert_array_equal(ours[1], np.array(theirs[1]))
    if mining_type == "hard_example":
        assert (ours[1] != feed["idx"]).any()                          # some positives dropped


# -- rpn_target_assign / retinanet_target_assign ----------------------------------------------------
def _anchor_case(seed=3):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(-6, 56, (48, 2))
    wh = rng.uniform(6, 26, (48, 2))
    anchors = np.concatenate([xy, xy + wh], 1).astype("float32")
    gts = np.array([[10, 10, 30, 28], [40, 5, 60, 20], [2, 30, 24, 50],         # image 0
                    [5, 5, 25, 30], [30, 30, 34, 33], [20, 0, 45, 25]], "float32")  # image 1 (a tiny one)
    crowd = np.array([[0], [0], [1], [0], [0], [0]], "int32")
    labels = np.array([[1], [3], [2], [2], [1], [4]], "int32")
    im_info = np.array([[64, 64, 1.0], [50, 60, 1.0]], "float32")
    return anchors, gts, crowd, labels, im_info, [3, 3]


def _anchor_program(kind, **attrs):
    main, _, guard = _programs()
    with guard:
        bbox = L.data("bbox", shape=[2, 48, 4], dtype="float32", append_batch_size=False)
        cls = L.data("cls", shape=[2, 48, 5 if kind == "retina" else 1], dtype="float32", append_batch_size=False)
        anchor = L.data("anchor", shape=[48, 4], dtype="float32", append_batch_size=False)
        var = L.data("var", shape=[48, 4], dtype="float32", append_batch_size=False)
        gt = L.data("gt", shape=[-1, 4], dtype="float32", lod_level=1, append_batch_size=False)
        crowd = L.data("crowd", shape=[-1, 1], dtype="int32", lod_level=1, append_batch_size=False)
        im = L.data("im", shape=[2, 3], dtype="float32", append_batch_size=False)
        if kind == "retina":
            label = L.data("label", shape=[-1, 1], dtype="int32", lod_level=1, append_batch_size=False)
            outs = L.retinanet_target_assign(bbox, cls, anchor, var, gt, label, crowd, im, num_classes=5, **attrs)
        else:
            outs = L.rpn_target_assign(bbox, cls, anchor, var, gt, crowd, im, **attrs)
    return main, list(outs)


def _anchor_feed(kind):
    anchors, gts, crowd, labels, im_info, lens = _anchor_case()
    rng = np.random.default_rng(4)
    feed = {"bbox": rng.normal(size=(2, 48, 4)).astype("float32"),
            "cls": rng.normal(size=(2, 48, 5 if kind == "retina" else 1)).astype("float32"),
            "anchor": anchors, "var": np.full((48, 4), 0.1, "float32"), "gt": gts, "crowd": crowd, "im": im_info}
    lods = {"gt": [lens], "crowd": [lens]}
    if kind == "retina":
        feed["label"], lods["label"] = labels, [lens]
    ours_feed = {k: _lod(v, lods[k][0]) if k in lods else v for k, v in feed.items()}
    return feed, ours_feed, lods


@pytest.mark.parametrize("attrs", [dict(rpn_batch_size_per_im=16, rpn_fg_fraction=0.25),
                                   dict(rpn_batch_size_per_im=10, rpn_fg_fraction=0.5, rpn_straddle_thresh=-1.0,
                                        rpn_positive_overlap=0.5, rpn_negative_overlap=0.35)])
def test_rpn_target_assign_deterministic_matches_paddle(attrs):
    main, fetch = _anchor_program("rpn", use_random=False, **attrs)
    feed, ours_feed, lods = _anchor_feed("rpn")
    ours = _run(main, ours_feed, fetch)
    theirs = [np.array(t) for t in _paddle(main, feed, fetch, lods)]
    names = ["scores", "locations", "labels", "deltas", "inside weights"]
    for a, b, what in zip(ours, theirs, names):
        assert a.shape == b.shape, what
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=what)
    assert 0 < len(ours[1]) < len(ours[0])


def test_rpn_target_assign_random_sampling_follows_the_program_seed():
    main, fetch = _anchor_program("rpn", rpn_batch_size_per_im=12, rpn_fg_fraction=0.25,
                                  rpn_straddle_thresh=-1.0, rpn_negative_overlap=0.5)
    main.random_seed = 11
    _, ours_feed, _ = _anchor_feed("rpn")
    exe = fluid.Executor()
    first = exe.run(main, feed=ours_feed, fetch_list=fetch)
    again = fluid.Executor().run(main, feed=ours_feed, fetch_list=fetch)
    for a, b in zip(first, again):                     # the same seed, the same sample
        np.testing.assert_array_equal(a, b)
    labels = first[2].ravel()
    assert len(labels) <= 24 and labels.sum() <= 3 * 2   # 12 per image, at most 3 foreground each
    det_main, det_fetch = _anchor_program("rpn", rpn_batch_size_per_im=12, rpn_fg_fraction=0.25,
                                          rpn_straddle_thresh=-1.0, rpn_negative_overlap=0.5, use_random=False)
    det = exe.run(det_main, feed=ours_feed, fetch_list=det_fetch)
    assert len(first[1]) == len(det[1])               # as many foreground rows as the deterministic pick
    later = exe.run(main, feed=ours_feed, fetch_list=fetch)
    assert any(a.shape != b.shape or (a != b).any() for a, b in zip(first, later))   # a new draw per run


def test_retinanet_target_assign_matches_paddle():
    main, fetch = _anchor_program("retina", positive_overlap=0.5, negative_overlap=0.4)
    feed, ours_feed, lods = _anchor_feed("retina")
    ours = _run(main, ours_feed, fetch)
    theirs = [np.array(t) for t in _paddle(main, feed, fetch, lods)]
    for a, b, what in zip(ours, theirs, ["scores", "locations", "labels", "deltas", "weights", "fg num"]):
        assert a.shape == b.shape, what
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=what)
    assert set(np.unique(ours[2])) > {0}
