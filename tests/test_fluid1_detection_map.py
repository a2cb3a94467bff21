"""Detection mAP (ops/detection_map.py; fluid.metrics.DetectionMAP and fluid.evaluator.DetectionMAP
in frontend/metrics.py, frontend/evaluator.py): the detection_map op, the batch's mAP and the mAP
accumulated over batches, against Paddle 2.6.2 running our serialized programs on one scope across
runs (integral and 11point, with and without difficult ground truths, reset, the room of the
accumulated rows growing)."""

from __future__ import annotations

import numpy as np
import pytest

import fluidjax as fluid
from fluidjax.ir.errors import ShapeError

L = fluid.layers
C = 5


def _lod(data, lengths):
    t = fluid.LoDTensor(np.asarray(data))
    t.set_recursive_sequence_lengths([list(lengths)])
    return t


def _batch(rng, gts_per_image=(2, 3, 2), dets_per_image=(5, 4, 5)):
    """Detections [M, 6] and ground truths [G, 6] (label, difficult, box) of a few images: near-hits
    of the ground truths (some with another label, some twice on one box), boxes poking out of
    [0, 1] (clipped by the op), and stray boxes of classes the image lacks. Scores are distinct."""
    dets, gts = [], []
    for n_gt, n_det in zip(gts_per_image, dets_per_image):
        g = []
        for _ in range(n_gt):
            x1, y1 = rng.uniform(-0.05, 0.7, 2)
            w, h = rng.uniform(0.15, 0.4, 2)
            g.append([rng.randint(1, C), float(rng.rand() < 0.3), x1, y1, x1 + w, y1 + h])
        d = []
        while len(d) < n_det:
            if rng.rand() < 0.75:
                row = g[rng.randint(len(g))]
                label = row[0] if rng.rand() < 0.85 else rng.randint(0, C)
                box = np.asarray(row[2:]) + rng.uniform(-0.08, 0.08, 4)
            else:
                label = rng.randint(0, C)
                x1, y1 = rng.uniform(0, 0.8, 2)
                box = np.asarray([x1, y1, x1 + 0.2, y1 + 0.25])
            d.append([label, rng.rand(), *box])
        dets.append(np.asarray(d, np.float32).reshape(-1, 6))
        gts.append(np.asarray(g, np.float32))
    return (np.concatenate(dets), [len(d) for d in dets], np.concatenate(gts), [len(g) for g in gts])


def _feeds(det, dl, gt, gl, with_difficult=True):
    ours = {"det": _lod(det, dl), "gl": _lod(gt[:, :1].astype(np.int32), gl), "gb": _lod(gt[:, 2:], gl)}
    theirs = {"det": det, "gl": gt[:, :1].astype(np.int32), "gb": gt[:, 2:]}
    lods = {"det": [dl], "gl": [gl], "gb": [gl]}
    if with_difficult:
        ours["gd"] = _lod(gt[:, 1:2].astype(np.int32), gl)
        theirs["gd"] = gt[:, 1:2].astype(np.int32)
        lods["gd"] = [gl]
    return ours, theirs, lods


def _inputs(with_difficult=True):
    det = L.data("det", [6], dtype="float32", lod_level=1)
    gl = L.data("gl", [1], dtype="int32", lod_level=1)
    gb = L.data("gb", [4], dtype="float32", lod_level=1)
    gd = L.data("gd", [1], dtype="int32", lod_level=1) if with_difficult else None
    return det, gl, gb, gd


def _state_rows(value):
    """Our accumulated-rows state (ops/detection_map.py's layout) as Paddle's (rows, offsets)."""
    value = np.asarray(value)
    offsets = value[-C - 1:, 0].astype(np.int64)
    return value[:offsets[-1]], offsets.tolist()


class _Runs:
    """One program run batch after batch in fluidjax and, serialized, in Paddle on one scope each."""

    def __init__(self, main, startup):
        import paddle
        import paddle_oracle as po

        self.po, self.main, self.prog = po, main, main.serialize()
        self.exe = fluid.Executor(fluid.CPUPlace())
        self.exe.run(startup)
        self.pscope = paddle.static.Scope()
        po.run_lod(startup.serialize(), {}, [], scope=self.pscope)

    def run(self, batch, fetch, with_difficult=True):
        ours_feed, feed, lods = _feeds(*batch, with_difficult=with_difficult)
        ours = self.exe.run(self.main, feed=ours_feed, fetch_list=fetch)
        theirs = self.po.run(self.prog, feed, [v.name for v in fetch], scope=self.pscope, lods=lods)
        return ours, theirs

    def reset_paddle(self, reset_program):
        self.po.run_lod(reset_program.serialize(), {}, [], scope=self.pscope)


