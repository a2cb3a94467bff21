"""Fluid 1.x detection layers over boxes (frontend/detection_box_layers.py): each checked against
Paddle 2.6.2 running our serialized program (rows and LoD), mean_iou (gone from Paddle) against
NumPy written from Fluid 1.8's kernel."""

from __future__ import annotations

import numpy as np
import pytest

import fluidjax as fluid
from fluidjax.frontend import detection_box_layers as L

import paddle_oracle  # noqa: E402  (after fluidjax: the other order segfaults)

RNG = np.random.default_rng(7)


def _boxes(shape, lo=0.0, hi=20.0, size=(2.0, 9.0)):
    xy = RNG.uniform(lo, hi, shape + (2,))
    wh = RNG.uniform(*size, shape + (2,))
    return np.concatenate([xy, xy + wh], -1).astype("float32")


def _scores(shape):
    # distinct values: no ties, whose order C++'s sorts leave open
    return (RNG.permutation(np.arange(np.prod(shape)) + 1).reshape(shape) / np.prod(shape)).astype("float32")


def _both(build, feed, lods=None, params=None):
    """Build a program with ``build()`` (returns the fetch Variables); run it here and in Paddle."""
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start):
        fetch = build()
    exe = fluid.Executor()
    exe.run(start)
    names = [v.name for v in fetch]
    ours_feed = dict(feed)
    for name, lengths in (lods or {}).items():
        ours_feed[name] = fluid.create_lod_tensor(feed[name], lengths, fluid.CPUPlace())
    ours = exe.run(main, feed=ours_feed, fetch_list=names, return_numpy=False)
    if params:
        params = {k: np.asarray(fluid.global_scope().find_var(k).get_tensor()) for k in params}
    theirs = paddle_oracle.run_lod(main.serialize(), feed, names, params=params, lods=lods)
    return ours, theirs


def _same(ours, theirs, rtol=1e-5, atol=1e-5, lod=True):
    for o, t in zip(ours, theirs):
        o_arr, t_arr = np.asarray(o), np.array(t)
        assert o_arr.shape == t_arr.shape, (o_arr.shape, t_arr.shape)
        np.testing.assert_allclose(o_arr, t_arr, rtol=rtol, atol=atol)
        if lod:
            assert [list(l) for l in o.lod()] == [list(l) for l in t.lod()]


def test_multiclass_nms_rows_and_lod_match_paddle():
    n, c, m = 3, 4, 12
    feed = {"b": _boxes((n, m)), "s": _scores((n, c, m))}

    def build():
        b = fluid.layers.data("b", [n, m, 4], append_batch_size=False)
        s = fluid.layers.data("s", [n, c, m], append_batch_size=False)
        return [fluid.layers.multiclass_nms(b, s, score_threshold=0.3, nms_top_k=6, keep_top_k=7, nms_threshold=0.3,
                                            normalized=False),
                fluid.layers.multiclass_nms(b, s, 0.2, -1, -1, nms_threshold=0.6, nms_eta=0.9, background_label=-1)]

    ours, theirs = _both(build, feed)
    _same(ours, theirs)
    assert len(ours[0].lod()[0]) == n + 1


def test_multiclass_nms_with_nothing_detected_gives_one_row_of_minus_one():
    feed = {"b": _boxes((2, 5)), "s": _scores((2, 2, 5)) * 0.1}

    def build():
        b = fluid.layers.data("b", [2, 5, 4], append_batch_size=False)
        s = fluid.layers.data("s", [2, 2, 5], append_batch_size=False)
        return [fluid.layers.multiclass_nms(b, s, score_threshold=0.5, nms_top_k=3, keep_top_k=3)]

    (ours,), (theirs,) = _both(build, feed)
    assert np.array(theirs).reshape(-1).tolist() == [-1] and theirs.lod() == [[0, 1]]
    # Paddle: one value -1, LoD [0, 1]; here a row of -1 given to the first image (static columns).
    assert np.asarray(ours).tolist() == [[-1.0] * 6] and ours.lod() == [[0, 1, 1]]


