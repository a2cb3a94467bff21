"""Fluid 1.x detection layers over boxes and anchors (ops in lowering/ops/detection_boxes.py and
lowering/ops/detection_nms.py): the v1 NMS layers, SSD's detection_output and multi_box_head,
RPN's generate_proposals and anchor_generator, FPN's collect_fpn_proposals, and the box helpers.

Outputs whose row count depends on the data (NMS, proposals) are LoD tensors with one level of
per-image offsets, padded inside the step to a capacity fixed by the input shapes
(docs/ops_data_dependent.md); a fetch returns exactly the real rows and their LoD.

>>> out = multiclass_nms(boxes, scores, score_threshold=0.05, nms_top_k=100, keep_top_k=20)
"""

from __future__ import annotations

import math
from typing import Sequence

from ..ir.variable import Variable
from .detection_layers import box_coder, prior_box
from .layer_helper import LayerHelper
from .math_layers import softmax
from .nn_layers import conv2d
from .tensor_layers import concat, flatten, reshape, transpose

__all__ = ["multiclass_nms", "detection_output", "generate_proposals", "box_clip", "polygon_box_transform",
           "box_decoder_and_assign", "anchor_generator", "density_prior_box", "multi_box_head",
           "locality_aware_nms", "retinanet_detection_output", "collect_fpn_proposals", "mean_iou"]


def _floats(value, what: str) -> list[float]:
    if isinstance(value, (list, tuple)):
        return [float(v) for v in value]
    if value is None:
        raise ValueError(f"{what} must be given")
    return [float(value)]


def _nms_attrs(background_label, score_threshold, nms_top_k, nms_threshold, nms_eta, keep_top_k, normalized):
    return {"background_label": int(background_label), "score_threshold": float(score_threshold),
            "nms_top_k": int(nms_top_k), "nms_threshold": float(nms_threshold), "nms_eta": float(nms_eta),
            "keep_top_k": int(keep_top_k), "normalized": bool(normalized)}


def multiclass_nms(bboxes: Variable, scores: Variable, score_threshold: float, nms_top_k: int, keep_top_k: int,
                   nms_threshold: float = 0.3, normalized: bool = True, nms_eta: float = 1.0,
                   background_label: int = 0, name: str | None = None) -> Variable:
    """Per-class greedy NMS of ``bboxes`` [N, M, 4] scored by ``scores`` [N, C, M]: a LoD tensor
    [No, 6] of rows [label, score, x1, y1, x2, y2] with per-image offsets (op ``multiclass_nms``).
    Only this batched form is supported (not Fluid's LoD form with scores [M, C]). When nothing is
    detected in the batch the result is one row of -1 (Paddle: one value -1), LoD [0, 1, ..., 1]."""
    helper = LayerHelper("multiclass_nms", name)
    out = helper.create_tmp(bboxes.dtype, stop_gradient=True, lod_level=1)
    helper.append_op("multiclass_nms", {"BBoxes": bboxes, "Scores": scores}, {"Out": out},
                     _nms_attrs(background_label, score_threshold, nms_top_k, nms_threshold, nms_eta, keep_top_k,
                                normalized))
    return out


def detection_output(loc: Variable, scores: Variable, prior_box: Variable, prior_box_var: Variable,
                     background_label: int = 0, nms_threshold: float = 0.3, nms_top_k: int = 400,
                     keep_top_k: int = 200, score_threshold: float = 0.01, nms_eta: float = 1.0,
                     return_index: bool = False):
    """SSD's detections: ``loc`` [N, M, 4] decoded against ``prior_box`` / ``prior_box_var`` [M, 4]
    (box_coder), ``scores`` [N, M, C] softmaxed and transposed to [N, C, M], then multiclass NMS
    (``multiclass_nms2`` with ``return_index``, also returning the kept boxes' rows in [N·M]).
    As Fluid 1.8 does, the op gets background_label 0 and nms_eta 1.0 whatever is passed."""
    decoded = box_coder(prior_box, prior_box_var, loc, code_type="decode_center_size")
    probs = transpose(softmax(scores), perm=[0, 2, 1])
    probs.stop_gradient = True
    helper = LayerHelper("detection_output")
    out = helper.create_tmp(decoded.dtype, stop_gradient=True, lod_level=1)
    attrs = _nms_attrs(0, score_threshold, nms_top_k, nms_threshold, 1.0, keep_top_k, True)
    del attrs["normalized"]
    if return_index:
        index = helper.create_tmp("int32", stop_gradient=True, lod_level=1)
        helper.append_op("multiclass_nms2", {"Scores": probs, "BBoxes": decoded}, {"Out": out, "Index": index}, attrs)
        return out, index
    helper.append_op("multiclass_nms", {"Scores": probs, "BBoxes": decoded}, {"Out": out}, attrs)
    return out