# (integral with evaluate_difficult on, and 11point without a difficult column, are in the reset
# and evaluator tests below)
@pytest.mark.parametrize("ap_version,evaluate_difficult", [("integral", False), ("11point", True), ("11point", False)])
def test_detection_map_accumulates_like_paddle(ap_version, evaluate_difficult):
    """DetectionMAP's two detection_map ops (the batch's, the accumulating one) over 3 batches: both
    mAPs, the positive counts and the accumulated rows with their per-class LoD equal Paddle's."""
    rng = np.random.RandomState({"integral": 1, "11point": 2}[ap_version] + 10 * evaluate_difficult)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.scope_guard(fluid.Scope()), fluid.program_guard(main, startup):
        metric = fluid.metrics.DetectionMAP(*_inputs(), class_num=C, overlap_threshold=0.5,
                                            evaluate_difficult=evaluate_difficult, ap_version=ap_version)
        cur, accum = metric.get_map_var()
        states = [v for v in main.list_vars() if v.persistable and "accum_" in v.name]
        runs = _Runs(main, startup)
        seen = set()
        for _ in range(3):
            ours, theirs = runs.run(_batch(rng), [cur, accum])
            np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-6, atol=1e-7)
            assert ours[1].shape == (1,) and 0 < float(ours[1][0]) < 1
            seen.add(round(float(ours[1][0]), 6))
            # The state itself: Paddle's positive counts, and its rows and per-class LoD.
            for var in states:
                mine = fluid.global_scope().find_var(var.name).get_tensor()
                paddles = runs.pscope.find_var(var.name).get_tensor()
                if var.name.endswith("pos_count"):
                    np.testing.assert_array_equal(np.asarray(mine), np.array(paddles))
                else:
                    rows, offsets = _state_rows(mine)
                    assert offsets == list(paddles.lod()[0])
                    np.testing.assert_array_equal(rows, np.array(paddles))
        assert len(seen) == 3          # the accumulated mAP moved with every batch


def test_batch_outputs_match_paddle_rows_lod_and_counts():
    """The op alone, without state: AccumPosCount, and AccumTruePos / AccumFalsePos as LoD tensors
    (Paddle's rows, one sequence per class), with 5-column labels (no difficult flag)."""
    rng = np.random.RandomState(5)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        det, gl, gb, _ = _inputs(with_difficult=False)
        label = L.concat([L.cast(gl, "float32"), gb], axis=1)
        block = main.global_block()
        outs = {slot: block.create_var(f"dm_{slot}", (), dtype, stop_gradient=True)
                for slot, dtype in (("MAP", "float32"), ("AccumPosCount", "int32"), ("AccumTruePos", "float32"),
                                    ("AccumFalsePos", "float32"))}
        block.append_op("detection_map", inputs={"DetectRes": det, "Label": label}, outputs=outs,
                        attrs={"class_num": C, "overlap_threshold": 0.3, "ap_type": "integral"})
    import paddle_oracle as po

    batch = _batch(rng, gts_per_image=(3, 1, 2, 2), dets_per_image=(6, 2, 0, 5))
    ours_feed, feed, lods = _feeds(*batch, with_difficult=False)
    fetch = list(outs.values())
    ours = fluid.Executor().run(main, feed=ours_feed, fetch_list=fetch, return_numpy=False)
    theirs = po.run_lod(main.serialize(), feed, [v.name for v in fetch], lods=lods)
    for mine, paddles in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(mine), np.array(paddles), rtol=1e-6, atol=1e-7)
    for k in (2, 3):
        assert ours[k].lod() == [list(theirs[k].lod()[0])] and len(theirs[k].lod()[0]) == C + 1
    assert 0 < float(np.asarray(ours[0])[0]) < 1