def test_detection_output_matches_paddle_with_and_without_index():
    n, m, c = 2, 10, 3
    prior = _boxes((m,), 0, 0.6, (0.1, 0.4))
    feed = {"loc": RNG.normal(0, 0.3, (n, m, 4)).astype("float32"), "conf": RNG.normal(0, 2, (n, m, c)).astype("float32"),
            "pb": prior, "pbv": np.tile(np.float32([[0.1, 0.1, 0.2, 0.2]]), (m, 1))}

    def build():
        loc = fluid.layers.data("loc", [n, m, 4], append_batch_size=False)
        conf = fluid.layers.data("conf", [n, m, c], append_batch_size=False)
        pb = fluid.layers.data("pb", [m, 4], append_batch_size=False)
        pbv = fluid.layers.data("pbv", [m, 4], append_batch_size=False)
        out = fluid.layers.detection_output(loc, conf, pb, pbv, nms_threshold=0.4, nms_top_k=5, keep_top_k=6,
                                            score_threshold=0.2)
        out2, index = fluid.layers.detection_output(loc, conf, pb, pbv, keep_top_k=4, score_threshold=0.2,
                                                    return_index=True)
        assert index.block.ops[-1].type == "multiclass_nms2"      # return_index: the op with Index
        return [out, out2, index]

    ours, theirs = _both(build, feed)
    _same(ours, theirs)


def test_locality_aware_nms_merges_like_paddle():
    n, m = 2, 10
    base = _boxes((n, 1), 0, 30, (5, 10))
    jitter = RNG.uniform(-1.5, 1.5, (n, m, 4)).astype("float32")
    b = np.where(np.arange(m)[None, :, None] < 6, base + jitter, _boxes((n, m), 40, 80)).astype("float32")
    feed = {"b": b, "s": _scores((n, 1, m))}

    def build():
        bx = fluid.layers.data("b", [n, m, 4], append_batch_size=False)
        s = fluid.layers.data("s", [n, 1, m], append_batch_size=False)
        return [fluid.layers.locality_aware_nms(bx, s, score_threshold=0.05, nms_top_k=8, keep_top_k=5,
                                                nms_threshold=0.3, normalized=False)]

    ours, theirs = _both(build, feed)
    _same(ours, theirs, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="one class"):
        with fluid.program_guard(fluid.Program(), fluid.Program()):
            fluid.layers.locality_aware_nms(fluid.layers.data("b", [2, 5, 4], append_batch_size=False),
                                            fluid.layers.data("s", [2, 2, 5], append_batch_size=False), 0.1, 5, 5)


def test_retinanet_detection_output_matches_paddle():
    n, c, sizes = 2, 3, (8, 4)
    feed, names = {}, []
    for l, mi in enumerate(sizes):
        feed[f"d{l}"] = RNG.normal(0, 0.2, (n, mi, 4)).astype("float32")
        feed[f"s{l}"] = _scores((n, mi, c))
        feed[f"a{l}"] = _boxes((mi,), 0, 40, (6, 20))
    feed["info"] = np.float32([[50, 60, 1.0], [64, 48, 1.5]])

    def build():
        d = [fluid.layers.data(f"d{l}", [n, mi, 4], append_batch_size=False) for l, mi in enumerate(sizes)]
        s = [fluid.layers.data(f"s{l}", [n, mi, c], append_batch_size=False) for l, mi in enumerate(sizes)]
        a = [fluid.layers.data(f"a{l}", [mi, 4], append_batch_size=False) for l, mi in enumerate(sizes)]
        info = fluid.layers.data("info", [n, 3], append_batch_size=False)
        return [fluid.layers.retinanet_detection_output(d, s, a, info, score_threshold=0.4, nms_top_k=6,
                                                        keep_top_k=7, nms_threshold=0.3)]

    ours, theirs = _both(build, feed)
    _same(ours, theirs, rtol=1e-4, atol=1e-4)


def _rpn_feed(n, a, h, w):
    anchors = _boxes((h, w, a), 0, 40, (4, 24))
    return {"sc": _scores((n, a, h, w)), "dl": RNG.normal(0, 0.3, (n, 4 * a, h, w)).astype("float32"),
            "info": np.float32([[48, 56, 1.0], [40, 44, 2.0]])[:n], "an": anchors,
            "var": np.tile(np.float32([1.0, 1.0, 1.0, 1.0]), (h, w, a, 1))}