def locality_aware_nms(bboxes: Variable, scores: Variable, score_threshold: float, nms_top_k: int, keep_top_k: int,
                       nms_threshold: float = 0.3, normalized: bool = True, nms_eta: float = 1.0,
                       background_label: int = -1, name: str | None = None) -> Variable:
    """Locality-aware NMS (EAST) of ``bboxes`` [N, M, 4] with one class of ``scores`` [N, 1, M]:
    overlapping neighbours merge (score-weighted) before greedy NMS. A LoD tensor [No, 6] as
    multiclass_nms's. Polygon boxes (8, 16, 24, 32 coordinates) are not supported."""
    if len(scores.shape) != 3 or scores.shape[1] != 1:
        raise ValueError(f"locality_aware_nms: scores must be [N, 1, M] (one class), got {scores.shape}")
    helper = LayerHelper("locality_aware_nms", name)
    out = helper.create_tmp(bboxes.dtype, stop_gradient=True, lod_level=1)
    helper.append_op("locality_aware_nms", {"BBoxes": bboxes, "Scores": scores}, {"Out": out},
                     _nms_attrs(background_label, score_threshold, nms_top_k, nms_threshold, nms_eta, keep_top_k,
                                normalized))
    return out


def retinanet_detection_output(bboxes: Sequence[Variable], scores: Sequence[Variable], anchors: Sequence[Variable],
                               im_info: Variable, score_threshold: float = 0.05, nms_top_k: int = 1000,
                               keep_top_k: int = 100, nms_threshold: float = 0.3, nms_eta: float = 1.0) -> Variable:
    """RetinaNet's detections from per-level ``bboxes`` [N, Mi, 4] (offsets), ``scores`` [N, Mi, C]
    and ``anchors`` [Mi, 4] for images ``im_info`` [N, 3]: a LoD tensor [No, 6] of rows
    [label, score, x1, y1, x2, y2] (labels from 1), best first per image. As Fluid 1.8 does, the op
    gets nms_eta 1.0 whatever is passed."""
    for what, value in (("bboxes", bboxes), ("scores", scores), ("anchors", anchors)):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"retinanet_detection_output: {what} must be a list of Variables (one per FPN level)")
    helper = LayerHelper("retinanet_detection_output")
    out = helper.create_tmp(scores[0].dtype, stop_gradient=True, lod_level=1)
    helper.append_op("retinanet_detection_output",
                     {"BBoxes": list(bboxes), "Scores": list(scores), "Anchors": list(anchors), "ImInfo": im_info},
                     {"Out": out}, {"score_threshold": float(score_threshold), "nms_top_k": int(nms_top_k),
                                    "nms_threshold": float(nms_threshold), "keep_top_k": int(keep_top_k),
                                    "nms_eta": 1.0})
    return out


def generate_proposals(scores: Variable, bbox_deltas: Variable, im_info: Variable, anchors: Variable,
                       variances: Variable, pre_nms_top_n: int = 6000, post_nms_top_n: int = 1000,
                       nms_thresh: float = 0.5, min_size: float = 0.1, eta: float = 1.0, name: str | None = None,
                       return_rois_num: bool = False):
    """RPN proposals (op ``generate_proposals``): ``scores`` [N, A, H, W], ``bbox_deltas``
    [N, 4A, H, W], ``im_info`` [N, 3], ``anchors`` / ``variances`` [H, W, A, 4]. Returns
    (rpn_rois [K, 4], rpn_roi_probs [K, 1]) as LoD tensors with per-image offsets, and the
    per-image counts [N] with ``return_rois_num``."""
    helper = LayerHelper("generate_proposals", name)
    rois = helper.create_tmp(bbox_deltas.dtype, stop_gradient=True, lod_level=1)
    probs = helper.create_tmp(scores.dtype, stop_gradient=True, lod_level=1)
    outputs = {"RpnRois": rois, "RpnRoiProbs": probs}
    if return_rois_num:
        outputs["RpnRoisNum"] = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op("generate_proposals", {"Scores": scores, "BboxDeltas": bbox_deltas, "ImInfo": im_info,
                                            "Anchors": anchors, "Variances": variances}, outputs,
                     {"pre_nms_topN": int(pre_nms_top_n), "post_nms_topN": int(post_nms_top_n),
                      "nms_thresh": float(nms_thresh), "min_size": float(min_size), "eta": float(eta)})
    return (rois, probs, outputs["RpnRoisNum"]) if return_rois_num else (rois, probs)


