"""Op-table rows of the ops added so that Fluid 1.8's layers run (``eye`` and the ops behind the
losses and tensor layers Fluid 1.8 had): each checked against Paddle 2.6.2's CPU kernel, its
gradients too, and the float64 rows against finite differences."""

import numpy as np

from . import Case, away_from_zero, positive, rand, randint

CASES = [
    Case("eye", {}, {"num_rows": 3, "num_columns": 4, "dtype": 5}, grad=(), name="3x4"),
    Case("eye", {}, {"num_rows": 3, "dtype": 3}, grad=(), name="square-int64"),
]


def _tssl_label(n):
    """teacher_student_sigmoid_loss labels: -2, -1, a teacher value in [0, 1), 1 + one."""
    base = np.array([-2.0, -1.0, 0.3, 1.6, 0.0, 1.0, -2.0, 0.8])
    return np.resize(base, (n, 1))


def _smooth_l1_ref(inputs, attrs):
    x, y = (np.asarray(inputs[k], np.float64) for k in ("X", "Y"))
    d = (x - y) * inputs.get("InsideWeight", 1.0)
    s2 = attrs.get("sigma", 1.0) ** 2
    loss = np.where(np.abs(d) < 1 / s2, 0.5 * s2 * d * d, np.abs(d) - 0.5 / s2) * inputs.get("OutsideWeight", 1.0)
    return {"Out": loss.reshape(len(x), -1).sum(1, keepdims=True).astype(inputs["X"].dtype)}


def _margin_rank_ref(inputs, attrs):
    x1, x2, label = (np.asarray(inputs[k], np.float64) for k in ("X1", "X2", "Label"))
    value = -label * (x1 - x2) + attrs.get("margin", 0.1)
    return {"Out": np.maximum(value, 0).astype(inputs["X1"].dtype)}


def _focal_ref(inputs, attrs):
    """Fluid 1.x's documented sigmoid focal loss, class by class."""
    x = np.asarray(inputs["X"], np.float64)
    label, fg = inputs["Label"][:, 0], max(int(inputs["FgNum"].reshape(-1)[0]), 1)
    gamma, alpha = attrs.get("gamma", 2.0), attrs.get("alpha", 0.25)
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        for c in range(x.shape[1]):
            p = 1 / (1 + np.exp(-x[i, c]))
            if label[i] == c + 1:
                out[i, c] = -alpha * (1 - p) ** gamma * np.log(p) / fg
            elif label[i] != -1:
                out[i, c] = -(1 - alpha) * p ** gamma * np.log(1 - p) / fg
    return {"Out": out.astype(inputs["X"].dtype)}


_P = rand(6, 1, low=0.05, high=0.95)
_TARGET = rand(4, 5, low=0.0, high=1.0)
_TARGET[0, :2] = 0  # zero targets contribute nothing
_FOCAL_LABEL = np.array([[1], [0], [3], [-1], [2]], "int32")

CASES += [
    *[Case("kldiv_loss", {"X": rand(4, 5, dtype=dt), "Target": _TARGET.astype(dt)}, {"reduction": r},
           outputs=("Loss",), name=f"{r}-{dt}") for r in ("none", "mean", "sum", "batchmean")
      for dt in ("float32", "float64")],
    Case("log_loss", {"Predicted": _P, "Labels": randint(6, 1, high=2).astype("float32")}, {"epsilon": 1e-4},
         outputs=("Loss",)),
    # Paddle 2.6.2 has float32 kernels only for log_loss and rank_loss: NumPy for the float64 rows
    Case("log_loss", {"Predicted": _P.astype("float64"), "Labels": rand(6, 1, dtype="float64", low=0, high=1)},
         outputs=("Loss",), paddle=False, name="soft-f64", oracle=lambda i, a: {"Loss": -i["Labels"] * np.log(
             i["Predicted"] + 1e-4) - (1 - i["Labels"]) * np.log(1 - i["Predicted"] + 1e-4)}),
    Case("teacher_student_sigmoid_loss", {"X": away_from_zero(8, 1) * 3, "Label": _tssl_label(8).astype("float32")},
         outputs=("Y",)),
    Case("teacher_student_sigmoid_loss", {"X": rand(8, 1, dtype="float64", low=-3, high=3),
                                          "Label": _tssl_label(8)}, outputs=("Y",), name="f64"),
    Case("teacher_student_sigmoid_loss", {"X": np.array([[-4.0], [0.5], [4.0], [-0.5]], "float32"),
                                          "Label": np.array([[1.2], [-1.0], [0.4], [-2.0]], "float32")},
         {"soft_max_up_bound": 3.0, "soft_max_lower_bound": -3.0}, outputs=("Y",), name="bounds"),
    Case("rank_loss", {"Label": randint(5, 1, high=2).astype("float32"), "Left": rand(5, 1), "Right": rand(5, 1)}),
    Case("rank_loss", {"Label": rand(5, 1, dtype="float64", low=0, high=1), "Left": rand(5, 1, dtype="float64"),
                       "Right": rand(5, 1, dtype="float64")}, name="f64", paddle=False,
         oracle=lambda i, a: {"Out": np.log1p(np.exp(i["Left"] - i["Right"])) - i["Label"] * (i["Left"] - i["Right"])}),
    Case("bpr_loss", {"X": rand(5, 4), "Label": randint(5, 1, high=4)}, outputs=("Y",)),
    Case("bpr_loss", {"X": rand(5, 4, dtype="float64"), "Label": randint(5, 1, high=4)}, outputs=("Y",), name="f64"),
    # Fluid 1.x ops that Paddle 2.6 no longer has: NumPy oracles (and finite differences in float64)
    Case("margin_rank_loss", {"X1": away_from_zero(5, 1, dtype="float64"), "X2": away_from_zero(5, 1, dtype="float64"),
                              "Label": np.array([[1.0], [-1.0], [1.0], [-1.0], [1.0]])}, {"margin": 0.05},
         outputs=("Out",), paddle=False, oracle=_margin_rank_ref),
    Case("smooth_l1_loss", {"X": rand(4, 3, dtype="float64", low=-2, high=2), "Y": rand(4, 3, dtype="float64")},
         outputs=("Out",), paddle=False, oracle=_smooth_l1_ref),
    Case("smooth_l1_loss", {"X": rand(4, 2, 3, low=-2, high=2), "Y": rand(4, 2, 3),
                            "InsideWeight": positive(4, 2, 3), "OutsideWeight": positive(4, 2, 3)}, {"sigma": 2.0},
         outputs=("Out",), paddle=False, oracle=_smooth_l1_ref, name="weights"),
    Case("sigmoid_focal_loss", {"X": rand(5, 3, dtype="float64", low=-2, high=2), "Label": _FOCAL_LABEL,
                                "FgNum": np.array([3], "int32")}, {"gamma": 2.0, "alpha": 0.25},
         paddle=False, oracle=_focal_ref, batch_dims=("X", "Label")),
    Case("sigmoid_focal_loss", {"X": rand(5, 3, low=-2, high=2), "Label": _FOCAL_LABEL, "FgNum": np.array([0], "int32")},
         {"gamma": 1.5, "alpha": 0.5}, paddle=False, oracle=_focal_ref, batch_dims=("X", "Label"), name="no-fg"),
]

