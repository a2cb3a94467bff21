"""``detection_map``: Paddle's detection mean average precision (mAP), for one mini-batch or
accumulated over mini-batches (Fluid 1.x's ``fluid.metrics.DetectionMAP`` and
``fluid.evaluator.DetectionMAP`` build it).

The whole op runs inside the compiled step. A batch's detections are matched to the ground truths
with one [M, G] overlap matrix (M detection rows, G ground-truth rows, both padded LoD inputs) and a
rank per detection; its (score, flag) rows are at most M, so the batch part has a static size.

The accumulated rows (``TruePos`` / ``FalsePos`` in, ``AccumTruePos`` / ``AccumFalsePos`` out)
grow with every batch. They are kept as state with a *room*: a static row capacity fixed when the
step compiles, checked in the step, and grown by the Executor the way a tensor array's room is
(``checks.grow_rooms``): a run whose rows would pass it commits nothing and is done again, on the
same state, with the room grown to the next power of two of what it needed (at least doubled);
the room then stays for later runs, so a pass over a data set compiles the step O(log rows)
times (twice per growth: the run done again reads the old room and writes the new one). The room
starts at ``INITIAL_ROOM`` = 1024 rows, or the room of the state read if larger (the metric's
startup program writes an empty state of that room, so the first run compiles what later runs
use), and is capped by ``FLAGS_max_array_room`` (past it: ``BoundExceededError``). Two alternatives were rejected: per-class score histograms (not Paddle's
mAP: scores are continuous and the precision/recall curve depends on their exact order) and host
computation (fluidjax's host ops run before the step, while a detector's ``DetectRes`` is
computed inside it).

Representation of the accumulated rows:

- a *persistable* output (the metric's state) is a plain array [room + class_num + 1, 2]: its
  first rows are exactly Paddle's rows (score, flag), grouped by class in class order; the rows up
  to ``room`` are zero padding; the last ``class_num + 1`` rows hold Paddle's LoD (the per-class
  offsets) in column 0. (A scope cannot hold a LoD value between runs, so the count travels in
  the array.) ``TruePos`` / ``FalsePos`` inputs are read in that layout (or as LoD values); a
  zero array [rows + class_num + 1, 2] (the metric's startup program writes one of
  ``INITIAL_ROOM`` rows) is an empty state.
- a non-persistable output is a LoD value whose rows are Paddle's and whose one LoD level is the
  per-class offsets: a fetch returns Paddle's [Ntp, 2] array.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir.registry import op
from ...ir.shape import InferShapeContext
from ..checks import bound_checked, room_of
from ..lod_value import LoDValue
from ..lower import lod_aware
from ._errors import _fail
from .detection_target import _rows_and_offsets

# The room of the accumulated rows before any run needed more: the metric's startup program writes
# an empty state of this room, so the first run compiles the step with the shapes later runs have.
INITIAL_ROOM = 1024
# An offset held in column 0 of a float32 state must be exact.
_FLOAT32_EXACT = 1 << 24


def _persistable(op_, name: str) -> bool:
    var = op_.block.find_var(name)
    return bool(var is not None and var.persistable)


def _detection_map_shape(ctx: InferShapeContext) -> None:
    det, label = ctx.input("DetectRes"), ctx.input("Label")
    ctx.check(det.ndim == 2 and det.shape[1] in (6, -1),
              f"DetectRes must be [M, 6] rows (label, score, xmin, ymin, xmax, ymax), got {det.shape}")
    ctx.check(label.ndim == 2 and label.shape[1] in (5, 6, -1),
              f"Label must be [G, 6] rows (label, difficult, xmin, ymin, xmax, ymax) or [G, 5] rows "
              f"(label, xmin, ymin, xmax, ymax), got {label.shape}")
    ctx.check(det.dtype in ("float32", "float64"), f"DetectRes must be float32 or float64, got {det.dtype}")
    class_num = ctx.attr("class_num")
    ctx.check(isinstance(class_num, (int, np.integer)) and int(class_num) > 0,
              f"class_num must be a positive int, got {class_num!r}")
    ap_type = ctx.attr("ap_type")
    ctx.check(ap_type in ("integral", "11point"), f"ap_type must be 'integral' or '11point', got {ap_type!r}")
    if ctx.input("PosCount") is not None:
        ctx.check(ctx.input("TruePos") is not None and ctx.input("FalsePos") is not None,
                  "PosCount is given, so TruePos and FalsePos must be too (Paddle's rule)")
    ctx.set_output("MAP", (1,), det.dtype, 0)
    ctx.set_output("AccumPosCount", (int(class_num), 1), "int32", 0)
    for slot in ("AccumTruePos", "AccumFalsePos"):
        names = ctx.op.outputs.get(slot) or []
        keeps = bool(names) and _persistable(ctx.op, names[0])
        ctx.set_output(slot, (-1, 2), det.dtype, 0 if keeps else 1)


def _owner(offsets, rows: int):
    """Each of ``rows`` rows' sequence: how many of ``offsets[1:]`` are <= its index (past the last
    real row: the number of sequences). A scatter and a running sum (``searchsorted`` compiles a
    loop, several times slower to compile)."""
    marks = jnp.zeros((rows + 1,), jnp.int32).at[jnp.clip(offsets[1:], 0, rows)].add(1)
    return jnp.cumsum(marks)[:rows]


def _rows_of(offsets, rows: int):
    """Each row's sequence (image) index and whether it is a real row."""
    return _owner(offsets, rows), jnp.arange(rows, dtype=jnp.int32) < offsets[-1]


