"""Op-table rows: conv2d, depthwise_conv2d, conv2d_transpose, pool2d."""

import numpy as np

from . import Case, rand


def _distinct(*shape, dtype="float32"):
    """Distinct values (no ties for max pooling, whose gradient picks one element)."""
    n = int(np.prod(shape))
    return (np.random.default_rng(n + 11).permutation(n).reshape(shape) / n - 0.5).astype(dtype)


def _adaptive_ref(inputs, attrs):
    """NumPy adaptive pooling: bin i covers [floor(i·in/out), ceil((i+1)·in/out))."""
    x = np.asarray(inputs["X"])
    last = attrs.get("data_format") == "NHWC"
    if last:
        x = x.transpose(0, 3, 1, 2)
    oh, ow = attrs["ksize"]
    h, w = x.shape[2:]
    fn = np.max if attrs.get("pooling_type", "max") == "max" else np.mean
    out = np.empty(x.shape[:2] + (oh, ow), x.dtype)
    for i in range(oh):
        hs, he = (i * h) // oh, -((-(i + 1) * h) // oh)
        for j in range(ow):
            ws, we = (j * w) // ow, -((-(j + 1) * w) // ow)
            out[:, :, i, j] = fn(x[:, :, hs:he, ws:we], axis=(2, 3))
    return {"Out": out.transpose(0, 2, 3, 1) if last else out}


CONV = dict(outputs=("Output",), batch_dims=("Input",), rtol=1e-4, atol=1e-5, grad_rtol=1e-3, grad_atol=1e-4)
POOL = dict(rtol=1e-5, atol=1e-6)

