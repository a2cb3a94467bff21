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


# -- yolov3_loss -----------------------------------------------------------------------------------
_ANCHORS, _MASK, _CLASSES = [10, 13, 16, 30, 33, 23, 30, 61], [1, 2], 3


def _yolo_feed(seed=5):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 0.8, (2, len(_MASK) * (5 + _CLASSES), 5, 5)).astype("float32")
    boxes = np.zeros((2, 4, 4), "float32")
    # Normalised centre x, y, width, height; one absent box (zero size) per image.
    # Sizes fit anchors 1 and 2 (in the mask) and 3 (not: GTMatchMask -1).
    boxes[0, :3] = [[0.3, 0.3, 0.1, 0.19], [0.7, 0.55, 0.21, 0.15], [0.1, 0.85, 0.19, 0.4]]
    boxes[1, :2] = [[0.5, 0.5, 0.11, 0.2], [0.93, 0.2, 0.2, 0.13]]
    labels = rng.integers(0, _CLASSES, (2, 4)).astype("int32")
    score = rng.uniform(0.5, 1, (2, 4)).astype("float32")
    return {"x": x, "box": boxes, "label": labels, "score": score}


def _yolo_program(with_score, smooth, dtype="float32"):
    main, startup, guard = _programs()
    with guard:
        x = L.data("x", shape=[2, 16, 5, 5], dtype=dtype, append_batch_size=False)
        x.stop_gradient = False
        box = L.data("box", shape=[2, 4, 4], dtype=dtype, append_batch_size=False)
        label = L.data("label", shape=[2, 4], dtype="int32", append_batch_size=False)
        score = L.data("score", shape=[2, 4], dtype="float32", append_batch_size=False) if with_score else None
        loss = L.yolov3_loss(x, box, label, _ANCHORS, _MASK, _CLASSES, 0.3, 32, gt_score=score,
                             use_label_smooth=smooth, scale_x_y=1.1 if with_score else 1.0)
        total = L.reduce_sum(loss)
    return main, x, loss, total


@pytest.mark.parametrize("with_score, smooth", [(False, True), (True, False)])
def test_yolov3_loss_and_gradient_match_paddle(with_score, smooth):
    import paddle
    import paddle_oracle as po
    main, x, loss, total = _yolo_program(with_score, smooth)
    forward = main.serialize()
    op = main.global_block().ops[-2]
    masks = [op.output("ObjectnessMask")[0], op.output("GTMatchMask")[0]]
    with fluid.program_guard(main):
        (grad,) = fluid.gradients([total], [x])
    feed = _yolo_feed()
    if not with_score:
        del feed["score"]
    ours = _run(main, feed, [loss, grad, *masks])
    pd_main = po.parse(forward)
    fetch = [loss.name, *masks]
    if with_score:             # Paddle 2.6's yolov3_loss_grad maker needs GTScore
        with paddle.static.program_guard(pd_main):
            pd_x = pd_main.global_block().var(x.name)
            pd_x.stop_gradient = False
            (pd_grad,) = paddle.static.gradients([pd_main.global_block().var(total.name)], [pd_x])
        fetch.append(pd_grad.name)
    theirs = po.run(pd_main, feed, fetch)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, err_msg="loss")
    np.testing.assert_array_equal(ours[2], theirs[1])
    np.testing.assert_array_equal(ours[3], theirs[2])
    assert (ours[3] >= 0).sum() >= 2 and (ours[3] == -1).any() and (ours[2] == -1).any()
    if with_score:
        np.testing.assert_allclose(ours[1], theirs[3], rtol=1e-4, atol=1e-6, err_msg="gradient")
        return
    # Without GTScore: central differences of the summed loss (float64 program) at a few entries,
    # the positive cells' location and class logits and some objectness ones among them.
    main64, x64, _, total64 = _yolo_program(False, smooth, dtype="float64")
    feed64 = dict(feed, x=feed["x"].astype("float64"), box=feed["box"].astype("float64"))
    with fluid.program_guard(main64):
        (grad64,) = fluid.gradients([total64], [x64])
    exe = fluid.Executor()
    g = exe.run(main64, feed=feed64, fetch_list=[total64, grad64])[1]
    np.testing.assert_allclose(g, ours[1], rtol=1e-4, atol=1e-6)
    picks = np.argsort(-np.abs(g).ravel())[:5]
    for flat in picks:
        idx = np.unravel_index(flat, g.shape)
        values = []
        for step in (1e-5, -1e-5):
            bumped = feed64["x"].copy()
            bumped[idx] += step
            values.append(exe.run(main64, feed=dict(feed64, x=bumped), fetch_list=[total64, grad64])[0])
        np.testing.assert_allclose((values[0] - values[1]) / 2e-5, g[idx], rtol=1e-4, atol=1e-7)


