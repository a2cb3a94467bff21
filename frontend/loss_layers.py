"""Fluid 1.8's losses beyond :mod:`.nn_layers`: ``mse_loss``, ``smooth_l1``, ``kldiv_loss``,
``log_loss``, ``rank_loss``, ``margin_rank_loss``, ``bpr_loss``, ``teacher_student_sigmoid_loss``,
``sigmoid_focal_loss`` (each one op, as Fluid 1.8 emitted it), and ``npair_loss``, ``dice_loss``
(compositions of ops, as Fluid 1.8 wrote them).

>>> cost = mse_loss(prediction, label)                 # a 0-D mean
>>> cost = kldiv_loss(log_probs, target, "batchmean")
"""

from __future__ import annotations

from ..ir.variable import Variable
from .layer_helper import LayerHelper
from .math_layers import elementwise_add, elementwise_div, elementwise_mul, equal, reduce_mean, reduce_sum, scale, square
from .nn_layers import matmul, softmax_with_cross_entropy, square_error_cost
from .tensor_layers import cast, expand, one_hot, reshape, transpose

__all__ = ["mse_loss", "smooth_l1", "kldiv_loss", "log_loss", "rank_loss", "margin_rank_loss", "bpr_loss",
           "teacher_student_sigmoid_loss", "sigmoid_focal_loss", "npair_loss", "dice_loss"]


def _loss_op(op_type: str, inputs: dict, attrs: dict | None = None, out_slot: str = "Out",
             name: str | None = None) -> Variable:
    return LayerHelper(op_type, name).simple_op(op_type, inputs, attrs or {}, out_slot=out_slot)


def mse_loss(input: Variable, label: Variable) -> Variable:
    """The mean of (input - label)² over every element."""
    return reduce_mean(square_error_cost(input, label))


def smooth_l1(x: Variable, y: Variable, inside_weight: Variable | None = None,
              outside_weight: Variable | None = None, sigma: float | None = None) -> Variable:
    """Smooth L1 of ``inside_weight``·(x - y), times ``outside_weight``, summed per row: [N, 1]
    (op ``smooth_l1_loss``; ``sigma`` 1 by default)."""
    helper = LayerHelper("smooth_l1_loss")
    diff = helper.create_tmp(x.dtype, stop_gradient=True)
    loss = helper.create_tmp(x.dtype)
    inputs = {"X": x, "Y": y}
    if inside_weight is not None:
        inputs["InsideWeight"] = inside_weight
    if outside_weight is not None:
        inputs["OutsideWeight"] = outside_weight
    helper.append_op("smooth_l1_loss", inputs, {"Diff": diff, "Out": loss},
                     {"sigma": 1.0 if sigma is None else float(sigma)})
    return loss


def kldiv_loss(x: Variable, target: Variable, reduction: str = "mean", name: str | None = None) -> Variable:
    """KL divergence of ``target`` from the log-probabilities ``x``, reduced by ``reduction``
    ('none', 'batchmean', 'mean' or 'sum'; the reduced forms are 0-D)."""
    if reduction not in ("none", "batchmean", "mean", "sum"):
        raise ValueError(f"kldiv_loss: reduction must be 'none', 'batchmean', 'mean' or 'sum', got {reduction!r}")
    return _loss_op("kldiv_loss", {"X": x, "Target": target}, {"reduction": reduction}, "Loss", name)


def log_loss(input: Variable, label: Variable, epsilon: float = 1e-4, name: str | None = None) -> Variable:
    """-label·log(input + ε) - (1 - label)·log(1 - input + ε) for probabilities ``input`` [N, 1]."""
    return _loss_op("log_loss", {"Predicted": input, "Labels": label}, {"epsilon": float(epsilon)}, "Loss", name)


def rank_loss(label: Variable, left: Variable, right: Variable, name: str | None = None) -> Variable:
    """RankNet: log(1 + exp(left - right)) - label·(left - right), each [N, 1]."""
    return _loss_op("rank_loss", {"Label": label, "Left": left, "Right": right}, name=name)