_SCATTER_X = rand(4, 3, 2)
CASES += [
    Case("cross", {"X": rand(4, 3), "Y": rand(4, 3)}, {"dim": 1}),
    Case("cross", {"X": rand(3, 2, dtype="float64"), "Y": rand(3, 2, dtype="float64")}, {"dim": 0}, batch_dims=(),
         name="dim0-f64"),
    # no dim: the first dim of size 3 (Fluid's default; Paddle 2.6.2's kernel refuses the unset value)
    Case("cross", {"X": rand(2, 3, 3, dtype="float64"), "Y": rand(2, 3, 3, dtype="float64")}, batch_dims=(),
         paddle=False, oracle=lambda i, a: {"Out": np.cross(i["X"], i["Y"], axis=1)}, name="default-dim-f64"),
    Case("trace", {"Input": rand(4, 3, 5)}, {"offset": 1, "axis1": 1, "axis2": 2}),
    Case("trace", {"Input": rand(4, 4, dtype="float64")}, {"offset": -1}, batch_dims=(), name="matrix-f64"),
    Case("addmm", {"Input": rand(1, 5), "X": rand(3, 4), "Y": rand(4, 5)}, {"Alpha": 0.5, "Beta": 2.0},
         batch_dims=()),
    Case("addmm", {"Input": rand(3, 5, dtype="float64"), "X": rand(3, 4, dtype="float64"),
                   "Y": rand(4, 5, dtype="float64")}, batch_dims=(), name="f64"),
    Case("diag_embed", {"Input": rand(2, 3)}, grad=()),
    Case("diag_embed", {"Input": rand(2, 3)}, {"offset": -1, "dim1": 0, "dim2": 2}, grad=(), batch_dims=(),
         name="dims-0-2"),
    Case("diag_embed", {"Input": rand(2, 3)}, {"offset": 2, "dim1": -1, "dim2": 0}, grad=(), batch_dims=(),
         name="reversed"),
    Case("scatter_nd_add", {"X": _SCATTER_X, "Index": np.array([[1, 0], [3, 2], [1, 0]], "int64"),
                            "Updates": rand(3, 2)}, batch_dims=("X",)),
    Case("scatter_nd_add", {"X": rand(4, 3, dtype="float64"), "Index": np.array([[2], [0], [2]], "int32"),
                            "Updates": rand(3, 3, dtype="float64")}, batch_dims=("X",), name="rows-f64"),
    Case("multiplex", {"X": [rand(4, 3), rand(4, 3), rand(4, 3)], "Ids": np.array([[2], [0], [1], [2]], "int32")}),
    Case("shard_index", {"X": np.array([[1], [6], [12], [19], [0]], "int64")},
         {"index_num": 20, "nshards": 3, "shard_id": 1, "ignore_value": -1}, grad=()),
    Case("temporal_shift", {"X": rand(6, 8, 2, 2)}, {"seg_num": 3, "shift_ratio": 0.25}),
    Case("temporal_shift", {"X": rand(4, 2, 2, 5, dtype="float64")}, {"seg_num": 2, "shift_ratio": 0.2,
                                                                     "data_format": "NHWC"}, name="nhwc-f64"),
]