def _stable_order(group, key):
    """The permutation sorting rows by ``group``, then ``key``, ties in row order."""
    index = jnp.arange(group.shape[0], dtype=jnp.int32)
    return lax.sort((group, key, index), num_keys=2, is_stable=True)[2]


def _overlaps(pred, gt):
    """Paddle's Jaccard overlap of every prediction [M, 4] with every ground truth [G, 4]: 0 where
    the boxes are apart, else intersection / (area1 + area2 - intersection), in that order."""
    px1, py1, px2, py2 = (pred[:, k][:, None] for k in range(4))
    gx1, gy1, gx2, gy2 = (gt[:, k][None, :] for k in range(4))
    apart = (gx1 > px2) | (gx2 < px1) | (gy1 > py2) | (gy2 < py1)
    inter = (jnp.minimum(px2, gx2) - jnp.maximum(px1, gx1)) * (jnp.minimum(py2, gy2) - jnp.maximum(py1, gy1))
    area1 = (px2 - px1) * (py2 - py1)
    area2 = (gx2 - gx1) * (gy2 - gy1)
    return jnp.where(apart, jnp.zeros((), pred.dtype), inter / (area1 + area2 - inter))


def _batch_rows(ctx, class_num: int, dtype):
    """This batch's positives per class and its (score, true-positive flag) rows in Paddle's order
    (by class; in a class by image; in an image, a class with ground truths sorted by score,
    highest first, one without in input order), padded to M: (positives [C], kept count K, and per
    sorted row [M] its class (class_num past K), score and true-positive flag)."""
    det_v, lab_v = ctx.input("DetectRes"), ctx.input("Label")
    if lab_v.__class__ is not LoDValue:
        _fail(ctx, "Label must be a LoD tensor (one sequence of ground-truth rows per image)")
    det, det_off = _rows_and_offsets(det_v)
    lab, lab_off = _rows_and_offsets(lab_v)
    if det_off.shape[0] != lab_off.shape[0]:
        _fail(ctx, f"Label has {lab_off.shape[0] - 1} images and DetectRes {det_off.shape[0] - 1}: the batch sizes "
                   "must be the same")
    n_img = det_off.shape[0] - 1
    det, lab = det.astype(dtype), lab.astype(dtype)
    if det.shape[0] == 0:                                 # no rows at all: one padding row
        det = jnp.zeros((1, det.shape[1]), dtype)
    if lab.shape[0] == 0:
        lab = jnp.zeros((1, lab.shape[1]), dtype)
    m, g = det.shape[0], lab.shape[0]
    det_img, det_real = _rows_of(det_off, m)
    gt_img, gt_real = _rows_of(lab_off, g)

    det_label = det[:, 0].astype(jnp.int32)                       # C++'s int(): towards zero
    score = det[:, 1]
    pred = jnp.clip(det[:, 2:6], 0.0, 1.0)
    gt_label = lab[:, 0].astype(jnp.int32)
    if lab.shape[1] == 6:
        difficult = ~(jnp.abs(lab[:, 1]).astype(jnp.float64) < 1e-6)
        gt_box = lab[:, 2:6]
    else:
        difficult = jnp.zeros((g,), bool)
        gt_box = lab[:, 1:5]

    gt_in = (gt_label >= 0) & (gt_label < class_num)
    if ctx.checks is not None:
        bad = gt_real & ~gt_in
        ctx.checks.check_bound(ctx.op, ~jnp.any(bad), jnp.where(jnp.any(bad), gt_label[jnp.argmax(bad)], 0),
                               {"kind": "bound", "bound": class_num,
                                "message": f"a ground-truth label (Label[:, 0]) lies outside [0, class_num = "
                                           f"{class_num})"})
    gt_ok = gt_real & gt_in
    gt_cls = jnp.where(gt_ok, gt_label, 0)
    counted = gt_ok & (True if ctx.attr("evaluate_difficult") else ~difficult)
    positives = jnp.zeros((class_num,), jnp.int32).at[gt_cls].add(counted.astype(jnp.int32))
    has_gt = jnp.zeros((n_img, class_num), bool).at[jnp.clip(gt_img, 0, max(n_img - 1, 0)), gt_cls].max(gt_ok)

    det_in = det_real & (det_label >= 0) & (det_label < class_num)
    det_cls = jnp.where(det_in, det_label, 0)
    img = jnp.clip(det_img, 0, max(n_img - 1, 0))
    grouped = det_in & has_gt[img, det_cls]              # a class with ground truths in the image

    same = (gt_ok[None, :] & (gt_img[None, :] == det_img[:, None]) & (gt_cls[None, :] == det_cls[:, None]))
    iou = _overlaps(pred, gt_box)
    masked = jnp.where(same & (iou > -1), iou, -jnp.inf)
    best = jnp.argmax(masked, axis=1)                    # the first of the largest overlaps
    best_overlap = jnp.max(masked, axis=1)
    threshold = np.asarray(np.float32(ctx.attr("overlap_threshold")), dtype)
    matched = grouped & (best_overlap > threshold)
    if ctx.attr("evaluate_difficult"):
        eligible = matched
    else:
        eligible = matched & ~difficult[best]
    kept = det_in & ~(matched & ~eligible)               # a match of a difficult box adds no row

    index = jnp.arange(m, dtype=jnp.int32)
    group = jnp.where(kept, det_cls, class_num) * (n_img + 1) + det_img
    order = _stable_order(group, jnp.where(grouped, -score, jnp.zeros((), dtype)))
    rank = jnp.zeros((m,), jnp.int32).at[order].set(index)
    first = jnp.full((g,), m, jnp.int32).at[best].min(jnp.where(eligible, rank, m))
    true_pos = eligible & (rank == first[best])
    return (positives, jnp.sum(kept.astype(jnp.int32)), jnp.where(kept, det_cls, class_num)[order],
            score[order], true_pos[order])