def test_generate_proposals_rows_lod_and_counts_match_paddle():
    n, a, h, w = 2, 3, 4, 4
    feed = _rpn_feed(n, a, h, w)

    def build():
        sc = fluid.layers.data("sc", [n, a, h, w], append_batch_size=False)
        dl = fluid.layers.data("dl", [n, 4 * a, h, w], append_batch_size=False)
        info = fluid.layers.data("info", [n, 3], append_batch_size=False)
        an = fluid.layers.data("an", [h, w, a, 4], append_batch_size=False)
        var = fluid.layers.data("var", [h, w, a, 4], append_batch_size=False)
        rois, probs, num = fluid.layers.generate_proposals(sc, dl, info, an, var, pre_nms_top_n=30, post_nms_top_n=9,
                                                           nms_thresh=0.5, min_size=6.0, return_rois_num=True)
        return [rois, probs, num]

    ours, theirs = _both(build, feed)
    _same(ours[:2], theirs[:2], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(ours[2]), np.array(theirs[2]))


def test_collect_fpn_proposals_matches_paddle():
    lengths = [[3, 2], [1, 4], [2, 2]]
    feed, lods = {}, {}
    distinct = _scores((sum(map(sum, lengths)), 1))            # no ties across levels either
    for l, lens in enumerate(lengths):
        feed[f"r{l}"] = _boxes((sum(lens),))
        feed[f"s{l}"], distinct = distinct[:sum(lens)], distinct[sum(lens):]
        lods[f"r{l}"] = lods[f"s{l}"] = [lens]

    def build():
        rois = [fluid.layers.data(f"r{l}", [4], lod_level=1) for l in range(3)]
        scores = [fluid.layers.data(f"s{l}", [1], lod_level=1) for l in range(3)]
        return [fluid.layers.collect_fpn_proposals(rois, scores, min_level=2, max_level=4, post_nms_top_n=7)]

    ours, theirs = _both(build, feed, lods)
    _same(ours, theirs)


def test_box_clip_lod_matches_paddle_and_plain_rows_clip_per_image():
    boxes = _boxes((5,), -10, 60, (5, 30))
    info = np.float32([[40, 50, 1.0], [60, 30, 2.0]])
    feed, lods = {"b": boxes, "info": info}, {"b": [[2, 3]]}

    def build():
        b = fluid.layers.data("b", [4], lod_level=1)
        i = fluid.layers.data("info", [2, 3], append_batch_size=False)
        return [fluid.layers.box_clip(b, i)]

    ours, theirs = _both(build, feed, lods)
    _same(ours, theirs)
    # plain [N, K, 4] (a fluidjax extension): image i's boxes are row i; NumPy of the clip formula
    plain = _boxes((2, 3), -10, 60, (5, 30))
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start):
        out = fluid.layers.box_clip(fluid.layers.data("p", [2, 3, 4], append_batch_size=False),
                                    fluid.layers.data("info", [2, 3], append_batch_size=False))
    got, = fluid.Executor().run(main, feed={"p": plain, "info": info}, fetch_list=[out])
    for i in range(2):
        h, w = np.floor(info[i, 0] / info[i, 2] + 0.5), np.floor(info[i, 1] / info[i, 2] + 0.5)
        want = np.clip(plain[i], 0, [w - 1, h - 1, w - 1, h - 1])
        np.testing.assert_allclose(got[i], want)


