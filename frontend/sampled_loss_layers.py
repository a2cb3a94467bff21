"""Fluid 1.x losses over many classes: nce, sampled_softmax_with_cross_entropy, hsigmoid, center_loss
(ops in lowering/ops/sampled_loss.py), with Fluid 1.8's arguments.

>>> cost = nce(features, label, num_total_classes=10000, num_neg_samples=5, sampler="log_uniform")
>>> loss = center_loss(features, label, num_classes=10, alpha=0.1, param_attr=ParamAttr(name="centers"))
"""

from __future__ import annotations

import numpy as np

from ..ir import dtypes, unique_name
from ..ir.variable import Variable
from .initializer import Constant, NumpyArray
from .layer_helper import LayerHelper
from .param_attr import ParamAttr

__all__ = ["nce", "sampled_softmax_with_cross_entropy", "hsigmoid", "center_loss"]

_SAMPLERS = {"uniform": 0, "log_uniform": 1, "custom_dist": 2}


def _alias_table(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Walker's alias table of ``probs``: draw i uniformly, keep it with probability
    ``keep[i]``, else take ``alias[i]`` (-1: always kept)."""
    k = len(probs)
    scaled = [float(p) * k for p in probs]
    keep, alias = [0.0] * k, [0] * k
    small = [i for i in range(k) if scaled[i] < 1.0]
    large = [i for i in range(k) if scaled[i] > 1.0]
    for i in range(k):
        if scaled[i] == 1.0:
            keep[i], alias[i] = 1.0, -1
    while small and large:
        s, big = small.pop(0), large.pop(0)
        keep[s], alias[s] = scaled[s], big
        scaled[big] += scaled[s] - 1.0
        if scaled[big] > 1.0:
            large.append(big)
        elif scaled[big] < 1.0:
            small.append(big)
        else:
            keep[big], alias[big] = 1.0, -1
    for i in small + large:                     # rounding leftovers: kept always
        keep[i], alias[i] = 1.0, -1
    return np.asarray(keep, np.float32), np.asarray(alias, np.int32)


def _constant_parameter(helper: LayerHelper, values: np.ndarray, dtype: str):
    param = helper.create_parameter(ParamAttr(), list(values.shape), dtype, default_initializer=NumpyArray(values))
    param.stop_gradient = True
    return param


def nce(input: Variable, label: Variable, num_total_classes: int, sample_weight: Variable | None = None,
        param_attr=None, bias_attr=None, num_neg_samples: int | None = None, name: str | None = None,
        sampler: str = "uniform", custom_dist=None, seed: int = 0, is_sparse: bool = False) -> Variable:
    """Noise-contrastive estimation loss [N, 1] of ``input`` [N, D] for ``label`` [N, T] (int64):
    weights [num_total_classes, D] and bias [num_total_classes, 1] are created; num_neg_samples
    (default 10) classes per row are drawn by ``sampler`` ('uniform', 'log_uniform' or
    'custom_dist' with ``custom_dist``, one probability per class); a non-zero ``seed`` fixes the
    draws. The result is the op's Cost divided by num_neg_samples + 1, as Fluid's. ``is_sparse``
    is accepted; gradients are dense."""
    if sampler not in _SAMPLERS:
        raise ValueError(f"nce: sampler must be one of {sorted(_SAMPLERS)}, got {sampler!r}")
    if len(input.shape) != 2:
        raise ValueError(f"nce: input must be 2-D [N, D], got {list(input.shape)}")
    helper = LayerHelper("nce", name)
    dtype = dtypes.normalize(input.dtype)
    k = int(num_total_classes)
    weight = helper.create_parameter(ParamAttr.to_attr(param_attr) or ParamAttr(), [k, input.shape[1]], dtype)
    inputs = {"Input": input, "Label": label, "Weight": weight}
    bias = ParamAttr.to_attr(bias_attr)
    if bias is not None:
        inputs["Bias"] = helper.create_parameter(bias, [k, 1], dtype, is_bias=True)
    if sample_weight is not None:
        inputs["SampleWeight"] = sample_weight
    if sampler == "custom_dist":
        if custom_dist is None:
            raise ValueError("nce: the custom_dist sampler needs custom_dist (one probability per class)")
        probs = np.asarray(custom_dist, np.float64).reshape(-1)
        if probs.shape[0] != k:
            raise ValueError(f"nce: custom_dist has {probs.shape[0]} probabilities, num_total_classes is {k}")
        keep, alias = _alias_table(probs)
        inputs["CustomDistProbs"] = _constant_parameter(helper, probs.astype(np.float32), "float32")
        inputs["CustomDistAlias"] = _constant_parameter(helper, alias, "int32")
        inputs["CustomDistAliasProbs"] = _constant_parameter(helper, keep, "float32")
    neg = 10 if num_neg_samples is None else int(num_neg_samples)
    cost = helper.create_tmp(dtype)
    logits = helper.create_tmp(dtype, stop_gradient=True)
    labels = helper.create_tmp("int64", stop_gradient=True)
    helper.append_op("nce", inputs, {"Cost": cost, "SampleLogits": logits, "SampleLabels": labels},
                     {"num_total_classes": k, "num_neg_samples": neg, "seed": int(seed),
                      "sampler": _SAMPLERS[sampler], "is_sparse": bool(is_sparse),
                      "remote_prefetch": bool(is_sparse)})
    return cost / (neg + 1)


def sampled_softmax_with_cross_entropy(logits: Variable, label: Variable, num_samples: int, num_true: int = 1,
                                       remove_accidental_hits: bool = True, use_customized_samples: bool = False,
                                       customized_samples: Variable | None = None,
                                       customized_probabilities: Variable | None = None, seed: int = 0) -> Variable:
    """Sampled softmax cross entropy [N, 1]: ``sample_logits`` gathers the logits of each row's true
    label and of num_samples classes drawn log-uniformly (or ``customized_samples`` with their
    ``customized_probabilities``), corrected by -log Q, and ``softmax_with_cross_entropy`` scores the
    true label (column 0) among them; divided by num_true, as Fluid's.

    Deviation: Fluid 1.8 one-hot encodes the sampled label (op ``one_hot``, gone from Paddle 2.x) and
    uses a soft-label cross entropy; this appends the equal hard-label cross entropy on the same
    label. Fluid's ``one_hot`` takes only one true label per row, so ``num_true`` must be 1 here too."""
    if int(num_true) != 1:
        raise ValueError("sampled_softmax_with_cross_entropy: Fluid 1.8 composes it with one_hot of the "
                         f"[N, num_true] sampled labels, which needs num_true == 1; got {num_true}")
    if use_customized_samples and (customized_samples is None or customized_probabilities is None):
        raise ValueError("sampled_softmax_with_cross_entropy: use_customized_samples needs customized_samples "
                         "and customized_probabilities")
    helper = LayerHelper("sample_logits")
    dtype = dtypes.normalize(logits.dtype)
    samples = customized_samples if use_customized_samples else helper.create_tmp("int64", stop_gradient=True)
    probs = customized_probabilities if use_customized_samples else helper.create_tmp(dtype, stop_gradient=True)
    sampled_logits = helper.create_tmp(dtype)
    sampled_label = helper.create_tmp("int64", stop_gradient=True)
    logits_dim = helper.create_tmp(dtype, stop_gradient=True)
    labels_dim = helper.create_tmp(dtype, stop_gradient=True)
    inputs = {"Logits": logits, "Labels": label}
    if use_customized_samples:
        inputs.update(CustomizedSamples=customized_samples, CustomizedProbabilities=customized_probabilities)
    helper.append_op("sample_logits", inputs,
                     {"Samples": samples, "Probabilities": probs, "SampledLabels": sampled_label,
                      "SampledLogits": sampled_logits, "LogitsDim": logits_dim, "LabelsDim": labels_dim},
                     {"use_customized_samples": bool(use_customized_samples), "uniq": True,
                      "remove_accidental_hits": bool(remove_accidental_hits), "num_samples": int(num_samples),
                      "seed": int(seed)})
    loss = helper.create_tmp(dtype)
    softmax = helper.create_tmp(dtype, stop_gradient=True)
    helper.append_op("softmax_with_cross_entropy", {"Logits": sampled_logits, "Label": sampled_label},
                     {"Softmax": softmax, "Loss": loss},
                     {"soft_label": False, "ignore_index": -100, "numeric_stable_mode": False})
    return loss / num_true


def hsigmoid(input: Variable, label: Variable, num_classes: int, param_attr=None, bias_attr=None,
             name: str | None = None, path_table: Variable | None = None, path_code: Variable | None = None,
             is_custom: bool = False, is_sparse: bool = False) -> Variable:
    """Hierarchical sigmoid loss [N, 1] of ``input`` [N, D] for ``label`` [N, 1] (int64), op
    ``hierarchical_sigmoid``: the default complete binary tree over ``num_classes`` leaves (weights
    [num_classes - 1, D]) or, with ``is_custom``, the paths ``path_table`` / ``path_code`` [N, L]
    (weights [num_classes, D], num_classes the inner-node count). ``is_sparse`` is accepted;
    gradients are dense."""
    if not is_custom and (num_classes is None or num_classes < 2):
        raise ValueError("hsigmoid: num_classes must not be less than 2 with the default tree")
    if not is_custom and (path_table is not None or path_code is not None):
        raise ValueError("hsigmoid: path_table and path_code are for a custom tree (is_custom=True)")
    if is_custom and (path_table is None or path_code is None or num_classes is None):
        raise ValueError("hsigmoid: a custom tree needs path_table, path_code and num_classes")
    helper = LayerHelper("hierarchical_sigmoid", name)
    dtype = dtypes.normalize(input.dtype)
    rows = int(num_classes) if is_custom else int(num_classes) - 1
    weight = helper.create_parameter(ParamAttr.to_attr(param_attr) or ParamAttr(), [rows, input.shape[1]], dtype)
    inputs = {"X": input, "W": weight, "Label": label}
    if is_custom:
        inputs.update(PathTable=path_table, PathCode=path_code)
    bias = ParamAttr.to_attr(bias_attr)
    if bias is not None:
        inputs["Bias"] = helper.create_parameter(bias, [rows, 1], dtype, is_bias=True)
    out = helper.create_tmp(dtype)
    pre_out = helper.create_tmp(dtype, stop_gradient=True)
    helper.append_op("hierarchical_sigmoid", inputs, {"Out": out, "PreOut": pre_out, "W_Out": weight},
                     {"num_classes": int(num_classes), "is_sparse": bool(is_sparse and is_custom)})
    return out


def center_loss(input: Variable, label: Variable, num_classes: int, alpha, param_attr,
                update_center: bool = True) -> Variable:
    """Center loss [N, 1]: ½·|input - centers[label]|², centers a [num_classes, D] parameter (not
    trained by the optimizer) that the op itself moves toward the batch's features at rate ``alpha``
    (a float or a [1] Variable) when ``update_center``: the op writes it back (CentersOut) each run.

    Deviation: Fluid names the float alpha's variable ``centerloss_alpha`` in every call, so two
    center losses share the first one's rate; here each call gets its own."""
    if len(input.shape) != 2:
        raise ValueError(f"center_loss: input must be 2-D [N, D], got {list(input.shape)}")
    helper = LayerHelper("center_loss")
    dtype = dtypes.normalize(input.dtype)
    centers = helper.create_parameter(ParamAttr.to_attr(param_attr) or ParamAttr(), [int(num_classes), input.shape[1]],
                                      dtype)
    centers.stop_gradient = True
    if isinstance(alpha, Variable):
        rate = alpha
    else:
        rate = helper.main_program.global_block().create_var(
            unique_name.generate("centerloss_alpha"), (1,), "float32", persistable=True, stop_gradient=True)
        Constant(float(alpha))(rate, helper.startup_program.global_block())
    diff = helper.create_tmp(dtype, stop_gradient=True)
    loss = helper.create_tmp(dtype)
    helper.append_op("center_loss", {"X": input, "Label": label, "Centers": centers, "CenterUpdateRate": rate},
                     {"SampleCenterDiff": diff, "Loss": loss, "CentersOut": centers},
                     {"cluster_num": int(num_classes), "need_update": bool(update_center)})
    return loss
