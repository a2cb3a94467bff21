"""Op-table rows: softmax_with_cross_entropy, cross_entropy2, huber_loss,
sigmoid_cross_entropy_with_logits, accuracy."""

import numpy as np

from . import Case, positive, rand, randint


def _probs(n, c, dtype="float32"):
    p = positive(n, c, dtype="float64")
    return (p / p.sum(-1, keepdims=True)).astype(dtype)


def _with_ignored(label, value=-100):
    label = label.copy()
    label[1] = value
    return label


def _sigmoid_ce_pos_weight_ref(inputs, attrs):
    x, label, pw = (np.asarray(inputs[k], np.float64) for k in ("X", "Label", "pos_weight"))
    out = np.maximum(x, 0) - x * label + pw * np.log1p(np.exp(-np.abs(x)))
    return {"Out": out.astype(inputs["X"].dtype)}


def _topk(n, c, k):
    """top_k outputs for random scores, and labels of which some are hits."""
    x = rand(n, c)
    idx = np.argsort(-x, axis=1)[:, :k].astype(np.int64)
    label = np.array([[idx[i, i % k]] if i % 3 else [(idx[i, 0] + 1) % c] for i in range(n)], np.int64)
    return {"Out": np.take_along_axis(x, idx, 1), "Indices": idx, "Label": label}


SWCE = dict(outputs=("Softmax", "Loss"), no_grad_outputs=("Softmax",))
CE2 = dict(outputs=("Y", "MatchX"), no_grad_outputs=("MatchX",))
HUBER = dict(outputs=("Out", "Residual"), no_grad_outputs=("Residual",))
ACC = dict(outputs=("Accuracy", "Correct", "Total"), grad=())
_SOFT = _probs(4, 5)

CASES = [
    Case("softmax_with_cross_entropy", {"Logits": rand(4, 5), "Label": randint(4, 1, high=5)}, **SWCE),
    Case("softmax_with_cross_entropy", {"Logits": rand(4, 5), "Label": _with_ignored(randint(4, 1, high=5))},
         name="ignore_index", **SWCE),
    Case("softmax_with_cross_entropy", {"Logits": rand(4, 5), "Label": randint(4, 1, high=5, dtype="int32")},
         {"ignore_index": 2}, name="int32_ignore2", **SWCE),
    Case("softmax_with_cross_entropy", {"Logits": rand(4, 5), "Label": _SOFT}, {"soft_label": True},
         name="soft", **SWCE),
    Case("softmax_with_cross_entropy", {"Logits": rand(3, 4, 5, dtype="float64"), "Label": randint(3, 1, 5, high=4)},
         {"axis": 1}, name="axis1_f64", **SWCE),
    Case("softmax_with_cross_entropy", {"Logits": rand(4, 5, dtype="float64"), "Label": _probs(4, 5, "float64")},
         {"soft_label": True}, name="soft_f64", **SWCE),
    Case("softmax_with_cross_entropy", {"Logits": _probs(4, 5), "Label": randint(4, 1, high=5)},
         {"use_softmax": False}, name="no_softmax", **SWCE),
    Case("softmax_with_cross_entropy", {"Logits": rand(4, 5), "Label": randint(4, 1, high=5)},
         {"numeric_stable_mode": False}, name="unstable_mode", **SWCE),
    Case("cross_entropy2", {"X": _probs(4, 5), "Label": _with_ignored(randint(4, 1, high=5))}, **CE2),
    Case("cross_entropy2", {"X": _probs(4, 5, "float64"), "Label": randint(4, 1, high=5)}, {"ignore_index": 0},
         name="f64", **CE2),
    Case("huber_loss", {"X": rand(6, 1, low=-2, high=2), "Y": rand(6, 1, low=-2, high=2)}, {"delta": 1.0}, **HUBER),
    Case("huber_loss",
         {"X": rand(6, 3, low=-2, high=2, dtype="float64"), "Y": rand(6, 3, low=-2, high=2, dtype="float64")},
         {"delta": 0.5}, name="f64", **HUBER),
    Case("sigmoid_cross_entropy_with_logits", {"X": rand(4, 5, low=-3, high=3), "Label": rand(4, 5, low=0, high=1)}),
    Case("sigmoid_cross_entropy_with_logits",
         {"X": rand(4, 5, low=-3, high=3), "Label": _with_ignored(rand(4, 5, low=0, high=1))}, name="ignore"),
    Case("sigmoid_cross_entropy_with_logits",
         {"X": rand(4, 5, low=-3, high=3), "Label": _with_ignored(rand(4, 5, low=0, high=1))}, {"normalize": True},
         name="normalize"),
    Case("sigmoid_cross_entropy_with_logits",
         {"X": rand(4, 5, low=-3, high=3), "Label": _with_ignored(rand(4, 5, low=0, high=1), -1)},
         {"normalize": True, "ignore_index": -1}, name="normalize_ignore-1"),
    Case("sigmoid_cross_entropy_with_logits",
         {"X": rand(4, 5, low=-3, high=3, dtype="float64"), "Label": rand(4, 5, low=0, high=1, dtype="float64")},
         name="f64"),
    # Paddle 2.6.2's forward with pos_weight is reproduced; its backward is not the derivative of
    # that forward (it uses sigmoid(x)·pos_weight - label), so gradients are checked numerically.
    Case("sigmoid_cross_entropy_with_logits",
         {"X": rand(4, 5, low=-3, high=3), "Label": rand(4, 5, low=0, high=1), "pos_weight": positive(4, 5)},
         grad=(), name="pos_weight"),
    Case("sigmoid_cross_entropy_with_logits",
         {"X": rand(4, 5, low=-3, high=3, dtype="float64"), "Label": rand(4, 5, low=0, high=1, dtype="float64"),
          "pos_weight": positive(4, 5, dtype="float64")},
         paddle=False, oracle=_sigmoid_ce_pos_weight_ref, name="pos_weight_f64"),
    Case("accuracy", _topk(6, 5, 2), **ACC),
    Case("accuracy", _topk(5, 4, 1), name="top1", **ACC),
]
