"""Fast R-CNN / Mask R-CNN training labels (frontend/detection_target_layers.py; ops in
lowering/ops/detection_labels.py): generate_proposal_labels against Paddle 2.6.2 running our
serialized programs (deterministic sampling, cascade with and without MaxOverlap), its random
sampling by its structure and the program's seed; generate_mask_labels (polygon rasterization)
against Paddle 2.6.2, exactly."""

from __future__ import annotations

import numpy as np
import pytest

import fluidjax as fluid
from fluidjax.ir.errors import ShapeError

L = fluid.layers


def _lod(data, lengths):
    t = fluid.LoDTensor(np.asarray(data))
    t.set_recursive_sequence_lengths([list(lengths)])
    return t


def _paddle(main, feed, fetch, lods):
    import paddle_oracle as po
    return po.run_lod(main.serialize(), feed, [v.name for v in fetch], lods=lods)


def _pixel_iou(a, b):
    """[A, B] IoU of pixel boxes (sizes count their end pixels), written out."""
    out = np.zeros((len(a), len(b)), np.float64)
    for i, p in enumerate(a):
        for j, q in enumerate(b):
            w = min(p[2], q[2]) - max(p[0], q[0]) + 1
            h = min(p[3], q[3]) - max(p[1], q[1]) + 1
            inter = max(w, 0) * max(h, 0)
            union = (p[2] - p[0] + 1) * (p[3] - p[1] + 1) + (q[2] - q[0] + 1) * (q[3] - q[1] + 1) - inter
            out[i, j] = 0 if inter == 0 else inter / union
    return out


# -- generate_proposal_labels ------------------------------------------------------------------------
_GT_LENS, _ROI_LENS = [3, 2, 1], [12, 0, 9]          # the second image has no ROIs: no rows


def _proposal_data(seed=0):
    rng = np.random.default_rng(seed)
    gts = []
    for g in _GT_LENS:
        xy, wh = rng.uniform(0, 60, (g, 2)), rng.uniform(10, 40, (g, 2))
        gts.append(np.concatenate([xy, xy + wh], 1))
    gts = np.concatenate(gts).astype("float32")
    scales = np.array([1.5, 1.0, 2.0], "float32")
    starts = np.concatenate([[0], np.cumsum(_GT_LENS)])
    rois = []
    for i, r in enumerate(_ROI_LENS):       # ROIs near the image's ground truths, at the image's scale
        near = gts[starts[i]:starts[i + 1]][rng.integers(0, _GT_LENS[i], r)]
        rois.append((near + rng.normal(0, 6, (r, 4))) * scales[i])
    classes = rng.integers(1, 5, (sum(_GT_LENS), 1)).astype("int32")
    crowd = np.zeros((sum(_GT_LENS), 1), "int32")
    crowd[1] = 1
    im_info = np.stack([np.full(3, 200.0), np.full(3, 200.0), scales], 1).astype("float32")
    return {"rois": np.concatenate(rois).astype("float32"), "cls": classes, "crowd": crowd, "gts": gts, "im": im_info}


def _proposal_program(with_max_overlap=False, **kw):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        r = L.data("rois", shape=[-1, 4], dtype="float32", lod_level=1, append_batch_size=False)
        c = L.data("cls", shape=[-1, 1], dtype="int32", lod_level=1, append_batch_size=False)
        cr = L.data("crowd", shape=[-1, 1], dtype="int32", lod_level=1, append_batch_size=False)
        g = L.data("gts", shape=[-1, 4], dtype="float32", lod_level=1, append_batch_size=False)
        im = L.data("im", shape=[-1, 3], dtype="float32", append_batch_size=False)
        extra = {}
        if with_max_overlap:
            extra["max_overlap"] = L.data("mo", shape=[-1], dtype="float32", lod_level=1, append_batch_size=False)
        outs = L.generate_proposal_labels(r, c, cr, g, im, class_nums=5, return_max_overlap=True, **extra, **kw)
    return main, list(outs)