def collect_fpn_proposals(multi_rois: Sequence[Variable], multi_scores: Sequence[Variable], min_level: int,
                          max_level: int, post_nms_top_n: int, name: str | None = None,
                          rois_num_per_level: Sequence[Variable] | None = None):
    """The ``post_nms_top_n`` best ROIs of levels ``min_level`` … ``max_level`` (the first
    max_level - min_level + 1 entries of ``multi_rois`` [Ri, 4] / ``multi_scores`` [Ri, 1], LoD
    tensors of one sequence per image), regrouped by image: a LoD tensor [K, 4]. With
    ``rois_num_per_level`` (Paddle 2's keyword; per-level counts [N]) also the counts [N]."""
    levels = int(max_level) - int(min_level) + 1
    if not isinstance(multi_rois, (list, tuple)) or not isinstance(multi_scores, (list, tuple)):
        raise TypeError("collect_fpn_proposals: multi_rois and multi_scores must be lists of Variables")
    helper = LayerHelper("collect_fpn_proposals", name)
    rois = helper.create_tmp(multi_rois[0].dtype, stop_gradient=True, lod_level=1)
    inputs = {"MultiLevelRois": list(multi_rois[:levels]), "MultiLevelScores": list(multi_scores[:levels])}
    outputs = {"FpnRois": rois}
    if rois_num_per_level is not None:
        inputs["MultiLevelRoIsNum"] = list(rois_num_per_level[:levels])
        outputs["RoisNum"] = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op("collect_fpn_proposals", inputs, outputs, {"post_nms_topN": int(post_nms_top_n)})
    return (rois, outputs["RoisNum"]) if rois_num_per_level is not None else rois


def box_clip(input: Variable, im_info: Variable, name: str | None = None) -> Variable:
    """``input`` boxes [..., 4] clipped into their image: x to [0, round(w / scale) - 1], y to
    [0, round(h / scale) - 1] from ``im_info`` [N, 3]; a LoD ``input`` (Fluid's form) has one
    sequence per image, a plain one (a fluidjax extension) one row per image."""
    helper = LayerHelper("box_clip", name)
    out = helper.create_tmp(input.dtype, lod_level=input.lod_level)
    helper.append_op("box_clip", {"Input": input, "ImInfo": im_info}, {"Output": out})
    return out


def polygon_box_transform(input: Variable, name: str | None = None) -> Variable:
    """EAST geometry maps [N, 2K, H, W] to absolute coordinates: 4·w - x on even channels, 4·h - y
    on odd ones."""
    return LayerHelper("polygon_box_transform", name).simple_op("polygon_box_transform", {"Input": input}, {},
                                                                out_slot="Output")


def box_decoder_and_assign(prior_box: Variable, prior_box_var: Variable, target_box: Variable, box_score: Variable,
                           box_clip: float, name: str | None = None) -> tuple[Variable, Variable]:
    """Decodes per-class offsets ``target_box`` [N, 4C] against pixel priors ``prior_box`` [N, 4]
    (variance ``prior_box_var`` [4]; log sizes capped at ``box_clip``) and assigns each ROI the box
    of its best non-background class of ``box_score`` [N, C]: (decoded [N, 4C], assigned [N, 4])."""
    helper = LayerHelper("box_decoder_and_assign", name)
    decoded = helper.create_tmp(prior_box.dtype)
    assigned = helper.create_tmp(prior_box.dtype)
    helper.append_op("box_decoder_and_assign", {"PriorBox": prior_box, "PriorBoxVar": prior_box_var,
                                                "TargetBox": target_box, "BoxScore": box_score},
                     {"DecodeBox": decoded, "OutputAssignBox": assigned}, {"box_clip": float(box_clip)})
    return decoded, assigned


