"""Op-table rows: the vision ops of ``lowering/ops/`` resize.py, conv.py, pooling.py and
detection.py (pixel_shuffle, conv3d, pool3d, linear/bicubic/trilinear resizing, affine_grid,
grid_sampler, and the detection ops)."""

import numpy as np

from . import Case, rand


def _distinct(*shape, dtype="float32"):
    """Distinct values (no ties for max pooling)."""
    n = int(np.prod(shape))
    return (np.random.default_rng(n + 3).permutation(n).reshape(shape) / n - 0.5).astype(dtype)


def _rois(n, h, w, seed, min_size=1.0):
    """n boxes [x1, y1, x2, y2] inside an h × w image (in its pixels)."""
    rng = np.random.default_rng(seed)
    x1, y1 = rng.uniform(0, w * 0.6, n), rng.uniform(0, h * 0.6, n)
    x2, y2 = x1 + rng.uniform(min_size, w * 0.4, n), y1 + rng.uniform(min_size, h * 0.4, n)
    return np.stack([x1, y1, x2, y2], axis=1).astype("float32")


def _boxes(n, seed, dtype="float32"):
    """n normalised corner boxes with positive sizes."""
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 0.6, (n, 2))
    return np.concatenate([xy, xy + rng.uniform(0.1, 0.4, (n, 2))], axis=1).astype(dtype)


CONV = dict(outputs=("Output",), rtol=1e-4, atol=1e-5, grad_rtol=1e-3, grad_atol=1e-4)
INTERP = dict(rtol=1e-5, atol=1e-5, grad_rtol=1e-4, grad_atol=1e-5)

