"""Fluid 1.8's detection layers whose ops fluidjax implements: ``prior_box``, ``box_coder``,
``yolo_box``, ``matrix_nms``, ``distribute_fpn_proposals``. Each appends the op Paddle 2.6 runs for
it (checked against Paddle's kernels in the op table), with Fluid 1.8's arguments and defaults.

>>> boxes, variances = prior_box(feature, image, min_sizes=[32.0], aspect_ratios=[1.0, 2.0], flip=True)
>>> decoded = box_coder(boxes, variances, deltas, code_type="decode_center_size")
"""

from __future__ import annotations

from typing import Sequence

from ..ir.variable import Variable
from .layer_helper import LayerHelper

__all__ = ["prior_box", "box_coder", "yolo_box", "matrix_nms", "distribute_fpn_proposals", "iou_similarity"]


def _floats(value) -> list[float]:
    return [float(v) for v in value] if isinstance(value, (list, tuple)) else [float(value)]


def prior_box(input: Variable, image: Variable, min_sizes, max_sizes=None, aspect_ratios=(1.0,),
              variance: Sequence[float] = (0.1, 0.1, 0.2, 0.2), flip: bool = False, clip: bool = False,
              steps: Sequence[float] = (0.0, 0.0), offset: float = 0.5, name: str | None = None,
              min_max_aspect_ratios_order: bool = False) -> tuple[Variable, Variable]:
    """SSD's prior (anchor) boxes of every cell of ``input``'s feature map, in ``image``'s normalised
    coordinates, and their variances: two [H, W, num_priors, 4] Variables."""
    steps = _floats(steps)
    if len(steps) != 2:
        raise ValueError(f"prior_box: steps needs (step_width, step_height), got {steps}")
    attrs = {"min_sizes": _floats(min_sizes), "aspect_ratios": _floats(aspect_ratios),
             "variances": _floats(variance), "flip": bool(flip), "clip": bool(clip), "step_w": steps[0],
             "step_h": steps[1], "offset": float(offset), "min_max_aspect_ratios_order": bool(min_max_aspect_ratios_order)}
    maxs = [] if max_sizes is None else _floats(max_sizes)
    if maxs and maxs[0] > 0:
        attrs["max_sizes"] = maxs
    helper = LayerHelper("prior_box", name)
    boxes = helper.create_tmp(input.dtype, stop_gradient=True)
    variances = helper.create_tmp(input.dtype, stop_gradient=True)
    helper.append_op("prior_box", {"Input": input, "Image": image}, {"Boxes": boxes, "Variances": variances}, attrs)
    return boxes, variances


def box_coder(prior_box: Variable, prior_box_var, target_box: Variable, code_type: str = "encode_center_size",
              box_normalized: bool = True, name: str | None = None, axis: int = 0) -> Variable:
    """Encodes ``target_box`` against the priors as center/size offsets, or decodes offsets back to
    boxes (``code_type="decode_center_size"``); ``prior_box_var`` is a [M, 4] Variable, 4 floats, or
    None."""
    inputs = {"PriorBox": prior_box, "TargetBox": target_box}
    attrs = {"code_type": code_type, "box_normalized": bool(box_normalized), "axis": int(axis)}
    if isinstance(prior_box_var, Variable):
        inputs["PriorBoxVar"] = prior_box_var
    elif isinstance(prior_box_var, (list, tuple)):
        attrs["variance"] = _floats(prior_box_var)
    elif prior_box_var is not None:
        raise TypeError(f"box_coder: prior_box_var must be a Variable, a list of 4 floats or None, "
                        f"got {type(prior_box_var).__name__}")
    return LayerHelper("box_coder", name).simple_op("box_coder", inputs, attrs, out_slot="OutputBox")


def yolo_box(x: Variable, img_size: Variable, anchors: Sequence[int], class_num: int, conf_thresh: float,
             downsample_ratio: int, clip_bbox: bool = True, name: str | None = None,
             scale_x_y: float = 1.0) -> tuple[Variable, Variable]:
    """YOLOv3's boxes [N, M, 4] and class scores [N, M, class_num] decoded from the head output
    ``x`` [N, A·(5 + class_num), H, W] for images of ``img_size`` [N, 2] (int32, height and width)."""
    if not isinstance(anchors, (list, tuple)):
        raise TypeError("yolo_box: anchors must be a list of ints")
    helper = LayerHelper("yolo_box", name)
    boxes = helper.create_tmp(x.dtype)
    scores = helper.create_tmp(x.dtype)
    helper.append_op("yolo_box", {"X": x, "ImgSize": img_size}, {"Boxes": boxes, "Scores": scores},
                     {"anchors": [int(a) for a in anchors], "class_num": int(class_num),
                      "conf_thresh": float(conf_thresh), "downsample_ratio": int(downsample_ratio),
                      "clip_bbox": bool(clip_bbox), "scale_x_y": float(scale_x_y)})
    return boxes, scores


def matrix_nms(bboxes: Variable, scores: Variable, score_threshold: float, post_threshold: float, nms_top_k: int,
               keep_top_k: int, use_gaussian: bool = False, gaussian_sigma: float = 2.0, background_label: int = 0,
               normalized: bool = True, return_index: bool = False, name: str | None = None):
    """Matrix NMS of ``bboxes`` [N, M, 4] scored by ``scores`` [N, C, M]: rows [label, score, x1, y1,
    x2, y2] of the kept detections (and, with ``return_index``, their rows in [N·M])."""
    helper = LayerHelper("matrix_nms", name)
    out = helper.create_tmp(bboxes.dtype, stop_gradient=True)
    index = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op("matrix_nms", {"BBoxes": bboxes, "Scores": scores}, {"Out": out, "Index": index},
                     {"background_label": int(background_label), "score_threshold": float(score_threshold),
                      "post_threshold": float(post_threshold), "nms_top_k": int(nms_top_k),
                      "gaussian_sigma": float(gaussian_sigma), "use_gaussian": bool(use_gaussian),
                      "keep_top_k": int(keep_top_k), "normalized": bool(normalized)})
    return (out, index) if return_index else out


def distribute_fpn_proposals(fpn_rois: Variable, min_level: int, max_level: int, refer_level: int,
                             refer_scale: int, name: str | None = None) -> tuple[list[Variable], Variable]:
    """Sends each ROI to the FPN level its size picks: one [-1, 4] Variable per level from
    ``min_level`` to ``max_level``, and the int32 index that restores the original order."""
    helper = LayerHelper("distribute_fpn_proposals", name)
    levels = [helper.create_tmp(fpn_rois.dtype) for _ in range(max_level - min_level + 1)]
    restore = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op("distribute_fpn_proposals", {"FpnRois": fpn_rois},
                     {"MultiFpnRois": levels, "RestoreIndex": restore},
                     {"min_level": int(min_level), "max_level": int(max_level), "refer_level": int(refer_level),
                      "refer_scale": int(refer_scale)})
    return levels, restore


def iou_similarity(x: Variable, y: Variable, box_normalized: bool = True, name: str | None = None) -> Variable:
    """The IoU of every box of ``x`` [N, 4] with every box of ``y`` [M, 4]: [N, M] (x's LoD kept)."""
    return LayerHelper("iou_similarity", name).simple_op("iou_similarity", {"X": x, "Y": y},
                                                         {"box_normalized": bool(box_normalized)})