def test_yolov3_loss_rejects_a_head_of_the_wrong_width():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = L.data("x", shape=[2, 15, 5, 5], dtype="float32", append_batch_size=False)
        box = L.data("box", shape=[2, 4, 4], dtype="float32", append_batch_size=False)
        label = L.data("label", shape=[2, 4], dtype="int32", append_batch_size=False)
        with pytest.raises(ShapeError, match="channels"):
            L.yolov3_loss(x, box, label, _ANCHORS, _MASK, _CLASSES, 0.5, 32)
        with pytest.raises(ShapeError, match="anchor_mask"):
            L.yolov3_loss(x, box, label, _ANCHORS, [1, 7], _CLASSES, 0.5, 32)


# -- ssd_loss (NumPy: the composition needs target_assign and smooth_l1_loss, gone from Paddle 2.6) ---
def _np_iou(a, b):
    lo, hi = np.maximum(a[:, None, :2], b[None, :, :2]), np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=-1)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def _np_match(dist, threshold):
    rows, cols = dist.shape
    idx, best = np.full(cols, -1), np.zeros(cols, dist.dtype)
    free = set(range(rows))
    while free:                                   # the largest remaining pair, greedily
        cand = [(dist[r, c], -c, -r) for c in range(cols) if idx[c] == -1 for r in sorted(free) if dist[r, c] >= 1e-6]
        if not cand:
            break
        d, c, r = max(cand)
        idx[-c], best[-c] = -r, d
        free.discard(-r)
    for c in range(cols):                         # per_prediction
        if idx[c] == -1 and rows:
            r = int(np.argmax(dist[:, c]))
            if dist[r, c] >= max(threshold, 1e-6):
                idx[c], best[c] = r, dist[r, c]
    return idx, best


def _np_ssd_loss(loc, conf, gt_box, gt_label, lens, prior, var, overlap=0.5, ratio=3.0, neg_overlap=0.5):
    n, p, c = conf.shape
    off = _offsets(lens)

    def ce(logits, label):
        z = logits - logits.max()
        return np.log(np.exp(z).sum()) - z[label]

    pw, ph = prior[:, 2] - prior[:, 0], prior[:, 3] - prior[:, 1]
    pcx, pcy = prior[:, 0] + pw / 2, prior[:, 1] + ph / 2
    total, loc_weight_sum = np.zeros((n, 1)), 0.0
    for i in range(n):
        gts, labels = gt_box[off[i]:off[i + 1]], gt_label[off[i]:off[i + 1], 0].astype(int)
        idx, dist = _np_match(_np_iou(gts, prior), overlap) if len(gts) else (np.full(p, -1), np.zeros(p))
        label = np.where(idx > -1, labels[np.maximum(idx, 0)] if len(gts) else 0, 0)
        mining_loss = np.array([ce(conf[i, j], label[j]) for j in range(p)])
        eligible = [j for j in range(p) if idx[j] == -1 and dist[j] < neg_overlap]
        count = min(int((idx > -1).sum() * ratio), len(eligible))
        negatives = sorted(eligible, key=lambda j: (-mining_loss[j], j))[:count]
        for j in range(p):
            if idx[j] > -1:
                g = gts[idx[j]]
                gw, gh = g[2] - g[0], g[3] - g[1]
                target = np.array([((g[0] + g[2]) / 2 - pcx[j]) / pw[j] / var[j, 0],
                                   ((g[1] + g[3]) / 2 - pcy[j]) / ph[j] / var[j, 1],
                                   np.log(gw / pw[j]) / var[j, 2], np.log(gh / ph[j]) / var[j, 3]])
                diff = np.abs(loc[i, j] - target)
                total[i] += np.where(diff < 1, 0.5 * diff ** 2, diff - 0.5).sum() + ce(conf[i, j], label[j])
                loc_weight_sum += 1
            elif j in negatives:
                total[i] += ce(conf[i, j], 0)
    return total / loc_weight_sum