def anchor_generator(input: Variable, anchor_sizes=None, aspect_ratios=None,
                     variance: Sequence[float] = (0.1, 0.1, 0.2, 0.2), stride=None, offset: float = 0.5,
                     name: str | None = None) -> tuple[Variable, Variable]:
    """Faster R-CNN anchors of every cell of ``input``'s feature map, [H, W, len(aspect_ratios)·
    len(anchor_sizes), 4] in pixels, and their variances (same shape)."""
    stride = _floats(stride, "anchor_generator: stride")
    if len(stride) != 2:
        raise ValueError(f"anchor_generator: stride needs (stride_width, stride_height), got {stride}")
    helper = LayerHelper("anchor_generator", name)
    anchors = helper.create_tmp(input.dtype, stop_gradient=True)
    variances = helper.create_tmp(input.dtype, stop_gradient=True)
    helper.append_op("anchor_generator", {"Input": input}, {"Anchors": anchors, "Variances": variances},
                     {"anchor_sizes": _floats(anchor_sizes, "anchor_generator: anchor_sizes"),
                      "aspect_ratios": _floats(aspect_ratios, "anchor_generator: aspect_ratios"),
                      "variances": _floats(variance, "variance"), "stride": stride, "offset": float(offset)})
    return anchors, variances


def density_prior_box(input: Variable, image: Variable, densities=None, fixed_sizes=None, fixed_ratios=None,
                      variance: Sequence[float] = (0.1, 0.1, 0.2, 0.2), clip: bool = False,
                      steps: Sequence[float] = (0.0, 0.0), offset: float = 0.5, flatten_to_2d: bool = False,
                      name: str | None = None) -> tuple[Variable, Variable]:
    """Density prior boxes of every cell of ``input``'s map in ``image``'s normalised coordinates,
    [H, W, P, 4] (or [H·W·P, 4] with ``flatten_to_2d``), P = Σ len(fixed_ratios)·density², and
    their variances."""
    for what, value in (("densities", densities), ("fixed_sizes", fixed_sizes), ("fixed_ratios", fixed_ratios)):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"density_prior_box: {what} must be a list or tuple")
    if len(densities) != len(fixed_sizes):
        raise ValueError("density_prior_box: densities and fixed_sizes must have the same length")
    if not isinstance(steps, (list, tuple)) or len(steps) != 2:
        raise ValueError("density_prior_box: steps needs (step_width, step_height)")
    helper = LayerHelper("density_prior_box", name)
    boxes = helper.create_tmp(input.dtype, stop_gradient=True)
    variances = helper.create_tmp(input.dtype, stop_gradient=True)
    helper.append_op("density_prior_box", {"Input": input, "Image": image}, {"Boxes": boxes, "Variances": variances},
                     {"variances": _floats(variance, "variance"), "clip": bool(clip), "step_w": float(steps[0]),
                      "step_h": float(steps[1]), "offset": float(offset), "densities": [int(d) for d in densities],
                      "fixed_sizes": [float(s) for s in fixed_sizes], "fixed_ratios": [float(r) for r in fixed_ratios],
                      "flatten_to_2d": bool(flatten_to_2d)})
    return boxes, variances


