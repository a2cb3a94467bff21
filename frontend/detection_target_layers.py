"""Fluid 1.x detection training layers: matching, target assignment, SSD/RPN/RetinaNet/YOLOv3 losses
(ops in lowering/ops/detection_target.py and detection_loss.py).

Each layer appends the ops Fluid 1.8's layer appends (so a program built here serializes to the one
Fluid builds), with Fluid 1.8's positional parameters and defaults. Outputs whose row count depends
on the data (sampled anchors, mined negatives) are padded inside a compiled step and carry their
real counts (docs/ops_data_dependent.md); fetched, they have Paddle's rows.
"""

from __future__ import annotations

from typing import Sequence

from ..ir.variable import Variable
from .layer_helper import LayerHelper

__all__ = ["bipartite_match", "target_assign", "ssd_loss", "rpn_target_assign", "retinanet_target_assign",
           "yolov3_loss", "generate_proposal_labels", "generate_mask_labels"]


def bipartite_match(dist_matrix: Variable, match_type: str | None = None, dist_threshold: float | None = None,
                    name: str | None = None) -> tuple[Variable, Variable]:
    """Greedy bipartite matching of each instance of ``dist_matrix`` (a LoD tensor [rows, M]):
    the matched row of every column ([N, M] int32, -1 if none) and its distance ([N, M]).
    ``match_type='per_prediction'`` also matches leftover columns to their best row at or above
    ``dist_threshold`` (0.5 by default)."""
    helper = LayerHelper("bipartite_match", name)
    indices = helper.create_tmp("int32", stop_gradient=True)
    dist = helper.create_tmp(dist_matrix.dtype, stop_gradient=True)
    helper.append_op("bipartite_match", {"DistMat": dist_matrix},
                     {"ColToRowMatchIndices": indices, "ColToRowMatchDist": dist},
                     {"match_type": match_type or "bipartite",
                      "dist_threshold": 0.5 if dist_threshold is None else float(dist_threshold)})
    return indices, dist


def target_assign(input: Variable, matched_indices: Variable, negative_indices: Variable | None = None,
                  mismatch_value=None, name: str | None = None) -> tuple[Variable, Variable]:
    """Targets [N, P, K] and weights [N, P, 1] from ``input`` (a LoD tensor [rows, P, K], one
    sequence per instance) picked by ``matched_indices`` [N, P]: unmatched entries get
    ``mismatch_value`` (weight 0), and the ``negative_indices`` (LoD [Neg, 1]) of each instance get
    ``mismatch_value`` with weight 1."""
    helper = LayerHelper("target_assign", name)
    out = helper.create_tmp(input.dtype, stop_gradient=True)
    weight = helper.create_tmp("float32", stop_gradient=True)
    inputs = {"X": input, "MatchIndices": matched_indices}
    if negative_indices is not None:
        inputs["NegIndices"] = negative_indices
    helper.append_op("target_assign", inputs, {"Out": out, "OutWeight": weight},
                     {"mismatch_value": int(mismatch_value or 0)})
    return out, weight


def _layers():
    """The layers Fluid's compositions here are written with, from their families (imported when
    called, once frontend/layers.py has made them atomic; importing frontend.layers itself from
    here would be an import cycle)."""
    from types import SimpleNamespace

    from .detection_layers import box_coder, iou_similarity
    from .loss_layers import smooth_l1
    from .math_layers import reduce_sum
    from .nn_layers import softmax_with_cross_entropy
    from .tensor_layers import cast, flatten, gather, reshape
    return SimpleNamespace(box_coder=box_coder, iou_similarity=iou_similarity, smooth_l1=smooth_l1,
                           reduce_sum=reduce_sum, softmax_with_cross_entropy=softmax_with_cross_entropy, cast=cast,
                           flatten=flatten, gather=gather, reshape=reshape)