def test_reset_starts_the_accumulation_over():
    rng = np.random.RandomState(7)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.scope_guard(fluid.Scope()), fluid.program_guard(main, startup):
        metric = fluid.metrics.DetectionMAP(*_inputs(), class_num=C, ap_version="integral")
        cur, accum = metric.get_map_var()
        runs = _Runs(main, startup)
        first = [runs.run(_batch(rng), [cur, accum]) for _ in range(2)]
        assert not np.allclose(first[1][0][0], first[1][0][1])      # accumulated != the batch's
        reset_program = fluid.Program()
        metric.reset(runs.exe, reset_program)
        runs.reset_paddle(reset_program)
        ours, theirs = runs.run(_batch(rng), [cur, accum])
        np.testing.assert_allclose(ours[1], ours[0], rtol=1e-7)      # starts over: only this batch
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-6, atol=1e-7)
        ours, theirs = runs.run(_batch(rng), [cur, accum])
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-6, atol=1e-7)
        assert not np.allclose(ours[1], ours[0])
        # A ground-truth label past class_num fails the run (Paddle would count it in this batch's
        # mAP and drop it from the state), and the state is kept as it was.
        det_rows, dl, gt, gls = _batch(rng)
        gt[1, 0] = C
        before = np.asarray(fluid.global_scope().find_var(metric.has_state.name).get_tensor()).copy()
        with pytest.raises(fluid.BoundExceededError, match="class_num"):
            runs.exe.run(main, feed=_feeds(det_rows, dl, gt, gls)[0], fetch_list=[cur, accum])
        ours = runs.exe.run(main, feed=_feeds(*_batch(rng))[0], fetch_list=[cur, accum])
        assert before[0] == 1 and 0 < float(ours[1][0]) < 1


def test_evaluator_detection_map_11point_without_difficult_matches_paddle():
    rng = np.random.RandomState(11)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.scope_guard(fluid.Scope()), fluid.program_guard(main, startup):
        with pytest.warns(Warning, match="deprecated"):
            evaluator = fluid.evaluator.DetectionMAP(*_inputs(with_difficult=False), class_num=C,
                                                     ap_version="11point")
        cur, accum = evaluator.get_map_var()
        assert len(evaluator.states) == 3
        runs = _Runs(main, startup)
        for _ in range(2):
            ours, theirs = runs.run(_batch(rng), [cur, accum], with_difficult=False)
            np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
        reset_program = fluid.Program()
        evaluator.reset(runs.exe, reset_program)
        runs.reset_paddle(reset_program)
        ours, theirs = runs.run(_batch(rng), [cur, accum], with_difficult=False)
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(ours[1], ours[0], rtol=1e-7)


@pytest.mark.slow
def test_room_of_the_accumulated_rows_grows_and_then_stays():
    """Batches of 300 detections: the state starts with a room of 1024 rows; the 4th batch passes
    it, the run is done again with a room of 2048, and later runs compile nothing new."""
    rng = np.random.RandomState(13)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.scope_guard(fluid.Scope()), fluid.program_guard(main, startup):
        metric = fluid.metrics.DetectionMAP(*_inputs(), class_num=C, evaluate_difficult=True)
        cur, accum = metric.get_map_var()
        state = next(v for v in main.list_vars() if v.name.endswith("accum_true_pos"))
        runs = _Runs(main, startup)
        rooms = []
        for i in range(6):
            ours, theirs = runs.run(_batch(rng, gts_per_image=(20,), dets_per_image=(300,)), [cur, accum])
            np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
            rooms.append(np.asarray(fluid.global_scope().find_var(state.name).get_tensor()).shape[0] - C - 1)
            if i == 4:
                traces = runs.exe.trace_count
        assert rooms == [1024] * 3 + [2048] * 3
        assert runs.exe.trace_count == traces
        rows, offsets = _state_rows(fluid.global_scope().find_var(state.name).get_tensor())
        assert offsets[-1] == rows.shape[0] == 1800


def test_bad_inputs_fail_clearly():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        det, gl, gb, gd = _inputs()
        with pytest.raises(ValueError, match="class_num"):
            fluid.metrics.DetectionMAP(det, gl, gb, gd)
        with pytest.raises(ValueError, match="ap_version"):
            fluid.metrics.DetectionMAP(det, gl, gb, gd, class_num=C, ap_version="voc")
        narrow = L.data("narrow", [5], dtype="float32", lod_level=1)
        with pytest.raises(ShapeError, match="DetectRes"):
            fluid.metrics.DetectionMAP(narrow, gl, gb, gd, class_num=C)
