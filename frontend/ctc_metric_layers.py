"""Fluid 1.8's CTC layers and its AUC metric layer: ``warpctc`` (the CTC loss),
``ctc_greedy_decoder`` (best path, then ``ctc_align``), ``auc`` (ROC AUC from bucketed counts kept
in persistable variables). Each emits the ops Fluid 1.8 emits, with its arguments and defaults.

>>> loss = warpctc(logits, label)                    # LoD logits [rows, classes + 1], label [rows, 1]
>>> decoded = ctc_greedy_decoder(probs, blank=0)     # LoD ids [rows, 1]
>>> global_auc, batch_auc, states = auc(prediction, label)
"""

from __future__ import annotations

from ..ir.variable import Variable
from .layer_helper import LayerHelper
from .lr_decay_layers import create_global_var
from .math_layers import fluid1_one_element, topk
from .tensor_layers import squeeze

__all__ = ["warpctc", "ctc_greedy_decoder", "auc"]


def warpctc(input: Variable, label: Variable, blank: int = 0, norm_by_times: bool = False,
            input_length: Variable | None = None, label_length: Variable | None = None) -> Variable:
    """The CTC loss of each sequence, [batch, 1]: -log p(label | softmax(input)) summed over
    alignments. ``input`` is LoD [rows, classes + 1] with a LoD int32 ``label`` [label rows, 1], or
    padded [max_time, batch, classes + 1] with int64 ``input_length`` / ``label_length`` and
    ``label`` [batch, max_label]. ``norm_by_times`` divides the gradient by each length."""
    helper = LayerHelper("warpctc")
    inputs = {"Logits": input, "Label": label}
    if input_length is not None and label_length is not None:
        inputs.update(LogitsLength=input_length, LabelLength=label_length)
    loss = helper.create_tmp(input.dtype)
    grad = helper.create_tmp(input.dtype, stop_gradient=True)
    helper.append_op("warpctc", inputs, {"Loss": loss, "WarpCTCGrad": grad},
                     {"blank": int(blank), "norm_by_times": bool(norm_by_times)})
    return loss


def ctc_greedy_decoder(input: Variable, blank: int, input_length: Variable | None = None, padding_value: int = 0,
                       name: str | None = None):
    """Best-path CTC decoding: each step's most likely class, repeats merged, ``blank`` dropped.
    LoD ``input`` [rows, classes + 1] gives LoD int64 ids [rows, 1]; padded ``input``
    [batch, time, classes + 1] with ``input_length`` [batch, 1] gives (ids [batch, time] filled with
    ``padding_value``, lengths [batch, 1])."""
    helper = LayerHelper("ctc_greedy_decoder", name)
    _, indices = topk(input, k=1)
    out = helper.create_tmp("int64", stop_gradient=True)
    attrs = {"merge_repeated": True, "blank": int(blank)}
    if input_length is None:
        helper.append_op("ctc_align", {"Input": indices}, {"Output": out}, attrs)
        return out
    lengths = helper.create_tmp("int64", stop_gradient=True)
    helper.append_op("ctc_align", {"Input": squeeze(indices, [2]), "InputLength": input_length},
                     {"Output": out, "OutputLength": lengths}, {**attrs, "padding_value": int(padding_value)})
    return out, lengths


def auc(input: Variable, label: Variable, curve: str = "ROC", num_thresholds: int = 2 ** 12 - 1, topk: int = 1,
        slide_steps: int = 1):
    """ROC AUC of ``input``'s last column (the positive class's probability) against ``label``:
    returns (the AUC over every batch run so far, the AUC over the last ``slide_steps`` batches,
    [the four persistable int64 count variables]). ``topk`` is accepted and unused, as in Fluid."""
    helper = LayerHelper("auc")
    buckets = num_thresholds + 1
    window_shape = [(1 + slide_steps) * buckets + 1]
    batch_pos, batch_neg = (create_global_var(window_shape, 0, "int64", persistable=True,
                                              name=helper.name + f".{kind}_window") for kind in ("pos", "neg"))
    stat_pos, stat_neg = (create_global_var([1, buckets], 0, "int64", persistable=True,
                                            name=helper.name + f".{kind}_total") for kind in ("pos", "neg"))
    results = []
    for pos, neg, steps in ((batch_pos, batch_neg, slide_steps), (stat_pos, stat_neg, 0)):
        value = helper.create_tmp("float64", stop_gradient=True)
        helper.append_op("auc", {"Predict": input, "Label": label, "StatPos": pos, "StatNeg": neg},
                         {"AUC": value, "StatPosOut": pos, "StatNegOut": neg},
                         {"curve": curve, "num_thresholds": int(num_thresholds), "slide_steps": int(steps)})
        results.append(value)
    fluid1_one_element(*results)                 # Fluid 1.8's auc_op: SetOutputDim("AUC", {1})
    batch_auc, global_auc = results
    return global_auc, batch_auc, [batch_pos, batch_neg, stat_pos, stat_neg]