def _state_rows(ctx, slot: str, class_num: int, dtype):
    """(rows [R, 2], offsets [C + 1]) of a TruePos / FalsePos input (see the module docstring)."""
    value = ctx.input(slot)
    if value.__class__ is LoDValue:
        rows, offsets = value.data, value.offsets[-1].astype(jnp.int32)
    else:
        if value.ndim != 2 or value.shape[1] != 2 or value.shape[0] < class_num + 1:
            _fail(ctx, f"{slot} must be the op's own accumulated state: [rows + class_num + 1, 2] with the per-class "
                       f"offsets in the last class_num + 1 rows; got shape {tuple(value.shape)}")
        rows, offsets = value[:value.shape[0] - class_num - 1], value[-class_num - 1:, 0].astype(jnp.int32)
    if offsets.shape[0] != class_num + 1:
        _fail(ctx, f"{slot} has {offsets.shape[0] - 1} classes in its LoD, class_num is {class_num}")
    return rows.astype(dtype), offsets


def _merge(in_rows, in_off, batch_cls, batch_score, batch_flag, k, capacity: int, class_num: int, dtype):
    """Paddle's accumulated rows: per class, the state's rows, then this batch's; padded to
    ``capacity`` rows. (rows [capacity, 2], offsets [C + 1])."""
    counts = jnp.zeros((class_num + 1,), jnp.int32).at[batch_cls].add(1)[:class_num]
    before = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(counts)])
    r_in, m = in_rows.shape[0], batch_cls.shape[0]
    j = jnp.arange(r_in, dtype=jnp.int32)
    cls_in = jnp.clip(_owner(in_off, r_in), 0, class_num - 1)
    dest_in = jnp.where(j < in_off[-1], j + before[cls_in], capacity)
    i = jnp.arange(m, dtype=jnp.int32)
    dest_b = jnp.where(i < k, in_off[jnp.clip(batch_cls, 0, class_num - 1) + 1] + i, capacity)
    rows = jnp.zeros((capacity, 2), dtype)
    rows = rows.at[dest_in].set(in_rows, mode="drop")
    rows = rows.at[dest_b].set(jnp.stack([batch_score, batch_flag.astype(dtype)], axis=1), mode="drop")
    return rows, in_off + before