def _feeds(data):
    lens = {"rois": _ROI_LENS, "cls": _GT_LENS, "crowd": _GT_LENS, "gts": _GT_LENS, "mo": _ROI_LENS}
    ours = {k: (_lod(v, lens[k]) if k in lens else v) for k, v in data.items()}
    return ours, {k: [lens[k]] for k in data if k in lens}


def _assert_same(ours, theirs):
    names = ["rois", "labels", "targets", "inside", "outside", "max overlap"]
    for a, b, what in zip(ours, theirs, names):
        assert a.lod() == b.lod(), what
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-5, atol=1e-6, err_msg=what)


@pytest.mark.parametrize("attrs", [
    dict(batch_size_per_im=8, fg_fraction=0.25, fg_thresh=0.5),             # both kinds capped
    dict(batch_size_per_im=64),                                             # Fluid's thresholds, no cap
    dict(batch_size_per_im=6, fg_thresh=0.3, bg_thresh_lo=0.1, is_cls_agnostic=True),
])
def test_generate_proposal_labels_matches_paddle(attrs):
    main, fetch = _proposal_program(use_random=False, **attrs)
    assert [op.type for op in main.global_block().ops] == ["generate_proposal_labels"]
    data = _proposal_data()
    ours_feed, lods = _feeds(data)
    ours = fluid.Executor().run(main, feed=ours_feed, fetch_list=fetch, return_numpy=False)
    _assert_same(ours, _paddle(main, data, fetch, lods))
    labels, inside = np.array(ours[1]).ravel(), np.array(ours[3])
    assert ours[0].lod()[0][1] == ours[0].lod()[0][2]                 # the image without ROIs has no rows
    assert (labels > 0).any() and (labels == 0).any()
    assert inside.sum() == 4 * (labels > 0).sum()                     # four weights per foreground row
    if attrs.get("is_cls_agnostic"):
        assert (inside[:, 4:8].sum(1) == 4 * (labels > 0)).all()
    if attrs["batch_size_per_im"] == 8:
        lod = ours[0].lod()[0]
        for a, b in zip(lod[:-1], lod[1:]):
            assert b - a <= 8 and (labels[a:b] > 0).sum() <= 2


def test_generate_proposal_labels_cascade_matches_paddle_with_and_without_max_overlap():
    data = _proposal_data()
    data["rois"][4, 2] = data["rois"][4, 0] - 3                       # a ROI of negative width: dropped
    rng = np.random.default_rng(3)
    mo = rng.uniform(0, 0.9, (len(data["rois"]),)).astype("float32")
    mo[[0, 3]] = 1.0                                                  # "ground truths": dropped
    mo[12:] = 1.0                                                     # the last image keeps none: a zero box
    main, fetch = _proposal_program(with_max_overlap=True, is_cascade_rcnn=True, fg_thresh=0.5)
    feed = dict(data, mo=mo)
    ours_feed, lods = _feeds(feed)
    ours = fluid.Executor().run(main, feed=ours_feed, fetch_list=fetch, return_numpy=False)
    _assert_same(ours, _paddle(main, feed, fetch, lods))
    assert (np.array(ours[0])[-1] == 0).all()
    # Fluid 1.8's program has no MaxOverlap: each ROI's best IoU with its image's ground truths.
    fluid18, fetch18 = _proposal_program(is_cascade_rcnn=True, fg_thresh=0.5)
    assert "MaxOverlap" not in fluid18.global_block().ops[0].inputs
    computed = []
    roi_starts, gt_starts = np.cumsum([0] + _ROI_LENS), np.cumsum([0] + _GT_LENS)
    for i in range(3):
        rois = data["rois"][roi_starts[i]:roi_starts[i + 1]] / data["im"][i, 2]
        computed.append(_pixel_iou(rois, data["gts"][gt_starts[i]:gt_starts[i + 1]]).max(1, initial=0))
    feed["mo"] = np.concatenate(computed).astype("float32")
    ours_feed, lods = _feeds(feed)
    del ours_feed["mo"]
    ours = fluid.Executor().run(fluid18, feed=ours_feed, fetch_list=fetch18, return_numpy=False)
    _assert_same(ours, _paddle(main, feed, fetch, lods))