CASES = [
    Case("pixel_shuffle", {"X": rand(2, 8, 3, 2)}, {"upscale_factor": 2}),
    Case("pixel_shuffle", {"X": rand(2, 3, 2, 9, dtype="float64")}, {"upscale_factor": 3, "data_format": "NHWC"},
         name="nhwc_f64"),
    Case("conv3d", {"Input": rand(2, 3, 4, 5, 5), "Filter": rand(4, 3, 3, 3, 2)}, {}, **CONV),
    Case("conv3d", {"Input": rand(2, 4, 5, 4, 6), "Filter": rand(6, 2, 3, 2, 3)},
         {"strides": [2, 1, 2], "paddings": [1, 0, 1, 1, 2, 0], "dilations": [1, 2, 1], "groups": 2},
         name="stride_pad6_groups", **CONV),
    Case("conv3d", {"Input": rand(2, 4, 5, 5, 3), "Filter": rand(2, 3, 3, 3, 3)},
         {"strides": [2, 2, 2], "padding_algorithm": "SAME", "data_format": "NDHWC"}, name="same_ndhwc", **CONV),
    Case("conv3d", {"Input": rand(1, 2, 3, 4, 4, dtype="float64"), "Filter": rand(2, 2, 2, 3, 3, dtype="float64")},
         {"paddings": [1, 1, 1]}, name="f64", **CONV),
    Case("pool3d", {"X": _distinct(2, 2, 4, 6, 5)}, {"pooling_type": "max", "ksize": [2, 2, 2], "strides": [2, 2, 2]},
         name="max"),
    Case("pool3d", {"X": _distinct(2, 2, 5, 5, 6)},
         {"pooling_type": "max", "ksize": [3, 3, 2], "strides": [2, 2, 2], "paddings": [1, 1, 0], "ceil_mode": True},
         name="max_pad_ceil"),
    Case("pool3d", {"X": rand(2, 2, 5, 4, 6)},
         {"pooling_type": "avg", "ksize": [3, 2, 3], "strides": [2, 2, 2], "paddings": [1, 0, 1]}, name="avg"),
    Case("pool3d", {"X": rand(2, 2, 5, 4, 6, dtype="float64")},
         {"pooling_type": "avg", "ksize": [3, 2, 3], "strides": [2, 1, 2], "paddings": [1, 1, 1],
          "exclusive": False}, name="avg_inclusive_f64"),
    Case("pool3d", {"X": rand(2, 3, 4, 5, 6)}, {"pooling_type": "avg", "global_pooling": True}, name="global"),
    Case("pool3d", {"X": rand(2, 3, 5, 7, 6)}, {"pooling_type": "avg", "adaptive": True, "ksize": [2, 3, 1]},
         name="adaptive_avg"),
    Case("pool3d", {"X": _distinct(2, 5, 6, 4, 3)},
         {"pooling_type": "max", "ksize": [2, 2, 2], "strides": [2, 2, 1], "data_format": "NDHWC"}, name="ndhwc"),
    Case("linear_interp_v2", {"X": rand(2, 3, 5)}, {"out_w": 8, "interp_method": "linear"}, **INTERP),
    Case("linear_interp_v2", {"X": rand(2, 3, 5, dtype="float64")},
         {"out_w": 7, "interp_method": "linear", "align_corners": False, "align_mode": 0}, name="half_pixel_f64",
         **INTERP),
    Case("linear_interp_v2", {"X": rand(2, 6, 3)},
         {"scale": [1.5], "interp_method": "linear", "align_corners": False, "align_mode": 1, "data_layout": "NHWC"},
         name="scale_nwc", **INTERP),
    Case("trilinear_interp_v2", {"X": rand(1, 2, 3, 4, 3)},
         {"out_d": 5, "out_h": 6, "out_w": 4, "interp_method": "trilinear"}, **INTERP),
    Case("trilinear_interp_v2", {"X": rand(1, 2, 3, 4, 3, dtype="float64")},
         {"out_d": 4, "out_h": 3, "out_w": 5, "interp_method": "trilinear", "align_corners": False, "align_mode": 0},
         name="half_pixel_f64", **INTERP),
    Case("trilinear_interp_v2", {"X": rand(1, 3, 4, 3, 2)},
         {"scale": [2.0, 1.5, 0.5], "interp_method": "trilinear", "align_corners": False, "data_layout": "NDHWC"},
         name="scale_ndhwc", **INTERP),
    Case("bicubic_interp_v2", {"X": rand(2, 2, 4, 5)}, {"out_h": 7, "out_w": 6, "interp_method": "bicubic"},
         **INTERP),
    Case("bicubic_interp_v2", {"X": rand(2, 2, 5, 4, dtype="float64")},
         {"out_h": 3, "out_w": 9, "interp_method": "bicubic", "align_corners": False}, name="half_pixel_f64", **INTERP),
    Case("bicubic_interp_v2", {"X": rand(1, 4, 5, 2)},
         {"scale": [1.6, 2.0], "interp_method": "bicubic", "align_corners": False, "data_layout": "NHWC"},
         name="scale_nhwc", **INTERP),
    Case("affine_grid", {"Theta": rand(2, 2, 3)}, {"output_shape": [2, 3, 4, 5]}, outputs=("Output",)),
    Case("affine_grid", {"Theta": rand(2, 2, 3, dtype="float64")}, {"output_shape": [2, 1, 3, 4],
                                                                   "align_corners": False},
         outputs=("Output",), name="unaligned_f64"),
    Case("affine_grid", {"Theta": rand(2, 3, 4)}, {"output_shape": [2, 1, 2, 3, 4]}, outputs=("Output",), name="3d"),
    Case("grid_sampler", {"X": rand(2, 3, 4, 5), "Grid": rand(2, 3, 2, 2, low=-1.1, high=1.1)}, {},
         outputs=("Output",), rtol=1e-5, atol=1e-5, grad_rtol=1e-3, grad_atol=1e-4),
    Case("grid_sampler", {"X": rand(2, 2, 4, 5, dtype="float64"), "Grid": rand(2, 3, 4, 2, low=-1.3, high=1.3,
                                                                                dtype="float64")},
         {"align_corners": False, "padding_mode": "border"}, outputs=("Output",), name="border_f64"),
    Case("grid_sampler", {"X": rand(2, 2, 4, 5, dtype="float64"), "Grid": rand(2, 3, 4, 2, low=-1.8, high=1.8,
                                                                                dtype="float64")},
         {"align_corners": False, "padding_mode": "reflection"}, outputs=("Output",), name="reflection_f64"),
    Case("grid_sampler", {"X": rand(2, 2, 4, 5, dtype="float64"), "Grid": rand(2, 3, 4, 2, low=-1.8, high=1.8,
                                                                                dtype="float64")},
         {"align_corners": True, "padding_mode": "reflection"}, outputs=("Output",), name="reflection_aligned_f64"),
    Case("grid_sampler", {"X": rand(2, 3, 4, 5), "Grid": rand(2, 3, 2, 2, low=-1.1, high=1.1)},
         {"mode": "nearest"}, outputs=("Output",), grad=("X",), name="nearest"),
    Case("grid_sampler", {"X": rand(1, 2, 3, 4, 5), "Grid": rand(1, 2, 3, 2, 3, low=-1.1, high=1.1)},
         {"align_corners": False}, outputs=("Output",), name="3d", rtol=1e-5, atol=1e-5, grad_rtol=1e-3,
         grad_atol=1e-4),
    Case("roi_align", {"X": rand(2, 3, 6, 8), "ROIs": _rois(5, 12, 16, 1), "RoisNum": np.array([2, 3], "int32")},
         {"pooled_height": 2, "pooled_width": 3, "spatial_scale": 0.5, "sampling_ratio": 2}, grad=("X",),
         batch_dims=("X",)),
    Case("roi_align", {"X": rand(2, 2, 6, 7, dtype="float64"), "ROIs": _rois(4, 6, 7, 2).astype("float64"),
                       "RoisNum": np.array([3, 1], "int32")},
         {"pooled_height": 3, "pooled_width": 2, "spatial_scale": 1.0, "sampling_ratio": -1}, grad=("X",),
         batch_dims=("X",), name="adaptive_grid_f64"),
    # ROIs of at least a pixel (after spatial_scale): Paddle's grad kernel widens smaller aligned ones.
    Case("roi_align", {"X": rand(1, 2, 5, 6), "ROIs": _rois(3, 10, 12, 3, min_size=2.5),
                       "RoisNum": np.array([3], "int32")},
         {"pooled_height": 2, "pooled_width": 2, "spatial_scale": 0.5, "sampling_ratio": -1, "aligned": True},
         grad=("X",), batch_dims=("X",), name="aligned"),
    Case("box_coder", {"PriorBox": _boxes(3, 1), "PriorBoxVar": np.full((3, 4), 0.2, "float32"),
                       "TargetBox": _boxes(4, 2)}, {"code_type": "encode_center_size"}, outputs=("OutputBox",)),
    Case("box_coder", {"PriorBox": _boxes(3, 3) * 20, "TargetBox": _boxes(2, 4) * 20},
         {"code_type": "encode_center_size", "box_normalized": False, "variance": [0.1, 0.1, 0.2, 0.2]},
         outputs=("OutputBox",), name="pixels_variance_attr"),
    Case("box_coder", {"PriorBox": _boxes(3, 5), "PriorBoxVar": np.full((3, 4), 0.1, "float32"),
                       "TargetBox": rand(2, 3, 4)}, {"code_type": "decode_center_size"}, outputs=("OutputBox",),
         name="decode"),
    Case("box_coder", {"PriorBox": _boxes(2, 6) * 30, "TargetBox": rand(2, 3, 4)},
         {"code_type": "decode_center_size", "box_normalized": False, "axis": 1, "variance": [0.1, 0.1, 0.2, 0.2]},
         outputs=("OutputBox",), name="decode_axis1", batch_dims=()),
    Case("prior_box", {"Input": rand(1, 2, 3, 4), "Image": rand(1, 3, 12, 16)},
         {"min_sizes": [2.0, 4.0], "max_sizes": [3.0, 6.0], "aspect_ratios": [2.0], "flip": True, "clip": True,
          "variances": [0.1, 0.1, 0.2, 0.2]}, outputs=("Boxes", "Variances")),
    Case("prior_box", {"Input": rand(1, 2, 3, 3), "Image": rand(1, 3, 10, 11)},
         {"min_sizes": [3.0], "max_sizes": [5.0], "aspect_ratios": [2.0, 3.0, 2.0], "flip": False,
          "variances": [0.1, 0.1, 0.2, 0.2], "step_w": 3.5, "step_h": 3.0, "offset": 0.4,
          "min_max_aspect_ratios_order": True}, outputs=("Boxes", "Variances"), name="order_steps"),
    Case("yolo_box", {"X": rand(2, 2 * 8, 3, 4, low=-3, high=3), "ImgSize": np.array([[96, 128], [64, 80]], "int32")},
         {"anchors": [10, 13, 16, 30], "class_num": 3, "conf_thresh": 0.5, "downsample_ratio": 32},
         outputs=("Boxes", "Scores"), rtol=1e-5, atol=1e-4),
    Case("yolo_box", {"X": rand(1, 3 * 8, 2, 3, low=-3, high=3), "ImgSize": np.array([[50, 70]], "int32")},
         {"anchors": [10, 13, 16, 30, 33, 23], "class_num": 2, "conf_thresh": 0.3, "downsample_ratio": 16,
          "clip_bbox": False, "scale_x_y": 1.05, "iou_aware": True, "iou_aware_factor": 0.4},
         outputs=("Boxes", "Scores"), name="iou_aware", rtol=1e-5, atol=1e-4),
]