def _class_sums(rows, offsets, class_num: int):
    """Per class, the rows sorted by score (highest first, stable) and the running sum of their
    flags: (sums [R], class of each sorted row [R], real [R])."""
    r = rows.shape[0]
    pos = jnp.arange(r, dtype=jnp.int32)
    cls = _owner(offsets, r)
    order = _stable_order(cls, -rows[:, 0])
    real = pos < offsets[-1]
    flags = jnp.where(real, rows[order, 1].astype(jnp.int64), 0)
    running = jnp.cumsum(flags)
    sorted_cls = jnp.clip(cls[order], 0, class_num - 1)
    start = offsets[sorted_cls]
    base = jnp.where(start > 0, running[jnp.maximum(start - 1, 0)], 0)
    return running - base, sorted_cls, real


def _average_precisions(tp_rows, tp_off, positives, class_num: int, ap_type: str, dtype):
    """Each class's AP from its accumulated rows (Paddle's CalcMAP, per class). The false-positive
    rows are the true-positive rows with the flags flipped (this op always writes them so), so the
    false positives up to a row are its rank in the class, plus one, less the true positives."""
    tp_sum, cls, real = _class_sums(tp_rows, tp_off, class_num)
    r = tp_rows.shape[0]
    pos = jnp.arange(r, dtype=jnp.int32)
    within = pos - tp_off[cls]                                   # rank in its class
    fp_sum = within.astype(jnp.int64) + 1 - tp_sum
    tp_t = tp_sum.astype(dtype)
    precision = tp_t / (tp_sum + fp_sum).astype(dtype)
    recall = tp_t / positives[cls].astype(dtype)
    if ap_type == "11point":
        levels = np.arange(11) / 10.0                            # Paddle compares in double
        reached = real[:, None] & ~(recall.astype(jnp.float64)[:, None] < levels[None, :])
        best = jnp.zeros((class_num, 11), dtype).at[cls].max(jnp.where(reached, precision[:, None], 0))
        return jnp.sum(best.astype(jnp.float64)[:, ::-1] / 11.0, axis=1)
    # Paddle's running previous recall is a float (``float prev_recall``), its sum a float too.
    previous = jnp.concatenate([jnp.zeros((1,), dtype), recall[:-1]]).astype(jnp.float32).astype(dtype)
    previous = jnp.where(within == 0, jnp.zeros((), dtype), previous)
    step = jnp.abs(recall - previous)
    term = jnp.where(real & (step.astype(jnp.float64) > 1e-6), precision * step, 0).astype(jnp.float64)
    return jnp.zeros((class_num,), jnp.float64).at[cls].add(term).astype(jnp.float32).astype(jnp.float64)


def _output_rows(ctx, slot: str, rows, offsets, class_num: int):
    names = ctx.op.outputs.get(slot) or []
    if names and _persistable(ctx.op, names[0]):
        header = jnp.zeros((class_num + 1, 2), rows.dtype).at[:, 0].set(offsets.astype(rows.dtype))
        return jnp.concatenate([rows, header])
    return LoDValue(rows, (offsets,))


@op("detection_map", inputs="DetectRes Label HasState? PosCount? TruePos? FalsePos?",
    outputs="AccumPosCount AccumTruePos AccumFalsePos MAP",
    attrs={"class_num": 0, "background_label": 0, "overlap_threshold": 0.5, "evaluate_difficult": True,
           "ap_type": "integral"},
    infer_shape=_detection_map_shape, grad=None)