def ssd_loss(location: Variable, confidence: Variable, gt_box: Variable, gt_label: Variable, prior_box: Variable,
             prior_box_var: Variable | None = None, background_label: int = 0, overlap_threshold: float = 0.5,
             neg_pos_ratio: float = 3.0, neg_overlap: float = 0.5, loc_loss_weight: float = 1.0,
             conf_loss_weight: float = 1.0, match_type: str = "per_prediction", mining_type: str = "max_negative",
             normalize: bool = True, sample_size: int | None = None) -> Variable:
    """SSD's multibox loss [N, 1], Fluid's composition: IoU of ``gt_box`` (LoD [Ng, 4]) with the
    priors, bipartite (+ per-prediction) matching, the softmax confidence loss of the matched labels,
    max-negative hard example mining (``mine_hard_examples``), encoded location targets
    (``box_coder``), smooth-L1 location loss, and the weighted per-image sum, divided by the number of
    matched priors when ``normalize``. Only ``mining_type='max_negative'`` (as Fluid)."""
    if mining_type != "max_negative":
        raise ValueError("ssd_loss: only mining_type == 'max_negative' is supported (as in Fluid)")
    L = _layers()
    helper = LayerHelper("ssd_loss")
    num_prior = confidence.shape[1] if len(confidence.shape) == 3 else -1
    if num_prior < 0:
        raise ValueError(f"ssd_loss: confidence must be [N, Np, C] with a known Np, got {confidence.shape}")
    # Fluid reshapes to [N, Np] by the run-time shape of confidence (reshape's actual_shape); here
    # Np is static and N follows from -1: the same shape, one reshape2 without a Shape input.
    actual_shape = (-1, num_prior)

    def flat(var):
        return L.flatten(var, axis=2)

    # 1. Match the priors to the ground truths.
    iou = L.iou_similarity(gt_box, prior_box)
    matched_indices, matched_dist = bipartite_match(iou, match_type, overlap_threshold)
    # 2. Confidence loss of the matched labels, for mining.
    gt_label = L.reshape(gt_label, (len(gt_label.shape) - 1) * (0,) + (-1, 1))
    gt_label.lod_level = max(gt_label.lod_level, 1)
    gt_label.stop_gradient = True
    target_label, _ = target_assign(gt_label, matched_indices, mismatch_value=background_label)
    confidence = flat(confidence)
    target_label = flat(L.cast(target_label, "int64"))
    target_label.stop_gradient = True
    conf_loss = L.softmax_with_cross_entropy(confidence, target_label)
    # 3. Hard example mining.
    conf_loss = L.reshape(conf_loss, actual_shape)
    conf_loss.stop_gradient = True
    neg_indices = helper.create_tmp("int32", stop_gradient=True)
    updated_indices = helper.create_tmp(matched_indices.dtype, stop_gradient=True)
    helper.append_op("mine_hard_examples",
                     {"ClsLoss": conf_loss, "MatchIndices": matched_indices, "MatchDist": matched_dist},
                     {"NegIndices": neg_indices, "UpdatedMatchIndices": updated_indices},
                     {"neg_pos_ratio": float(neg_pos_ratio), "neg_dist_threshold": float(neg_overlap),
                      "mining_type": mining_type, "sample_size": int(sample_size or 0)})
    # 4. Targets: encoded boxes (one sequence per image, like gt_box) and labels.
    encoded = L.box_coder(prior_box, prior_box_var, gt_box, code_type="encode_center_size")
    target_bbox, target_loc_weight = target_assign(encoded, updated_indices, mismatch_value=background_label)
    target_label, target_conf_weight = target_assign(gt_label, updated_indices, negative_indices=neg_indices,
                                                     mismatch_value=background_label)
    # 5. The losses.
    target_label = L.cast(flat(target_label), "int64")
    conf_loss = L.softmax_with_cross_entropy(confidence, target_label)
    target_conf_weight = flat(target_conf_weight)
    conf_loss = conf_loss * target_conf_weight
    target_label.stop_gradient = True
    target_conf_weight.stop_gradient = True
    location = flat(location)
    target_bbox = flat(target_bbox)
    loc_loss = L.smooth_l1(location, target_bbox)
    target_loc_weight = flat(target_loc_weight)
    loc_loss = loc_loss * target_loc_weight
    target_bbox.stop_gradient = True
    target_loc_weight.stop_gradient = True
    loss = conf_loss_weight * conf_loss + loc_loss_weight * loc_loss
    loss = L.reshape(loss, actual_shape)
    loss = L.reduce_sum(loss, dim=1, keep_dim=True)
    if normalize:
        loss = loss / L.reduce_sum(target_loc_weight)
    return loss