CASES = [
    Case("conv2d", {"Input": rand(2, 3, 7, 8), "Filter": rand(4, 3, 3, 3)}, {}, **CONV),
    Case("conv2d", {"Input": rand(2, 3, 7, 8), "Filter": rand(4, 3, 3, 2)},
         {"strides": [2, 1], "paddings": [1, 2]}, name="stride_pad", **CONV),
    Case("conv2d", {"Input": rand(2, 3, 7, 8), "Filter": rand(4, 3, 3, 3)},
         {"strides": [2, 2], "paddings": [1, 0, 2, 1], "dilations": [2, 1]}, name="pad4_dilation", **CONV),
    Case("conv2d", {"Input": rand(2, 4, 6, 6), "Filter": rand(6, 2, 3, 3)}, {"groups": 2, "paddings": [1, 1]},
         name="groups", **CONV),
    Case("conv2d", {"Input": rand(2, 3, 7, 8), "Filter": rand(4, 3, 3, 3)},
         {"strides": [2, 2], "padding_algorithm": "SAME", "dilations": [2, 2]}, name="same", **CONV),
    Case("conv2d", {"Input": rand(2, 3, 7, 8), "Filter": rand(4, 3, 3, 3)},
         {"strides": [2, 2], "padding_algorithm": "VALID", "paddings": [3, 3]}, name="valid", **CONV),
    Case("conv2d", {"Input": rand(2, 7, 8, 3), "Filter": rand(4, 3, 3, 3)},
         {"strides": [2, 1], "paddings": [1, 1], "data_format": "NHWC"}, name="nhwc", **CONV),
    # few input channels, channel-last: lowered as patches x filter (2x3 window, asymmetric padding)
    Case("conv2d", {"Input": rand(2, 5, 6, 2, dtype="float64"), "Filter": rand(3, 2, 2, 3, dtype="float64")},
         {"strides": [1, 2], "paddings": [1, 0, 0, 2], "data_format": "NHWC"}, name="nhwc_patches_f64", **CONV),
    Case("conv2d", {"Input": rand(2, 3, 5, 5, dtype="float64"), "Filter": rand(2, 3, 3, 3, dtype="float64")},
         {"paddings": [1, 1], "strides": [2, 2]}, name="f64", **CONV),
    Case("depthwise_conv2d", {"Input": rand(2, 3, 7, 8), "Filter": rand(6, 1, 3, 3)},
         {"groups": 3, "paddings": [1, 1], "strides": [2, 2]}, **CONV),
    Case("depthwise_conv2d", {"Input": rand(2, 7, 8, 3), "Filter": rand(3, 1, 3, 3)},
         {"groups": 3, "paddings": [1, 1], "data_format": "NHWC"}, name="nhwc", **CONV),
    Case("conv2d_transpose", {"Input": rand(2, 3, 4, 5), "Filter": rand(3, 4, 3, 3)}, {}, **CONV),
    Case("conv2d_transpose", {"Input": rand(2, 3, 4, 5), "Filter": rand(3, 4, 3, 2)},
         {"strides": [2, 3], "paddings": [1, 0]}, name="stride_pad", **CONV),
    Case("conv2d_transpose", {"Input": rand(2, 3, 4, 5), "Filter": rand(3, 4, 3, 3)},
         {"strides": [2, 2], "paddings": [1, 0, 2, 1], "dilations": [2, 1]}, name="pad4_dilation", **CONV),
    Case("conv2d_transpose", {"Input": rand(2, 4, 4, 5), "Filter": rand(4, 3, 3, 3)},
         {"groups": 2, "paddings": [1, 1], "strides": [2, 2]}, name="groups", **CONV),
    Case("conv2d_transpose", {"Input": rand(2, 3, 4, 5), "Filter": rand(3, 4, 3, 3)},
         {"strides": [2, 2], "paddings": [1, 1], "output_size": [8, 10]}, name="output_size", **CONV),
    Case("conv2d_transpose", {"Input": rand(2, 3, 4, 5), "Filter": rand(3, 4, 3, 3)},
         {"strides": [2, 2], "paddings": [1, 1], "output_padding": [1, 1]}, name="output_padding", **CONV),
    Case("conv2d_transpose", {"Input": rand(2, 3, 4, 5), "Filter": rand(3, 4, 3, 3)},
         {"strides": [2, 2], "padding_algorithm": "SAME"}, name="same", **CONV),
    Case("conv2d_transpose", {"Input": rand(2, 4, 5, 3), "Filter": rand(3, 4, 3, 3)},
         {"strides": [2, 1], "paddings": [1, 1], "data_format": "NHWC"}, name="nhwc", **CONV),
    Case("conv2d_transpose", {"Input": rand(2, 2, 3, 3, dtype="float64"), "Filter": rand(2, 2, 3, 3, dtype="float64")},
         {"strides": [2, 2], "paddings": [1, 1]}, name="f64", **CONV),
    Case("pool2d", {"X": _distinct(2, 3, 6, 8)}, {"pooling_type": "max", "ksize": [2, 2], "strides": [2, 2]},
         name="max", **POOL),
    Case("pool2d", {"X": _distinct(2, 3, 7, 8)},
         {"pooling_type": "max", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]}, name="max_pad", **POOL),
    Case("pool2d", {"X": _distinct(2, 3, 7, 8)},
         {"pooling_type": "max", "ksize": [3, 2], "strides": [2, 3], "paddings": [1, 0], "ceil_mode": True},
         name="max_ceil", **POOL),
    Case("pool2d", {"X": _distinct(2, 3, 7, 8)},
         {"pooling_type": "max", "ksize": [3, 3], "strides": [2, 2], "padding_algorithm": "SAME"},
         name="max_same", **POOL),
    Case("pool2d", {"X": _distinct(2, 7, 8, 3)},
         {"pooling_type": "max", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1], "data_format": "NHWC"},
         name="max_nhwc", **POOL),
    Case("pool2d", {"X": _distinct(2, 3, 5, 6, dtype="float64")},
         {"pooling_type": "max", "ksize": [2, 2], "strides": [1, 2], "paddings": [0, 1, 1, 0]},
         name="max_pad4_f64", **POOL),
    Case("pool2d", {"X": rand(2, 3, 7, 8)},
         {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]}, name="avg", **POOL),
    Case("pool2d", {"X": rand(2, 3, 7, 8)},
         {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1], "exclusive": False},
         name="avg_inclusive", **POOL),
    Case("pool2d", {"X": rand(2, 3, 7, 8)},
         {"pooling_type": "avg", "ksize": [3, 2], "strides": [2, 3], "paddings": [1, 0], "ceil_mode": True},
         name="avg_ceil", **POOL),
    Case("pool2d", {"X": rand(2, 3, 7, 8)},
         {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [0, 1, 1, 0], "exclusive": False},
         name="avg_pad4_inclusive", **POOL),
    Case("pool2d", {"X": rand(2, 3, 5, 8)},
         {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1], "ceil_mode": True,
          "exclusive": False}, name="avg_ceil_inclusive", **POOL),
    Case("pool2d", {"X": rand(2, 3, 6, 8)},
         {"pooling_type": "avg", "ksize": [4, 4], "strides": [3, 3], "paddings": [2, 0, 0, 2], "exclusive": False},
         name="avg_asymmetric_inclusive", **POOL),
    Case("pool2d", {"X": rand(2, 3, 6, 8)},
         {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 0, 0, 1], "ceil_mode": True},
         name="avg_asymmetric_ceil", **POOL),
    Case("pool2d", {"X": rand(2, 3, 7, 8)},
         {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "padding_algorithm": "VALID",
          "paddings": [1, 1]}, name="avg_valid", **POOL),
    Case("pool2d", {"X": rand(2, 3, 7, 8)}, {"pooling_type": "avg", "ksize": [1, 1], "global_pooling": True},
         name="avg_global", **POOL),
    Case("pool2d", {"X": _distinct(2, 3, 7, 8)}, {"pooling_type": "max", "ksize": [1, 1], "global_pooling": True},
         name="max_global", **POOL),
    Case("pool2d", {"X": rand(2, 3, 7, 8)}, {"pooling_type": "avg", "ksize": [3, 3], "adaptive": True},
         name="avg_adaptive", **POOL),
    Case("pool2d", {"X": rand(2, 7, 8, 3)},
         {"pooling_type": "avg", "ksize": [2, 3], "adaptive": True, "data_format": "NHWC"},
         name="avg_adaptive_nhwc", **POOL),
    Case("pool2d", {"X": rand(2, 3, 5, 7, dtype="float64")},
         {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]}, name="avg_f64", **POOL),
    # Paddle 2.6.2's pool2d CPU kernel computes wrong windows for adaptive *max* pooling (its
    # adaptive_max_pool2d API uses another op); a NumPy reference stands in.
    Case("pool2d", {"X": _distinct(2, 3, 7, 8)}, {"pooling_type": "max", "ksize": [3, 3], "adaptive": True},
         paddle=False, oracle=_adaptive_ref, name="max_adaptive", **POOL),
    Case("pool2d", {"X": _distinct(2, 3, 7, 8, dtype="float64")},
         {"pooling_type": "max", "ksize": [5, 3], "adaptive": True}, paddle=False, oracle=_adaptive_ref,
         name="max_adaptive_f64", **POOL),
    Case("pool2d", {"X": rand(2, 3, 7, 8, dtype="float64")},
         {"pooling_type": "avg", "ksize": [3, 2], "adaptive": True}, paddle=False, oracle=_adaptive_ref,
         name="avg_adaptive_f64_numpy", **POOL),
]