def detection_map(ctx):
    """Detection mAP (Paddle's detection_map). Per image and class, detections (boxes clipped to
    [0, 1]) are taken by score, highest first; each is matched to the ground truth of its class it
    overlaps most (Jaccard): above ``overlap_threshold`` and not yet matched, a true positive; above
    and already matched, a false positive; above on a difficult box with ``evaluate_difficult``
    off, ignored; else a false positive. A class's AP comes from its (score, flag) rows sorted by
    score: ``integral`` sums precision · Δrecall where recall moves by more than 1e-6, ``11point``
    averages the best precision at recall >= 0, 0.1, ..., 1. MAP is the mean AP over the classes
    with positives (with state: every class whose positive count is not ``background_label``,
    Paddle's comparison; a class without detections counts 0).

    With ``HasState`` [1] non-zero and ``PosCount`` / ``TruePos`` / ``FalsePos`` given, this
    batch is added to those accumulated rows and counts (``HasState`` 0 ignores them).

    How the accumulated rows are held, and the room their capacity grows by, is in the module
    docstring. Deliberate differences from Paddle: a ground-truth label outside [0, class_num)
    fails the run (``BoundExceededError``; Paddle counts it in this batch's mAP and drops it from
    the state); detections of one image and class with equal scores are taken in input order
    (Paddle's ``std::sort`` leaves their order unspecified); the per-class AP sums are added in
    float64, not sequentially in float32 (the last bits of MAP may differ).
    """
    class_num = int(ctx.attr("class_num"))
    if class_num <= 0:
        _fail(ctx, f"class_num must be positive, got {class_num}")
    dtype = jnp.dtype(ctx.input("DetectRes").dtype)
    ap_type = ctx.attr("ap_type")
    positives, k, b_cls, b_score, b_tp = _batch_rows(ctx, class_num, dtype)
    m = b_cls.shape[0]

    stateful = ctx.has_input("HasState") and ctx.has_input("PosCount")
    if stateful:
        use = (ctx.input("HasState").reshape(-1)[0] != 0)
        count_in = ctx.input("PosCount").reshape(-1)
        if count_in.shape[0] < class_num:
            _fail(ctx, f"PosCount holds {count_in.shape[0]} counts, class_num is {class_num}")
        pos_in = jnp.where(use, count_in[:class_num].astype(jnp.int32), 0)
        tp_in, tp_in_off = _state_rows(ctx, "TruePos", class_num, dtype)
        fp_in, fp_in_off = _state_rows(ctx, "FalsePos", class_num, dtype)
        tp_in_off, fp_in_off = (jnp.where(use, o, 0) for o in (tp_in_off, fp_in_off))
        capacity = max(room_of(ctx.op, INITIAL_ROOM), tp_in.shape[0], fp_in.shape[0])
        if dtype == jnp.float32 and capacity >= _FLOAT32_EXACT:
            _fail(ctx, f"the accumulated rows need a room of {capacity}, past what a float32 state holds exactly "
                       f"({_FLOAT32_EXACT}); use float64 detections")
        needed = jnp.maximum(tp_in_off[-1], fp_in_off[-1]) + k
        if ctx.checks is not None:
            ctx.checks.check_bound(ctx.op, needed <= capacity, needed,
                                   {"kind": "room", "owner": ctx.op, "room": capacity, "bound": capacity,
                                    "array": ctx.op.outputs["AccumTruePos"][0],
                                    "what": "the accumulated detections need {needed} rows, past "
                                            "FLAGS_max_array_room = {cap}"})
        present = use | (positives > 0)
        positives = positives + pos_in
    else:
        tp_in = fp_in = jnp.zeros((0, 2), dtype)
        tp_in_off = fp_in_off = jnp.zeros((class_num + 1,), jnp.int32)
        capacity = m
        present = positives > 0

    tp_rows, tp_off = _merge(tp_in, tp_in_off, b_cls, b_score, b_tp, k, capacity, class_num, dtype)
    fp_rows, fp_off = _merge(fp_in, fp_in_off, b_cls, b_score, ~b_tp, k, capacity, class_num, dtype)
    ap = _average_precisions(tp_rows, tp_off, positives, class_num, ap_type, dtype)
    counted = present & (positives != int(ctx.attr("background_label")))
    n = jnp.sum(counted.astype(jnp.int32))
    total = jnp.sum(jnp.where(counted, ap, 0.0))
    mean = jnp.where(n > 0, total / jnp.maximum(n, 1), 0.0).astype(dtype)
    return {"MAP": mean.reshape(1), "AccumPosCount": positives.reshape(class_num, 1).astype(jnp.int32),
            "AccumTruePos": _output_rows(ctx, "AccumTruePos", tp_rows, tp_off, class_num),
            "AccumFalsePos": _output_rows(ctx, "AccumFalsePos", fp_rows, fp_off, class_num)}


lod_aware("detection_map")
bound_checked("detection_map")