def _sampled_gather(L, bbox_pred, cls_logits, classes: int, loc_index, score_index):
    cls_logits = L.reshape(cls_logits, (-1, classes))
    bbox_pred = L.reshape(bbox_pred, (-1, 4))
    return L.gather(cls_logits, score_index), L.gather(bbox_pred, loc_index)


def rpn_target_assign(bbox_pred: Variable, cls_logits: Variable, anchor_box: Variable, anchor_var: Variable,
                      gt_boxes: Variable, is_crowd: Variable, im_info: Variable, rpn_batch_size_per_im: int = 256,
                      rpn_straddle_thresh: float = 0.0, rpn_fg_fraction: float = 0.5,
                      rpn_positive_overlap: float = 0.7, rpn_negative_overlap: float = 0.3,
                      use_random: bool = True):
    """Faster R-CNN's RPN targets: anchors inside the image (by ``rpn_straddle_thresh``) that
    best overlap a non-crowd ground truth or overlap one by ``rpn_positive_overlap`` are
    foreground, those below ``rpn_negative_overlap`` background; up to ``rpn_fg_fraction`` ×
    ``rpn_batch_size_per_im`` foreground and the rest background are sampled per image (at
    random with ``use_random``, from the program's seed; else the first ones). Returns
    (predicted scores [F + B, 1], predicted locations [F, 4], target labels [F + B, 1] int32,
    target deltas [F, 4], inside weights [F, 4]); the sampled counts depend on the data (padded,
    counted)."""
    L = _layers()
    helper = LayerHelper("rpn_target_assign")
    loc_index = helper.create_tmp("int32", stop_gradient=True)
    score_index = helper.create_tmp("int32", stop_gradient=True)
    target_label = helper.create_tmp("int32", stop_gradient=True)
    target_bbox = helper.create_tmp(anchor_box.dtype, stop_gradient=True)
    inside_weight = helper.create_tmp(anchor_box.dtype, stop_gradient=True)
    helper.append_op("rpn_target_assign",
                     {"Anchor": anchor_box, "GtBoxes": gt_boxes, "IsCrowd": is_crowd, "ImInfo": im_info},
                     {"LocationIndex": loc_index, "ScoreIndex": score_index, "TargetLabel": target_label,
                      "TargetBBox": target_bbox, "BBoxInsideWeight": inside_weight},
                     {"rpn_batch_size_per_im": int(rpn_batch_size_per_im),
                      "rpn_straddle_thresh": float(rpn_straddle_thresh),
                      "rpn_positive_overlap": float(rpn_positive_overlap),
                      "rpn_negative_overlap": float(rpn_negative_overlap),
                      "rpn_fg_fraction": float(rpn_fg_fraction), "use_random": bool(use_random)})
    scores, locations = _sampled_gather(L, bbox_pred, cls_logits, 1, loc_index, score_index)
    return scores, locations, target_label, target_bbox, inside_weight


def retinanet_target_assign(bbox_pred: Variable, cls_logits: Variable, anchor_box: Variable, anchor_var: Variable,
                            gt_boxes: Variable, gt_labels: Variable, is_crowd: Variable, im_info: Variable,
                            num_classes: int = 1, positive_overlap: float = 0.5, negative_overlap: float = 0.4):
    """RetinaNet's targets: like rpn_target_assign's rules without sampling (every foreground and
    background anchor; no straddle filter); foreground labels are their ground truth's class.
    Returns (predicted scores [F + B, num_classes], predicted locations [F, 4], target labels
    [F + B, 1] int32, target deltas [F, 4], inside weights [F, 4], foreground count + 1 per image
    [N, 1] int32)."""
    L = _layers()
    helper = LayerHelper("retinanet_target_assign")
    loc_index = helper.create_tmp("int32", stop_gradient=True)
    score_index = helper.create_tmp("int32", stop_gradient=True)
    target_label = helper.create_tmp("int32", stop_gradient=True)
    target_bbox = helper.create_tmp(anchor_box.dtype, stop_gradient=True)
    inside_weight = helper.create_tmp(anchor_box.dtype, stop_gradient=True)
    fg_num = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op("retinanet_target_assign",
                     {"Anchor": anchor_box, "GtBoxes": gt_boxes, "GtLabels": gt_labels, "IsCrowd": is_crowd,
                      "ImInfo": im_info},
                     {"LocationIndex": loc_index, "ScoreIndex": score_index, "TargetLabel": target_label,
                      "TargetBBox": target_bbox, "BBoxInsideWeight": inside_weight, "ForegroundNumber": fg_num},
                     {"positive_overlap": float(positive_overlap), "negative_overlap": float(negative_overlap)})
    scores, locations = _sampled_gather(L, bbox_pred, cls_logits, int(num_classes), loc_index, score_index)
    return scores, locations, target_label, target_bbox, inside_weight, fg_num