def test_polygon_box_decoder_anchor_and_density_priors_match_paddle():
    feed = {"geo": RNG.normal(0, 3, (2, 4, 3, 5)).astype("float32"), "pb": _boxes((6,), 0, 30, (4, 20)),
            "pbv": np.float32([0.1, 0.1, 0.2, 0.2]), "tb": RNG.normal(0, 1, (6, 12)).astype("float32"),
            "bs": RNG.normal(0, 1, (6, 3)).astype("float32"), "feat": np.zeros((1, 2, 3, 4), "float32"),
            "img": np.zeros((1, 3, 24, 40), "float32")}
    feed["bs"][0, 1:] = -2.0              # no foreground score above -1: the prior is assigned

    def build():
        geo = fluid.layers.data("geo", [2, 4, 3, 5], append_batch_size=False)
        pb = fluid.layers.data("pb", [6, 4], append_batch_size=False)
        pbv = fluid.layers.data("pbv", [4], append_batch_size=False)
        tb = fluid.layers.data("tb", [6, 12], append_batch_size=False)
        bs = fluid.layers.data("bs", [6, 3], append_batch_size=False)
        feat = fluid.layers.data("feat", [1, 2, 3, 4], append_batch_size=False)
        img = fluid.layers.data("img", [1, 3, 24, 40], append_batch_size=False)
        dec, assign = fluid.layers.box_decoder_and_assign(pb, pbv, tb, bs, box_clip=0.5)
        anchors, avar = fluid.layers.anchor_generator(feat, anchor_sizes=[32, 64], aspect_ratios=[0.5, 1.0, 2.0],
                                                      variance=[0.1, 0.1, 0.2, 0.2], stride=[8.0, 10.0], offset=0.5)
        dbox, dvar = fluid.layers.density_prior_box(feat, img, densities=[3, 1], fixed_sizes=[6.0, 20.0],
                                                    fixed_ratios=[1.0, 2.0], clip=True)
        flat, _ = fluid.layers.density_prior_box(feat, img, densities=[2], fixed_sizes=[9.0], fixed_ratios=[0.5],
                                                 steps=[8.0, 6.0], offset=0.3, flatten_to_2d=True)
        return [fluid.layers.polygon_box_transform(geo), dec, assign, anchors, avar, dbox, dvar, flat]

    ours, theirs = _both(build, feed)
    _same(ours, theirs, rtol=1e-5, atol=1e-5, lod=False)
    assert np.asarray(ours[3]).shape == (3, 4, 6, 4) and np.asarray(ours[5]).shape == (3, 4, 20, 4)


def test_multi_box_head_matches_paddle():
    n = 2
    feed = {"img": RNG.normal(0, 1, (n, 3, 32, 32)).astype("float32"),
            "f1": RNG.normal(0, 1, (n, 4, 4, 4)).astype("float32"), "f2": RNG.normal(0, 1, (n, 4, 2, 2)).astype("float32"),
            "f3": RNG.normal(0, 1, (n, 4, 1, 1)).astype("float32")}
    params = []

    def build():
        img = fluid.layers.data("img", [3, 32, 32])
        feats = [fluid.layers.data(k, [4, s, s]) for k, s in (("f1", 4), ("f2", 2), ("f3", 1))]
        locs, confs, box, var = fluid.layers.multi_box_head(feats, img, base_size=32, num_classes=3,
                                                            aspect_ratios=[[2.0], [2.0, 3.0], [2.0]], min_ratio=20,
                                                            max_ratio=90, offset=0.5, flip=True, clip=True)
        params.extend(p.name for p in fluid.default_main_program().all_parameters())
        return [locs, confs, box, var]

    ours, theirs = _both(build, feed, params=params)
    _same(ours, theirs, rtol=1e-4, atol=1e-5, lod=False)
    priors = 4 * 4 * 4 + 2 * 2 * 6 + 1 * 1 * 4
    assert np.asarray(ours[0]).shape == (n, priors, 4) and np.asarray(ours[1]).shape == (n, priors, 3)
    assert np.asarray(ours[2]).shape == (priors, 4)


def _mean_iou_numpy(pred, label, k, in_wrong=(), in_correct=(), in_mean=()):
    wrong, correct = np.zeros(k, np.int64), np.zeros(k, np.int64)
    for w in in_wrong:
        wrong += w
    for c in in_correct:
        correct += c
    for p, l in zip(pred.reshape(-1), label.reshape(-1)):
        if p == l:
            correct[p] += 1
        else:
            wrong[l] += 1
            wrong[p] += 1
    denom = wrong + correct
    mean = sum(correct[i] / denom[i] for i in range(k) if denom[i]) / np.count_nonzero(denom)
    return mean + sum(float(m[0]) for m in in_mean), wrong, correct