def test_generate_proposal_labels_random_sampling_follows_the_program_seed():
    data = _proposal_data()
    ours_feed, _ = _feeds(data)
    main, fetch = _proposal_program(batch_size_per_im=5, fg_fraction=0.4, fg_thresh=0.3, bg_thresh_lo=0.0)
    main.random_seed = 7
    det_main, det_fetch = _proposal_program(batch_size_per_im=5, fg_fraction=0.4, fg_thresh=0.3, use_random=False)
    exe = fluid.Executor()
    first = exe.run(main, feed=ours_feed, fetch_list=fetch, return_numpy=False)
    again = fluid.Executor().run(main, feed=ours_feed, fetch_list=fetch, return_numpy=False)
    for a, b in zip(first, again):                                    # the same seed, the same sample
        np.testing.assert_array_equal(np.array(a), np.array(b))
    det = exe.run(det_main, feed=ours_feed, fetch_list=det_fetch, return_numpy=False)
    assert first[0].lod() == det[0].lod()                             # as many rows of each kind per image
    np.testing.assert_array_equal(np.sort(np.array(first[1]).ravel()) > 0, np.sort(np.array(det[1]).ravel()) > 0)
    draws = [exe.run(main, feed=ours_feed, fetch_list=fetch[:1])[0] for _ in range(6)]
    assert any(not np.array_equal(d, draws[0]) for d in draws)         # a new draw per run
    # Every sampled row is a candidate of its image: a ground truth or a ROI (scaled back and forth).
    rois = np.array(first[0])
    candidates = np.concatenate([data["gts"][:3] * 1.5, data["rois"][:12]])
    assert all(np.abs(candidates - r).max(1).min() < 1e-4 for r in rois[:5])


def test_generate_proposal_labels_checks_its_inputs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        r = L.data("rois", shape=[-1, 4], dtype="float32", lod_level=1, append_batch_size=False)
        c = L.data("cls", shape=[-1, 1], dtype="int32", lod_level=1, append_batch_size=False)
        cf = L.data("clsf", shape=[-1, 1], dtype="float32", lod_level=1, append_batch_size=False)
        g = L.data("gts", shape=[-1, 4], dtype="float32", lod_level=1, append_batch_size=False)
        im = L.data("im", shape=[-1, 3], dtype="float32", append_batch_size=False)
        with pytest.raises(ValueError, match="class_nums"):
            L.generate_proposal_labels(r, c, c, g, im)
        with pytest.raises(ShapeError, match="GtClasses must be int32"):
            L.generate_proposal_labels(r, cf, c, g, im, class_nums=3)
        with pytest.raises(ShapeError, match="bbox_reg_weights"):
            L.generate_proposal_labels(r, c, c, g, im, bbox_reg_weights=[1.0, 1.0], class_nums=3)


# -- generate_mask_labels ----------------------------------------------------------------------------
def _mask_data(seed):
    """Three images of ground truths made of 1-2 star-shaped polygons each (some reaching outside
    their ROIs), ROIs with labels (the middle image has only background ones)."""
    rng = np.random.default_rng(seed)
    gts_per, polys_per, pts_per, points = [2, 1, 3], [], [], []
    for _ in range(sum(gts_per)):
        k = int(rng.integers(1, 3))
        polys_per.append(k)
        cx, cy = rng.uniform(20, 80, 2)
        for _ in range(k):
            v = int(rng.integers(3, 8))
            pts_per.append(v)
            ang, rad = np.sort(rng.uniform(0, 2 * np.pi, v)), rng.uniform(5, 25, v)
            points.append(np.stack([cx + rad * np.cos(ang), cy + rad * np.sin(ang)], 1))
    g = sum(gts_per)
    classes = rng.integers(0, 4, (g, 1)).astype("int32")
    classes[[0, 2]] = [[2], [1]]
    crowd = np.zeros((g, 1), "int32")
    crowd[3] = 1
    roi_lens, scales = [6, 3, 7], np.array([1.5, 1.0, 2.0], "float32")
    rois, labels = [], []
    for i, r in enumerate(roi_lens):
        xy, wh = rng.uniform(0, 70, (r, 2)), rng.uniform(3, 50, (r, 2))
        rois.append(np.concatenate([xy, xy + wh], 1) * scales[i])
        labels.append(rng.integers(0, 4, (r, 1)) * (i != 1))
    data = {"im": np.stack([np.full(3, 300.0), np.full(3, 300.0), scales], 1).astype("float32"),
            "cls": classes, "crowd": crowd, "segs": np.concatenate(points).astype("float32"),
            "rois": np.concatenate(rois).astype("float32"), "lab": np.concatenate(labels).astype("int32")}
    lods = {"cls": [gts_per], "crowd": [gts_per], "segs": [gts_per, polys_per, pts_per], "rois": [roi_lens],
            "lab": [roi_lens]}
    return data, lods