def multi_box_head(inputs: Sequence[Variable], image: Variable, base_size: int, num_classes: int, aspect_ratios,
                   min_ratio=None, max_ratio=None, min_sizes=None, max_sizes=None, steps=None, step_w=None,
                   step_h=None, offset: float = 0.5, variance: Sequence[float] = (0.1, 0.1, 0.2, 0.2),
                   flip: bool = True, clip: bool = False, kernel_size: int = 1, pad=0, stride=1,
                   name: str | None = None, min_max_aspect_ratios_order: bool = False):
    """SSD's heads over several feature maps, Fluid 1.8's composition: per map, prior_box and two
    conv2d (box offsets and class scores, NHWC-flattened); returns (mbox_locs [N, P, 4], mbox_confs
    [N, P, num_classes], boxes [P, 4], variances [P, 4]). With more than two maps and no sizes the
    sizes follow from ``base_size``, ``min_ratio`` and ``max_ratio`` as in Fluid. (With a single
    map Fluid returns the un-reshaped pieces: locs/confs [N, H·W·P·k], boxes [H, W, P, 4]; so here.)"""
    if not isinstance(inputs, (list, tuple)):
        raise ValueError("multi_box_head: inputs should be a list or tuple")
    layers = len(inputs)
    if layers <= 2:
        if min_sizes is None or max_sizes is None or len(min_sizes) != layers or len(max_sizes) != layers:
            raise ValueError("multi_box_head: with at most two inputs, min_sizes and max_sizes need one entry each")
    elif min_sizes is None and max_sizes is None:
        min_sizes, max_sizes = [], []
        step = int(math.floor((max_ratio - min_ratio) / (layers - 2)))
        for ratio in range(min_ratio, max_ratio + 1, step):
            min_sizes.append(base_size * ratio / 100.0)
            max_sizes.append(base_size * (ratio + step) / 100.0)
        min_sizes = [base_size * 0.10] + min_sizes
        max_sizes = [base_size * 0.20] + max_sizes

    def _per_layer(value, what):
        if value is not None and (not isinstance(value, (list, tuple)) or len(value) != layers):
            raise ValueError(f"multi_box_head: {what} should be a list or tuple with one entry per input")
        return value

    if aspect_ratios:
        _per_layer(aspect_ratios, "aspect_ratios")
    step_h, step_w = _per_layer(step_h, "step_h"), _per_layer(step_w, "step_w")
    if _per_layer(steps, "steps") is not None:
        step_w = step_h = steps
    locs, confs, box_list, var_list = [], [], [], []
    for i, feature in enumerate(inputs):
        min_size, max_size = min_sizes[i], max_sizes[i]
        min_size = list(min_size) if isinstance(min_size, (list, tuple)) else [min_size]
        max_size = list(max_size) if isinstance(max_size, (list, tuple)) else [max_size]
        ratio = []
        if aspect_ratios is not None:
            ratio = aspect_ratios[i]
            ratio = list(ratio) if isinstance(ratio, (list, tuple)) else [ratio]
        # Fluid 1.8 reads step_h only when step_w is set: kept.
        step = [step_w[i] if step_w else 0.0, step_h[i] if step_w else 0.0]
        box, var = prior_box(feature, image, min_size, max_size or None, ratio, variance, flip, clip, step, offset,
                             None, min_max_aspect_ratios_order)
        box_list.append(box)
        var_list.append(var)
        priors = box.shape[2]
        loc = conv2d(feature, num_filters=priors * 4, filter_size=kernel_size, padding=pad, stride=stride)
        locs.append(flatten(transpose(loc, perm=[0, 2, 3, 1]), axis=1))
        conf = conv2d(feature, num_filters=priors * num_classes, filter_size=kernel_size, padding=pad, stride=stride)
        confs.append(flatten(transpose(conf, perm=[0, 2, 3, 1]), axis=1))
    if len(box_list) == 1:
        box, var, loc_out, conf_out = box_list[0], var_list[0], locs[0], confs[0]
    else:
        box = concat([flatten(b, axis=3) for b in box_list])
        var = concat([flatten(v, axis=3) for v in var_list])
        loc_out = reshape(concat(locs, axis=1), shape=[0, -1, 4])
        conf_out = reshape(concat(confs, axis=1), shape=[0, -1, num_classes])
    box.stop_gradient = True
    var.stop_gradient = True
    return loc_out, conf_out, box, var


def mean_iou(input: Variable, label: Variable, num_classes: int) -> tuple[Variable, Variable, Variable]:
    """Mean intersection-over-union of integer predictions ``input`` against ``label`` over
    ``num_classes`` classes: (mean_iou [1] float32, wrong [num_classes] int32, correct
    [num_classes] int32)."""
    helper = LayerHelper("mean_iou")
    mean = helper.create_tmp("float32", stop_gradient=True)
    wrong = helper.create_tmp("int32", stop_gradient=True)
    correct = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op("mean_iou", {"Predictions": input, "Labels": label},
                     {"OutMeanIou": mean, "OutWrong": wrong, "OutCorrect": correct}, {"num_classes": int(num_classes)})
    return mean, wrong, correct
