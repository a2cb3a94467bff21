"""Op-table rows: the vision ops of ``lowering/ops/vision.py`` (pixel_shuffle, conv3d, pool3d,
linear/bicubic/trilinear resizing, affine_grid, grid_sampler, and the detection ops)."""

import numpy as np

from . import Case, rand


def _distinct(*shape, dtype="float32"):
    """Distinct values (no ties for max pooling)."""
    n = int(np.prod(shape))
    return (np.random.default_rng(n + 3).permutation(n).reshape(shape) / n - 0.5).astype(dtype)


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
]