def yolov3_loss(x: Variable, gt_box: Variable, gt_label: Variable, anchors: Sequence[int], anchor_mask: Sequence[int],
                class_num: int, ignore_thresh: float, downsample_ratio: int, gt_score: Variable | None = None,
                use_label_smooth: bool = True, name: str | None = None, scale_x_y: float = 1.0) -> Variable:
    """YOLOv3's loss [N] of the head ``x`` [N, len(anchor_mask)·(5 + class_num), H, W] against
    ``gt_box`` [N, B, 4] (normalised centre x, y, width, height), ``gt_label`` [N, B] int32 and
    optional ``gt_score`` [N, B]: location (sigmoid cross-entropy on x, y; L1 on log sizes, scaled
    by 2 - w·h), objectness (predictions overlapping a ground truth above ``ignore_thresh`` are
    ignored) and class terms (label smoothing as Paddle 2.6's kernel: min(1/class_num, 1/40))."""
    for what, value in (("anchors", anchors), ("anchor_mask", anchor_mask)):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"yolov3_loss: {what} must be a list or tuple of ints")
    if not isinstance(class_num, int):
        raise TypeError("yolov3_loss: class_num must be an int")
    helper = LayerHelper("yolov3_loss", name)
    loss = helper.create_tmp(x.dtype)
    objectness_mask = helper.create_tmp(x.dtype, stop_gradient=True)
    match_mask = helper.create_tmp("int32", stop_gradient=True)
    inputs = {"X": x, "GTBox": gt_box, "GTLabel": gt_label}
    if gt_score is not None:
        inputs["GTScore"] = gt_score
    helper.append_op("yolov3_loss", inputs,
                     {"Loss": loss, "ObjectnessMask": objectness_mask, "GTMatchMask": match_mask},
                     {"anchors": [int(a) for a in anchors], "anchor_mask": [int(a) for a in anchor_mask],
                      "class_num": class_num, "ignore_thresh": float(ignore_thresh),
                      "downsample_ratio": int(downsample_ratio), "use_label_smooth": bool(use_label_smooth),
                      "scale_x_y": float(scale_x_y)})
    return loss