# -- NMS: data-dependent row counts, exact rows against Paddle (custom checks) ----------------------
def _nms_inputs(n, m, c, seed, pixels=False):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 0.6, (n, m, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(0.1, 0.4, (n, m, 2))], -1)
    if pixels:
        boxes = np.round(boxes * 40)
    # Distinct scores: the order of equal scores is a tie-break detail.
    scores = rng.permutation(n * c * m).reshape(n, c, m) / (n * c * m) + 0.01
    return boxes.astype("float32"), scores.astype("float32")


def _nms_case(op, inputs, attrs, name, outputs):
    from .extra_cases import _rows_match_paddle

    return Case(op, {"BBoxes": inputs[0], "Scores": inputs[1]}, attrs, outputs=outputs, name=name,
                check=_rows_match_paddle())


_MC = ("Out", "Index", "NmsRoisNum")
_MX = ("Out", "Index", "RoisNum")
CASES += [
    _nms_case("multiclass_nms3", _nms_inputs(2, 6, 3, 1), {"score_threshold": 0.3, "nms_top_k": 4, "keep_top_k": 5,
                                                           "nms_threshold": 0.3}, "", _MC),
    _nms_case("multiclass_nms3", _nms_inputs(2, 8, 4, 2), {"score_threshold": 0.1, "nms_top_k": -1, "keep_top_k": -1,
                                                           "nms_threshold": 0.5, "background_label": -1},
              "all_classes", _MC),
    _nms_case("multiclass_nms3", _nms_inputs(1, 8, 3, 3, pixels=True),
              {"score_threshold": 0.2, "nms_top_k": 6, "keep_top_k": 4, "nms_threshold": 0.6, "nms_eta": 0.7,
               "normalized": False}, "pixels_eta", _MC),
    _nms_case("multiclass_nms3", _nms_inputs(2, 4, 2, 4), {"score_threshold": 2.0, "keep_top_k": 3},
              "none_kept", _MC),
    _nms_case("matrix_nms", _nms_inputs(2, 6, 3, 1), {"score_threshold": 0.3, "post_threshold": 0.2, "nms_top_k": 4,
                                                      "keep_top_k": 5}, "", _MX),
    _nms_case("matrix_nms", _nms_inputs(2, 7, 3, 5), {"score_threshold": 0.1, "post_threshold": 0.1, "nms_top_k": -1,
                                                      "keep_top_k": -1, "use_gaussian": True, "gaussian_sigma": 3.0,
                                                      "background_label": -1}, "gaussian", _MX),
]


