"""Op-table rows of the ops Fluid 1.8's layers needed and earlier work had dropped: ``stanh`` and
``soft_relu`` (activations), ``auc`` (the metric behind ``layers.auc``), ``warpctc`` (the CTC
loss) and ``ctc_align`` (``layers.ctc_greedy_decoder``'s collapse), in both of Paddle's layouts:
LoD sequences and padded tensors with lengths. All checked against Paddle 2.6.2's CPU kernels;
``warpctc``'s gradient also against Paddle's ``warpctc_grad`` and finite differences (float64)."""

import numpy as np

from . import Case, away_from_zero, rand, randint

_rng = np.random.default_rng(20261126)

# CTC: 5 classes (blank 0); three sequences of logits 4, 6 and 3 steps, labels of 2, 3 and 1 tokens
# (every label fits its sequence, repeats included: 1, 1 needs a blank between).
_LOGIT_LENS = [[4, 6, 3]]
_LABEL_LENS = [[2, 3, 1]]
_LABELS = np.array([[1], [1], [2], [3], [2], [4]], "int32")


def _padded(lod_logits):
    """The same sequences as [max_time, batch, classes] logits and [batch, max_label] labels."""
    lens, label_lens = _LOGIT_LENS[0], _LABEL_LENS[0]
    logits = np.zeros((max(lens), len(lens), lod_logits.shape[1]), lod_logits.dtype)
    labels = np.zeros((len(lens), max(label_lens)), "int32")
    start = label_start = 0
    for b, (n, m) in enumerate(zip(lens, label_lens)):
        logits[:n, b] = lod_logits[start:start + n]
        labels[b, :m] = _LABELS[label_start:label_start + m, 0]
        start, label_start = start + n, label_start + m
    return logits, labels


_LOGITS32 = rand(13, 5)
_LOGITS64 = rand(13, 5, dtype="float64")
_PADDED64, _PADDED_LABELS = _padded(_LOGITS64)

# ctc_align: ids with repeats and blanks (0) across sequence boundaries.
_IDS = np.array([[0], [1], [1], [0], [2], [2], [2], [3], [0], [3], [0], [0], [4]], "int64")
_IDS_LENS = [[6, 4, 3]]
_PADDED_IDS = np.array([[0, 1, 1, 0, 2, 2], [2, 3, 0, 3, 1, 1], [0, 0, 4, 4, 4, 0]], "int64")


def _auc_case(slide_steps, name, steps_done=0, dtype="float32"):  # Paddle has no float64 kernel
    n = 7
    size = (1 + slide_steps) * (n + 1) + 1 if slide_steps else n + 1
    stat_pos = _rng.integers(0, 5, size).astype("int64")
    stat_neg = _rng.integers(0, 5, size).astype("int64")
    if slide_steps:  # the window sums and the step counter as the kernel keeps them
        buckets = n + 1
        for stat in (stat_pos, stat_neg):
            stat[slide_steps * buckets:(slide_steps + 1) * buckets] = stat[:slide_steps * buckets].reshape(
                slide_steps, buckets).sum(0)
            stat[-1] = steps_done
    shape = (size,) if slide_steps else (1, size)
    predict = _rng.uniform(0, 1, (10, 1)).astype(dtype)
    return Case("auc", {"Predict": np.concatenate([1 - predict, predict], 1), "Label": randint(10, 1, high=2),
                        "StatPos": stat_pos.reshape(shape), "StatNeg": stat_neg.reshape(shape)},
                {"num_thresholds": n, "slide_steps": slide_steps}, outputs=("AUC", "StatPosOut", "StatNegOut"),
                batch_dims=("Predict", "Label"), name=name)


CASES = [
    Case("stanh", {"X": rand(3, 4)}),
    Case("stanh", {"X": rand(3, 4, dtype="float64")}, {"scale_a": 0.5, "scale_b": 2.0}, name="scales-f64"),
    Case("soft_relu", {"X": away_from_zero(3, 4) * 3}, {"threshold": 2.0}),
    Case("soft_relu", {"X": rand(3, 4, dtype="float64")}, name="f64"),
    _auc_case(0, "global"),
    _auc_case(1, "one-step"),
    _auc_case(3, "three-steps-window", steps_done=5),
    Case("warpctc", {"Logits": _LOGITS32, "Label": _LABELS}, outputs=("Loss",), no_grad_outputs=("WarpCTCGrad",),
         lod={"Logits": _LOGIT_LENS, "Label": _LABEL_LENS}, grad=("Logits",), name="lod"),
    # norm_by_times divides the gradient (not the loss) by the length, as Paddle's kernel: float32,
    # so that the row is compared with Paddle's warpctc_grad and not with finite differences
    Case("warpctc", {"Logits": _LOGITS32, "Label": _LABELS}, {"norm_by_times": True, "blank": 0},
         outputs=("Loss",), lod={"Logits": _LOGIT_LENS, "Label": _LABEL_LENS}, grad=("Logits",),
         name="lod-norm-by-times"),
    Case("warpctc", {"Logits": _LOGITS64, "Label": _LABELS}, outputs=("Loss",),
         lod={"Logits": _LOGIT_LENS, "Label": _LABEL_LENS}, grad=("Logits",), name="lod-f64"),
    Case("warpctc", {"Logits": _PADDED64, "Label": _PADDED_LABELS,
                     "LogitsLength": np.array(_LOGIT_LENS[0], "int64"),
                     "LabelLength": np.array(_LABEL_LENS[0], "int64")},
         outputs=("Loss",), grad=("Logits",), batch_dims=(), name="padded-f64"),
    Case("warpctc", {"Logits": rand(13, 5), "Label": _LABELS + 0}, {"blank": 4},
         outputs=("Loss",), lod={"Logits": _LOGIT_LENS, "Label": _LABEL_LENS}, grad=("Logits",), name="blank-4"),
    Case("ctc_align", {"Input": _IDS}, outputs=("Output",), lod={"Input": _IDS_LENS}, grad=()),
    Case("ctc_align", {"Input": _IDS}, {"merge_repeated": False, "blank": 2}, outputs=("Output",),
         lod={"Input": _IDS_LENS}, grad=(), name="no-merge-blank-2"),
    Case("ctc_align", {"Input": _PADDED_IDS, "InputLength": np.array([[6], [5], [4]], "int64")},
         {"padding_value": -1}, outputs=("Output", "OutputLength"), grad=(), batch_dims=(), name="padded"),
]