def margin_rank_loss(label: Variable, left: Variable, right: Variable, margin: float = 0.1,
                     name: str | None = None) -> Variable:
    """max(0, -label·(left - right) + margin), each [N, 1]."""
    helper = LayerHelper("margin_rank_loss", name)
    out = helper.create_tmp(left.dtype)
    activated = helper.create_tmp(left.dtype, stop_gradient=True)
    helper.append_op("margin_rank_loss", {"Label": label, "X1": left, "X2": right},
                     {"Out": out, "Activated": activated}, {"margin": float(margin)})
    return out


def bpr_loss(input: Variable, label: Variable, name: str | None = None) -> Variable:
    """Bayesian personalised ranking of scores ``input`` [N, C] against the positive class
    ``label`` [N, 1] (int64): [N, 1]."""
    return _loss_op("bpr_loss", {"X": input, "Label": label}, out_slot="Y", name=name)


def teacher_student_sigmoid_loss(input: Variable, label: Variable, soft_max_up_bound: float = 15.0,
                                 soft_max_lower_bound: float = -15.0) -> Variable:
    """Sigmoid cross entropy against a click and a teacher's value packed into ``label`` (see the
    op); no gradient where ``input`` lies outside the bounds."""
    return _loss_op("teacher_student_sigmoid_loss", {"X": input, "Label": label},
                    {"soft_max_up_bound": float(soft_max_up_bound),
                     "soft_max_lower_bound": float(soft_max_lower_bound)}, "Y")


def sigmoid_focal_loss(x: Variable, label: Variable, fg_num: Variable, gamma: float = 2.0,
                       alpha: float = 0.25) -> Variable:
    """Focal loss of logits ``x`` [N, C] against 1-based class labels [N, 1] (0 background, -1
    ignored), normalised by the foreground count ``fg_num``: [N, C]."""
    return _loss_op("sigmoid_focal_loss", {"X": x, "Label": label, "FgNum": fg_num},
                    {"gamma": float(gamma), "alpha": float(alpha)})


def npair_loss(anchor: Variable, positive: Variable, labels: Variable, l2_reg: float = 0.002) -> Variable:
    """N-pair loss: softmax cross entropy of anchor·positiveᵀ against the same-label matrix (rows
    normalised), plus ``l2_reg``/4 times the mean squared norms of both embeddings."""
    batch = labels.shape[0]
    labels = reshape(labels, [batch, 1])
    labels = expand(labels, [1, batch])
    same = cast(equal(labels, transpose(labels, [1, 0])), "float32")
    same = elementwise_div(same, reduce_sum(same, dim=1, keep_dim=True))
    l2 = elementwise_add(reduce_mean(reduce_sum(square(anchor), 1)), reduce_mean(reduce_sum(square(positive), 1)))
    l2 = scale(l2, 0.25 * float(l2_reg))
    similarity = matmul(anchor, positive, transpose_x=False, transpose_y=True)
    ce = softmax_with_cross_entropy(logits=similarity, label=same, soft_label=True)
    return elementwise_add(l2, reduce_mean(reduce_sum(elementwise_mul(same, ce), 0)))


def dice_loss(input: Variable, label: Variable, epsilon: float = 1e-5, name: str | None = None) -> Variable:
    """1 - 2·|input ∩ one_hot(label)| / (|input| + |label|), averaged over the batch; ``input`` holds
    class probabilities in its last dim and ``label`` the int class ids with a trailing dim of 1."""
    depth = input.shape[-1]
    label = one_hot(label, depth)   # Fluid's one_hot: the trailing 1 becomes [depth]
    dims = list(range(1, input.ndim))
    intersection = reduce_sum(elementwise_mul(input, label), dim=dims)
    denominator = elementwise_add(reduce_sum(input, dim=dims), reduce_sum(label, dim=dims))
    score = scale(elementwise_div(scale(intersection, 2.0), scale(denominator, 1.0, float(epsilon))), -1.0, 1.0)
    return reduce_mean(score)
