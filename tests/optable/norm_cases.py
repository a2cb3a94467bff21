"""Op-table rows: batch_norm, layer_norm, group_norm, instance_norm.

batch_norm rows use a NumPy reference: Paddle insists that MeanOut/VarianceOut are the very
variables Mean/Variance (in place), which the one-op harness (fresh output variables) does not
build. tests/test_layers_nn.py compares the batch_norm layer with Paddle, in place.
"""

import numpy as np

from . import Case, positive, rand

BN_STATS = ("MeanOut", "VarianceOut", "SavedMean", "SavedVariance")
BN_OUTPUTS = ("Y",) + BN_STATS
NORM_STATS = ("Mean", "Variance")
TOL = dict(rtol=1e-4, atol=1e-5, grad_rtol=1e-3, grad_atol=1e-4)


def _bn_inputs(shape, c_axis=1, dtype="float32"):
    c = shape[c_axis]
    return {"X": rand(*shape, dtype=dtype), "Scale": rand(c, dtype=dtype), "Bias": rand(c, dtype=dtype),
            "Mean": rand(c, dtype=dtype), "Variance": positive(c, dtype=dtype)}


def _bn_ref(inputs, attrs):
    x = np.asarray(inputs["X"], np.float64)
    layout = attrs.get("data_layout", "NCHW")
    axis = x.ndim - 1 if layout == "NHWC" and x.ndim > 2 else 1
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    eps, momentum = attrs.get("epsilon", 1e-5), attrs.get("momentum", 0.9)
    mean_in, var_in = (np.asarray(inputs[k], np.float64) for k in ("Mean", "Variance"))
    scale, bias = np.asarray(inputs["Scale"], np.float64), np.asarray(inputs["Bias"], np.float64)
    global_stats = (attrs.get("is_test") and not attrs.get("trainable_statistics")) or attrs.get("use_global_stats")
    if global_stats:
        mean, var = mean_in, var_in
    else:
        axes = tuple(i for i in range(x.ndim) if i != axis)
        mean, var = x.mean(axis=axes), x.var(axis=axes)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * scale.reshape(shape) + bias.reshape(shape)
    dtype = inputs["X"].dtype
    if global_stats:
        out = {"MeanOut": mean_in, "VarianceOut": var_in, "SavedMean": 0 * mean, "SavedVariance": 0 * var}
    else:
        out = {"MeanOut": momentum * mean_in + (1 - momentum) * mean,
               "VarianceOut": momentum * var_in + (1 - momentum) * var,
               "SavedMean": mean, "SavedVariance": 1 / np.sqrt(var + eps)}
    out["Y"] = y
    return {k: v.astype(dtype) for k, v in out.items()}


def _group_norm_ref(inputs, attrs):
    x = np.asarray(inputs["X"], np.float64)
    g = attrs["groups"]
    n, c = x.shape[:2]
    grouped = x.reshape(n, g, -1)
    mean, var = grouped.mean(axis=2), grouped.var(axis=2)
    y = ((grouped - mean[..., None]) / np.sqrt(var[..., None] + attrs.get("epsilon", 1e-5))).reshape(x.shape)
    dtype = inputs["X"].dtype
    return {"Y": y.astype(dtype), "Mean": mean.astype(dtype), "Variance": var.astype(dtype)}


BN = dict(outputs=BN_OUTPUTS, no_grad_outputs=BN_STATS, paddle=False, oracle=_bn_ref, **TOL)
LN = dict(outputs=("Y",) + NORM_STATS, no_grad_outputs=NORM_STATS, **TOL)
IN = dict(outputs=("Y", "SavedMean", "SavedVariance"), no_grad_outputs=("SavedMean", "SavedVariance"), **TOL)
NO_AFFINE = {"Scale": [], "Bias": []}

CASES = [
    Case("batch_norm", _bn_inputs((4, 3, 5, 5)), {"momentum": 0.8}, **BN),
    Case("batch_norm", _bn_inputs((6, 3)), {}, name="2d", **BN),
    Case("batch_norm", _bn_inputs((4, 5, 5, 3), c_axis=3), {"data_layout": "NHWC"}, name="nhwc", **BN),
    Case("batch_norm", _bn_inputs((4, 3, 5), dtype="float64"), {"epsilon": 1e-3}, name="f64", **BN),
    Case("batch_norm", _bn_inputs((4, 3, 5, 5)), {"is_test": True}, name="is_test", **BN),
    Case("batch_norm", _bn_inputs((4, 3, 5, 5), dtype="float64"), {"use_global_stats": True},
         name="global_stats_f64", **BN),
    # Paddle's backward treats trainable statistics as constants; ours differentiates through them.
    Case("batch_norm", _bn_inputs((4, 3, 5)), {"is_test": True, "trainable_statistics": True},
         name="trainable_statistics", **{**BN, "grad": ()}),
    Case("layer_norm", {"X": rand(4, 3, 5), "Scale": rand(15), "Bias": rand(15)}, {}, **LN),
    Case("layer_norm", {"X": rand(4, 3, 5), "Scale": rand(5), "Bias": rand(5)}, {"begin_norm_axis": 2},
         name="axis2", **LN),
    Case("layer_norm", {"X": rand(4, 3, 5, dtype="float64"), **NO_AFFINE}, {"begin_norm_axis": 2, "epsilon": 1e-3},
         name="plain_f64", **LN),
    Case("layer_norm", {"X": rand(3, 6, dtype="float64"), "Scale": rand(6, dtype="float64"),
                        "Bias": rand(6, dtype="float64")}, {}, name="f64", **LN),
    Case("group_norm", {"X": rand(2, 6, 3, 4), "Scale": rand(6), "Bias": rand(6)}, {"groups": 3}, **LN),
    Case("group_norm", {"X": rand(2, 3, 4, 6), "Scale": rand(6), "Bias": rand(6)},
         {"groups": 2, "data_layout": "NHWC"}, name="nhwc", **LN),
    Case("group_norm", {"X": rand(2, 6, 5, dtype="float64"), "Scale": rand(6, dtype="float64"),
                        "Bias": rand(6, dtype="float64")}, {"groups": 6, "epsilon": 1e-3}, name="f64", **LN),
    # Without Scale, Paddle 2.6.2's group_norm_grad is wrong (ours agrees with finite differences).
    Case("group_norm", {"X": rand(2, 6, 5, 2), **NO_AFFINE}, {"groups": 3}, name="plain",
         **{**LN, "grad": ()}),
    Case("group_norm", {"X": rand(2, 6, 5, dtype="float64"), **NO_AFFINE}, {"groups": 3, "epsilon": 1e-3},
         paddle=False, oracle=_group_norm_ref, name="plain_f64", **LN),
    Case("instance_norm", {"X": rand(2, 3, 4, 5), "Scale": rand(3), "Bias": rand(3)}, {}, **IN),
    Case("instance_norm", {"X": rand(2, 3, 4, 5, dtype="float64"), **NO_AFFINE}, {"epsilon": 1e-3},
         name="plain_f64", **IN),
]
