"""Op-table rows: reductions (reduce_*), arg_max/arg_min, top_k/top_k_v2, cumsum."""

import numpy as np

from . import Case, positive, rand, randint


def _distinct(*shape, dtype="float32"):
    """A random permutation of distinct values: no ties for max/min/top-k/arg searches."""
    n = int(np.prod(shape))
    return (np.random.default_rng(n).permutation(n).reshape(shape) / n - 0.5).astype(dtype)


def _ties(*shape):
    """Small integers as floats: many ties (Paddle sends a max's gradient to every tied element)."""
    return randint(*shape, low=0, high=3).astype("float32")


INDICES = ("Out", "Indices")

CASES = [
    Case("reduce_sum", {"X": rand(2, 3, 4)}, {"dim": [1]}),
    Case("reduce_sum", {"X": rand(2, 3, 4)}, {"dim": [0, 2], "keep_dim": True}, name="keep_dim"),
    Case("reduce_sum", {"X": rand(2, 3, 4)}, {"reduce_all": True}, name="all_0d"),
    Case("reduce_sum", {"X": rand(2, 3)}, {"dim": []}, name="empty_dim"),
    Case("reduce_sum", {"X": rand(2, 3, dtype="float64")}, {"dim": [-1]}, name="f64"),
    Case("reduce_sum", {"X": randint(2, 3, dtype="int32")}, {"dim": [1]}, name="int32_to_int64"),
    Case("reduce_sum", {"X": randint(2, 3, dtype="int32")}, {"dim": [1], "out_dtype": 2}, name="out_int32"),
    Case("reduce_sum", {"X": rand(2, 3)}, {"dim": [1], "out_dtype": 6}, name="out_f64"),
    Case("reduce_mean", {"X": rand(2, 3, 4)}, {"dim": [1, 2]}),
    Case("reduce_mean", {"X": rand(2, 3, 4)}, {"dim": [0, 1, 2]}, name="all_dims_0d"),
    Case("reduce_mean", {"X": rand(2, 3, dtype="float64")}, {"dim": [0], "keep_dim": True}, name="f64"),
    Case("reduce_mean", {"X": randint(2, 3, low=-9, high=9)}, {"dim": [1]}, name="int64"),
    Case("reduce_max", {"X": _distinct(2, 3, 4)}, {"dim": [2]}),
    Case("reduce_max", {"X": _distinct(2, 3, 4, dtype="float64")}, {"dim": [0], "keep_dim": True}, name="f64"),
    Case("reduce_max", {"X": _ties(3, 4)}, {"dim": [1]}, name="ties"),
    Case("reduce_max", {"X": _distinct(2, 3)}, {"reduce_all": True}, name="all_0d"),
    Case("reduce_min", {"X": _distinct(2, 3, 4)}, {"dim": [-1]}),
    Case("reduce_min", {"X": _ties(3, 4)}, {"dim": [0]}, name="ties"),
    Case("reduce_min", {"X": _distinct(3, 4, dtype="float64")}, {"reduce_all": True, "keep_dim": True},
         name="all_keep_f64"),
    Case("reduce_prod", {"X": positive(2, 3, 4)}, {"dim": [1]}),
    Case("reduce_prod", {"X": positive(2, 3, dtype="float64")}, {"dim": [0, 1]}, name="all_f64"),
    Case("reduce_prod", {"X": randint(2, 3, low=1, high=4, dtype="int32")}, {"dim": [1]}, name="int32"),
    Case("arg_max", {"X": _distinct(3, 4)}, {"axis": 1}),
    Case("arg_max", {"X": _distinct(3, 4)}, {"axis": 0, "keepdims": True}, name="keepdims"),
    Case("arg_max", {"X": _distinct(3, 4)}, {"axis": 0, "flatten": True}, name="flatten_0d"),
    Case("arg_max", {"X": _distinct(3, 4)}, {"axis": -1, "dtype": 2}, name="int32"),
    Case("arg_max", {"X": _ties(3, 4)}, {"axis": 1}, name="ties_first"),
    Case("arg_min", {"X": _distinct(3, 4)}, {"axis": -1}),
    Case("arg_min", {"X": _distinct(2, 3)}, {"axis": 0, "flatten": True, "keepdims": True}, name="flatten_keep"),
    Case("arg_min", {"X": randint(3, 4)}, {"axis": 1}, name="int64_ties"),
    Case("top_k", {"X": _distinct(3, 5)}, {"k": 2}, outputs=INDICES),
    Case("top_k", {"X": _distinct(2, 3, 4, dtype="float64")}, {"k": 3}, outputs=INDICES, name="f64"),
    Case("top_k_v2", {"X": _distinct(3, 5)}, {"k": 2}, outputs=INDICES),
    Case("top_k_v2", {"X": _distinct(4, 3)}, {"k": 2, "axis": 0, "largest": False}, outputs=INDICES,
         name="smallest_axis0"),
    Case("top_k_v2", {"X": _distinct(2, 4, 3, dtype="float64")}, {"k": 3, "axis": 1}, outputs=INDICES,
         name="axis1_f64"),
    # No ties: Paddle's order among equal values is unspecified (it does not keep the lower index first).
    Case("top_k_v2", {"X": (_distinct(3, 6) * 18).astype("int64")}, {"k": 3}, outputs=INDICES, name="int64"),
    Case("cumsum", {"X": rand(2, 3, 4)}, {"axis": 1}),
    Case("cumsum", {"X": rand(2, 3, dtype="float64")}, {"axis": -1, "exclusive": True}, name="exclusive_f64"),
    Case("cumsum", {"X": rand(2, 3, 4)}, {"axis": 2, "reverse": True}, name="reverse"),
    Case("cumsum", {"X": rand(3, 4, dtype="float64")}, {"axis": 0, "reverse": True, "exclusive": True},
         name="reverse_exclusive_f64"),
    Case("cumsum", {"X": rand(2, 3)}, {"flatten": True}, name="flatten"),
    Case("cumsum", {"X": randint(2, 3, dtype="int32")}, {"axis": 0}, name="int32"),
]