def generate_proposal_labels(rpn_rois: Variable, gt_classes: Variable, is_crowd: Variable, gt_boxes: Variable,
                             im_info: Variable, batch_size_per_im: int = 256, fg_fraction: float = 0.25,
                             fg_thresh: float = 0.25, bg_thresh_hi: float = 0.5, bg_thresh_lo: float = 0.0,
                             bbox_reg_weights: Sequence[float] = (0.1, 0.1, 0.2, 0.2), class_nums: int | None = None,
                             use_random: bool = True, is_cls_agnostic: bool = False, is_cascade_rcnn: bool = False,
                             *, max_overlap: Variable | None = None, return_max_overlap: bool = False):
    """Fast R-CNN's training ROIs per image (op ``generate_proposal_labels``): the image's ground
    truths and ``rpn_rois`` (LoD, one sequence per image) labelled by their best IoU with the
    ground truths (``gt_boxes``, ``gt_classes``, ``is_crowd``: LoD), foreground at ``fg_thresh``,
    background in [``bg_thresh_lo``, ``bg_thresh_hi``), sampled to ``batch_size_per_im`` with at
    most ``fg_fraction`` of foreground (the first ones, or with ``use_random`` a uniform subset
    drawn from the program's seed; no sampling with ``is_cascade_rcnn``). Returns (rois [P, 4],
    labels_int32 [P, 1], bbox_targets, bbox_inside_weights, bbox_outside_weights [P, 4·class_nums]),
    LoD per image; P depends on the data (padded, counted). Keyword-only, as in Paddle 2.x:
    ``max_overlap`` (the cascade stage's MaxOverlap input) and ``return_max_overlap`` (also return
    each ROI's best overlap). The op always declares its MaxOverlapWithGT output, which Fluid 1.8's
    op lacked and Paddle 2.6's kernel writes unconditionally."""
    if not isinstance(class_nums, int) or class_nums <= 0:
        raise ValueError(f"generate_proposal_labels: class_nums must be a positive int, got {class_nums!r}")
    helper = LayerHelper("generate_proposal_labels")
    rois = helper.create_tmp(rpn_rois.dtype, stop_gradient=True)
    labels = helper.create_tmp(gt_classes.dtype, stop_gradient=True)
    targets = helper.create_tmp(rpn_rois.dtype, stop_gradient=True)
    inside = helper.create_tmp(rpn_rois.dtype, stop_gradient=True)
    outside = helper.create_tmp(rpn_rois.dtype, stop_gradient=True)
    overlap = helper.create_tmp(rpn_rois.dtype, stop_gradient=True)
    inputs = {"RpnRois": rpn_rois, "GtClasses": gt_classes, "IsCrowd": is_crowd, "GtBoxes": gt_boxes,
              "ImInfo": im_info}
    if max_overlap is not None:
        inputs["MaxOverlap"] = max_overlap
    helper.append_op("generate_proposal_labels", inputs,
                     {"Rois": rois, "LabelsInt32": labels, "BboxTargets": targets, "BboxInsideWeights": inside,
                      "BboxOutsideWeights": outside, "MaxOverlapWithGT": overlap},
                     {"batch_size_per_im": int(batch_size_per_im), "fg_fraction": float(fg_fraction),
                      "fg_thresh": float(fg_thresh), "bg_thresh_hi": float(bg_thresh_hi),
                      "bg_thresh_lo": float(bg_thresh_lo), "bbox_reg_weights": [float(w) for w in bbox_reg_weights],
                      "class_nums": int(class_nums), "use_random": bool(use_random),
                      "is_cls_agnostic": bool(is_cls_agnostic), "is_cascade_rcnn": bool(is_cascade_rcnn)})
    if return_max_overlap:
        return rois, labels, targets, inside, outside, overlap
    return rois, labels, targets, inside, outside


def generate_mask_labels(im_info: Variable, gt_classes: Variable, is_crowd: Variable, gt_segms: Variable,
                         rois: Variable, labels_int32: Variable, num_classes: int, resolution: int):
    """Mask R-CNN's mask targets (op ``generate_mask_labels``): each foreground ROI of ``rois``
    (``labels_int32`` > 0; LoD per image) gets the polygons (``gt_segms``: [S, 2] points, LoD
    images → objects → polygons) of the non-crowd ground truth whose polygon box it overlaps most,
    rasterized into a ``resolution``² grid over the ROI by COCO's polygon rule. Returns (mask_rois
    [P, 4], roi_has_mask_int32 [P, 1] (index of the ROI within its image), mask_int32 [P,
    num_classes·resolution²] (-1 outside the ROI's class block)); an image without foreground ROIs
    gives one all -1 row. P depends on the data (padded to the ROI rows, counted)."""
    helper = LayerHelper("generate_mask_labels")
    mask_rois = helper.create_tmp(rois.dtype, stop_gradient=True)
    has_mask = helper.create_tmp(gt_classes.dtype, stop_gradient=True)
    mask = helper.create_tmp(gt_classes.dtype, stop_gradient=True)
    helper.append_op("generate_mask_labels",
                     {"ImInfo": im_info, "GtClasses": gt_classes, "IsCrowd": is_crowd, "GtSegms": gt_segms,
                      "Rois": rois, "LabelsInt32": labels_int32},
                     {"MaskRois": mask_rois, "RoiHasMaskInt32": has_mask, "MaskInt32": mask},
                     {"num_classes": int(num_classes), "resolution": int(resolution)})
    return mask_rois, has_mask, mask