def test_ssd_loss_matches_a_numpy_ssd_loss_and_trains():
    rng = np.random.default_rng(6)
    n, p, c = 2, 16, 4
    main, startup, guard = _programs()
    with guard:
        loc = L.data("loc", shape=[n, p, 4], dtype="float32", append_batch_size=False)
        conf = L.data("conf", shape=[n, p, c], dtype="float32", append_batch_size=False)
        loc.stop_gradient = conf.stop_gradient = False
        gtb = L.data("gtb", shape=[-1, 4], dtype="float32", lod_level=1, append_batch_size=False)
        gtl = L.data("gtl", shape=[-1, 1], dtype="float32", lod_level=1, append_batch_size=False)
        pb = L.data("pb", shape=[p, 4], dtype="float32", append_batch_size=False)
        pbv = L.data("pbv", shape=[p, 4], dtype="float32", append_batch_size=False)
        loss = L.ssd_loss(loc, conf, gtb, gtl, pb, pbv)
        grads = fluid.gradients([L.reduce_sum(loss)], [loc, conf])
    types = [op.type for op in main.global_block().ops]
    for t in ("iou_similarity", "bipartite_match", "target_assign", "mine_hard_examples", "box_coder",
              "smooth_l1_loss", "softmax_with_cross_entropy"):
        assert t in types
    centres = rng.uniform(0.1, 0.8, (p, 2))
    prior = np.concatenate([centres - 0.12, centres + 0.12], 1).astype("float32")
    gts = np.array([[0.1, 0.1, 0.4, 0.45], [0.5, 0.45, 0.9, 0.8], [0.2, 0.3, 0.6, 0.7]], "float32")
    labels = np.array([[1], [2], [3]], "float32")
    var = np.tile(np.array([0.1, 0.1, 0.2, 0.2], "float32"), (p, 1))
    lens = [2, 1]
    feed = {"loc": rng.normal(0, 0.5, (n, p, 4)).astype("float32"), "conf": rng.normal(size=(n, p, c)).astype("float32"),
            "gtb": _lod(gts, lens), "gtl": _lod(labels, lens), "pb": prior, "pbv": var}
    ours, g_loc, g_conf = _run(main, feed, [loss, *grads])
    want = _np_ssd_loss(feed["loc"], feed["conf"], gts, labels, lens, prior, var)
    assert ours.shape == (n, 1)
    np.testing.assert_allclose(ours, want, rtol=1e-5)
    # The gradient reaches the matched and mined priors only; a step along it lowers the loss.
    assert (np.abs(g_conf).sum(-1) > 0).sum() < n * p and np.abs(g_loc).sum() > 0
    stepped = dict(feed, loc=feed["loc"] - 0.1 * g_loc, conf=feed["conf"] - 0.1 * g_conf)
    assert _run(main, stepped, [loss, *grads])[0].sum() < ours.sum()


def test_box_coder_encode_keeps_the_target_boxes_lod_for_target_assign():
    """box_coder's encoded boxes share TargetBox's LoD (Paddle's ShareLoD), so a user's own
    box_coder -> target_assign chain (what ssd_loss does inside) builds and runs as in Paddle."""
    rng = np.random.default_rng(11)
    gt = np.sort(rng.uniform(0, 1, (3, 4)).astype("float32").reshape(3, 2, 2), axis=1).reshape(3, 4)
    prior = np.sort(rng.uniform(0, 1, (5, 4)).astype("float32").reshape(5, 2, 2), axis=1).reshape(5, 4)
    def build(assign):
        gt_box = fluid.data("gt", [None, 4], "float32", lod_level=1)
        pb = fluid.data("pb", [5, 4], "float32")
        encoded = fluid.layers.box_coder(pb, [0.1, 0.1, 0.2, 0.2], gt_box, code_type="encode_center_size")
        assert encoded.lod_level == 1
        if not assign:
            return [encoded]
        return [encoded, fluid.layers.target_assign(encoded, fluid.data("match", [2, 5], "int32"), mismatch_value=0)[0]]

    main, startup, guard = _programs()
    with guard:
        fetch = build(False)
    feed = {"gt": gt, "pb": prior}
    (ours,) = _run(main, dict(feed, gt=_lod(gt, [2, 1])), fetch, return_numpy=False)
    (theirs,) = _paddle(main, feed, fetch, lods={"gt": [[2, 1]]})        # Paddle 2.6 has no target_assign
    assert ours.recursive_sequence_lengths() == [[2, 1]] == theirs.recursive_sequence_lengths()
    np.testing.assert_allclose(np.asarray(ours), np.array(theirs), rtol=1e-5, atol=1e-6)

    main, startup, guard = _programs()
    with guard:
        fetch = build(True)
    match_v = np.array([[0, -1, 1, -1, 0], [-1, 0, -1, -1, -1]], "int32")
    _, assigned = _run(main, {"gt": _lod(gt, [2, 1]), "pb": prior, "match": match_v}, fetch)
    # target_assign: prior j of image i takes encoded[offset_i + match[i, j], j] (NumPy)
    enc = np.array(theirs)
    want = np.zeros((2, 5, 4), "float32")
    for i, start in enumerate((0, 2)):
        for j in range(5):
            if match_v[i, j] >= 0:
                want[i, j] = enc[start + match_v[i, j], j]
    np.testing.assert_allclose(assigned, want, rtol=1e-5, atol=1e-6)