def _mask_program(resolution, num_classes=4):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        im = L.data("im", shape=[-1, 3], dtype="float32", append_batch_size=False)
        c = L.data("cls", shape=[-1, 1], dtype="int32", lod_level=1, append_batch_size=False)
        cr = L.data("crowd", shape=[-1, 1], dtype="int32", lod_level=1, append_batch_size=False)
        sg = L.data("segs", shape=[-1, 2], dtype="float32", lod_level=3, append_batch_size=False)
        r = L.data("rois", shape=[-1, 4], dtype="float32", lod_level=1, append_batch_size=False)
        lb = L.data("lab", shape=[-1, 1], dtype="int32", lod_level=1, append_batch_size=False)
        outs = L.generate_mask_labels(im, c, cr, sg, r, lb, num_classes=num_classes, resolution=resolution)
    return main, list(outs)


@pytest.mark.parametrize("seed, resolution", [(0, 14), (6, 28)])
def test_generate_mask_labels_matches_paddle(seed, resolution):
    main, fetch = _mask_program(resolution)
    assert [op.type for op in main.global_block().ops] == ["generate_mask_labels"]
    data, lods = _mask_data(seed)
    feed = {}
    for k, v in data.items():
        feed[k] = fluid.LoDTensor(v) if k in lods else v
        if k in lods:
            feed[k].set_recursive_sequence_lengths(lods[k])
    ours = fluid.Executor().run(main, feed=feed, fetch_list=fetch, return_numpy=False)
    theirs = _paddle(main, data, fetch, lods)
    for a, b, what in zip(ours, theirs, ["mask rois", "roi has mask", "masks"]):
        assert a.lod() == b.lod(), what
        np.testing.assert_array_equal(np.array(a), np.array(b), err_msg=what)
    masks, lod = np.array(ours[2]), ours[0].lod()[0]
    assert lod[2] - lod[1] == 1 and (masks[lod[1]] == -1).all()       # no foreground: one all -1 row
    assert (masks == 1).sum() > resolution and set(np.unique(masks)) == {-1, 0, 1}


def test_generate_mask_labels_checks_its_inputs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        im = L.data("im", shape=[-1, 3], dtype="float32", append_batch_size=False)
        c = L.data("cls", shape=[-1, 1], dtype="int32", lod_level=1, append_batch_size=False)
        sg = L.data("segs", shape=[-1, 2], dtype="float32", lod_level=1, append_batch_size=False)
        sg3 = L.data("segs3", shape=[-1, 2], dtype="float32", lod_level=3, append_batch_size=False)
        r = L.data("rois", shape=[-1, 4], dtype="float32", lod_level=1, append_batch_size=False)
        lf = L.data("labf", shape=[-1, 1], dtype="float32", lod_level=1, append_batch_size=False)
        with pytest.raises(ShapeError, match="3 LoD levels"):
            L.generate_mask_labels(im, c, c, sg, r, c, 4, 14)
        with pytest.raises(ShapeError, match="LabelsInt32 must be int32"):
            L.generate_mask_labels(im, c, c, sg3, r, lf, 4, 14)
        with pytest.raises(ShapeError, match="resolution"):
            L.generate_mask_labels(im, c, c, sg3, r, c, 4, 0)