def _offsets(n, dg, k, oh, ow, seed, dtype="float32"):
    """Offsets that keep samples away from integer positions (bilinear kinks)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(-2, 3, (n, 2 * dg * k, oh, ow))
    return (base + rng.uniform(0.15, 0.85, base.shape)).astype(dtype)


# im2col_step 1, as Paddle's Python API writes it: with 64 (the op's default) Paddle's CPU grad kernel
# leaves Input@GRAD at zero for a batch of 2.
DEFORM = dict(outputs=("Output",), rtol=1e-4, atol=1e-5, grad_rtol=1e-3, grad_atol=1e-4)
CASES += [
    Case("deformable_conv", {"Input": rand(2, 4, 5, 6), "Offset": _offsets(2, 2, 9, 5, 6, 1),
                             "Filter": rand(6, 2, 3, 3), "Mask": rand(2, 2 * 9, 5, 6, low=0.1, high=1.0)},
         {"paddings": [1, 1], "deformable_groups": 2, "groups": 2, "im2col_step": 1}, **DEFORM),
    Case("deformable_conv", {"Input": rand(1, 2, 6, 6, dtype="float64"),
                             "Offset": _offsets(1, 1, 4, 3, 3, 2, "float64"), "Filter": rand(3, 2, 2, 2, dtype="float64"),
                             "Mask": rand(1, 4, 3, 3, low=0.1, high=1.0, dtype="float64")},
         {"strides": [2, 2], "paddings": [0, 0], "dilations": [1, 1], "im2col_step": 1}, name="stride_f64", **DEFORM),
    Case("deformable_conv_v1", {"Input": rand(2, 3, 5, 5), "Offset": _offsets(2, 1, 9, 3, 3, 3),
                                "Filter": rand(4, 3, 3, 3)}, {"dilations": [2, 2], "paddings": [1, 1], "im2col_step": 1}, **DEFORM),
]


def _rpn_inputs(n, a, h, w, seed, stride=8.0):
    rng = np.random.default_rng(seed)
    scores = (rng.permutation(n * a * h * w).reshape(n, a, h, w) / (n * a * h * w)).astype("float32")
    deltas = rng.uniform(-0.5, 0.5, (n, 4 * a, h, w)).astype("float32")
    sizes = np.array([[12.0, 12.0], [20.0, 10.0], [8.0, 16.0]][:a], "float32")
    cy, cx = np.meshgrid(np.arange(h) * stride + stride / 2, np.arange(w) * stride + stride / 2, indexing="ij")
    centers = np.stack([cx, cy], -1)[:, :, None, :]                                         # [H, W, 1, 2]
    anchors = np.concatenate([centers - sizes / 2, centers + sizes / 2], -1).astype("float32")  # [H, W, A, 4]
    variances = np.broadcast_to(np.array([1.0, 1.0, 1.0, 1.0], "float32"), anchors.shape).copy()
    im = np.array([[h * stride, w * stride]] * n, "float32")
    return {"Scores": scores, "BboxDeltas": deltas, "ImShape": im, "Anchors": anchors, "Variances": variances}


def _rpn_case(inputs, attrs, name):
    from .extra_cases import _rows_match_paddle

    return Case("generate_proposals_v2", inputs, attrs, outputs=("RpnRois", "RpnRoiProbs", "RpnRoisNum"), name=name,
                rtol=1e-5, atol=1e-4, check=_rows_match_paddle())


CASES += [
    _rpn_case(_rpn_inputs(2, 3, 4, 5, 1), {"pre_nms_topN": 40, "post_nms_topN": 12, "nms_thresh": 0.5,
                                           "min_size": 2.0}, ""),
    _rpn_case(_rpn_inputs(1, 2, 3, 3, 2), {"pre_nms_topN": -1, "post_nms_topN": -1, "nms_thresh": 0.6, "eta": 0.8,
                                           "min_size": 0.5, "pixel_offset": False}, "no_offset_eta"),
    _rpn_case(_rpn_inputs(2, 1, 2, 2, 3), {"pre_nms_topN": 4, "post_nms_topN": 3, "nms_thresh": 0.5,
                                           "min_size": 1000.0}, "none_left"),
]


def _fpn_rois(n, seed):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 300, (n, 2))
    size = np.exp(rng.uniform(np.log(8), np.log(600), (n, 2)))
    return np.concatenate([xy, xy + size], 1).astype("float32")


def _fpn_case(inputs, attrs, name, levels):
    from .extra_cases import _rows_match_paddle

    counts = {"MultiFpnRois": levels, "MultiLevelRoIsNum": levels}
    return Case("distribute_fpn_proposals", inputs, attrs,
                outputs=("MultiFpnRois", "RestoreIndex", "MultiLevelRoIsNum"), output_counts=counts, name=name,
                check=_rows_match_paddle())


CASES += [
    _fpn_case({"FpnRois": _fpn_rois(12, 1), "RoisNum": np.array([5, 7], "int32")},
              {"min_level": 2, "max_level": 5, "refer_level": 4, "refer_scale": 224}, "", 4),
    _fpn_case({"FpnRois": _fpn_rois(9, 2), "RoisNum": np.array([9], "int32")},
              {"min_level": 3, "max_level": 5, "refer_level": 4, "refer_scale": 112, "pixel_offset": False},
              "no_offset", 3),
]

CASES += [
    Case("roi_pool", {"X": _distinct(2, 3, 6, 8), "ROIs": _rois(5, 12, 16, 4), "RoisNum": np.array([2, 3], "int32")},
         {"pooled_height": 2, "pooled_width": 3, "spatial_scale": 0.5}, outputs=("Out", "Argmax"), grad=("X",),
         batch_dims=("X",)),
    Case("roi_pool", {"X": _distinct(1, 2, 5, 6).astype("float64"), "ROIs": _rois(3, 5, 6, 5).astype("float64"),
                      "RoisNum": np.array([3], "int32")},
         {"pooled_height": 3, "pooled_width": 2, "spatial_scale": 1.0}, outputs=("Out", "Argmax"), grad=("X",),
         batch_dims=("X",), name="f64"),
]