def test_mean_iou_matches_numpy_of_fluids_kernel():
    k = 5
    pred = RNG.integers(0, 4, (3, 6)).astype("int32")              # class 4 never appears: not averaged
    label = RNG.integers(0, 4, (3, 6)).astype("int32")
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start):
        p = fluid.layers.data("p", [3, 6], dtype="int32", append_batch_size=False)
        l = fluid.layers.data("l", [3, 6], dtype="int32", append_batch_size=False)
        outs = fluid.layers.mean_iou(p, l, k)
    mean, wrong, correct = fluid.Executor().run(main, feed={"p": pred, "l": label}, fetch_list=list(outs))
    want = _mean_iou_numpy(pred, label, k)
    np.testing.assert_allclose(mean, [want[0]], rtol=1e-6)
    np.testing.assert_array_equal(wrong, want[1])
    np.testing.assert_array_equal(correct, want[2])
    assert mean.dtype == np.float32 and wrong.dtype == np.int32


def test_mean_iou_accumulates_its_optional_inputs():
    from fluidjax.frontend.layer_helper import LayerHelper

    k = 3
    pred = np.int64([[0, 1, 2, 2]])
    label = np.int64([[0, 2, 2, 1]])
    extra_w, extra_c, extra_m = np.int32([1, 0, 2]), np.int32([0, 3, 1]), np.float32([0.25])
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start):
        p = fluid.layers.data("p", [1, 4], dtype="int64", append_batch_size=False)
        l = fluid.layers.data("l", [1, 4], dtype="int64", append_batch_size=False)
        w = fluid.layers.data("w", [k], dtype="int32", append_batch_size=False)
        c = fluid.layers.data("c", [k], dtype="int32", append_batch_size=False)
        m = fluid.layers.data("m", [1], dtype="float32", append_batch_size=False)
        helper = LayerHelper("mean_iou")
        outs = [helper.create_tmp("float32"), helper.create_tmp("int32"), helper.create_tmp("int32")]
        helper.append_op("mean_iou", {"Predictions": p, "Labels": l, "InWrongs": [w], "InCorrects": [c],
                                      "InMeanIou": [m]},
                         {"OutMeanIou": outs[0], "OutWrong": outs[1], "OutCorrect": outs[2]}, {"num_classes": k})
    got = fluid.Executor().run(main, feed={"p": pred, "l": label, "w": extra_w, "c": extra_c, "m": extra_m},
                               fetch_list=outs)
    want = _mean_iou_numpy(pred, label, k, [extra_w], [extra_c], [extra_m])
    np.testing.assert_allclose(got[0], [want[0]], rtol=1e-6)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])


def test_bad_inputs_fail_at_build_time():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        b = fluid.layers.data("b", [2, 5, 4], append_batch_size=False)
        with pytest.raises(Exception, match="Scores must be"):
            fluid.layers.multiclass_nms(b, fluid.layers.data("s", [5, 3], append_batch_size=False), 0.1, 5, 5)
        with pytest.raises(Exception, match="same number of boxes"):
            fluid.layers.multiclass_nms(b, fluid.layers.data("s2", [2, 3, 6], append_batch_size=False), 0.1, 5, 5)
        with pytest.raises(Exception, match="BboxDeltas needs 4 channels"):
            fluid.layers.generate_proposals(fluid.layers.data("sc", [1, 3, 4, 4], append_batch_size=False),
                                            fluid.layers.data("dl", [1, 8, 4, 4], append_batch_size=False),
                                            fluid.layers.data("im", [1, 3], append_batch_size=False),
                                            fluid.layers.data("an", [4, 4, 3, 4], append_batch_size=False),
                                            fluid.layers.data("va", [4, 4, 3, 4], append_batch_size=False))
        with pytest.raises(Exception, match="even number"):
            fluid.layers.polygon_box_transform(fluid.layers.data("g", [1, 3, 2, 2], append_batch_size=False))
        with pytest.raises(ValueError, match="densities and fixed_sizes"):
            fluid.layers.density_prior_box(b, b, densities=[1, 2], fixed_sizes=[3.0], fixed_ratios=[1.0])
