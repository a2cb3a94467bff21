"""Op-table rows: comparisons, logical ops, ``where``, ``isfinite_v2``."""

import numpy as np

from . import Case, rand, randint


def _coin(*shape):
    return rand(*shape) > 0


def _compare_axis_ref(inputs, attrs):
    # Paddle 1.x's axis rule: Y (2, 3) lines up with X (2, 3, 4) from axis 0.
    return {"Out": inputs["X"] < inputs["Y"][:, :, None]}


# Half the entries of Y equal X's, so == and <= are exercised on ties.
_X = randint(3, 4, low=0, high=4).astype("float32")
_Y = np.where(rand(3, 4) > 0, _X, randint(3, 4, low=0, high=4).astype("float32"))

CASES = [
    Case("equal", {"X": _X, "Y": _Y}),
    Case("equal", {"X": randint(3, 4, high=3), "Y": randint(4, high=3)}, batch_dims=("X",), name="int64_bcast"),
    Case("not_equal", {"X": _X, "Y": _Y}),
    Case("less_than", {"X": _X, "Y": _Y}),
    Case("less_than", {"X": rand(2, 3, 4), "Y": rand(2, 3)}, {"axis": 0}, paddle=False,
         oracle=_compare_axis_ref, name="axis0"),
    Case("less_equal", {"X": _X, "Y": _Y}),
    Case("less_equal", {"X": rand(2, 3, dtype="float64"), "Y": rand(3, dtype="float64")}, batch_dims=("X",),
         name="f64_bcast"),
    Case("greater_than", {"X": _X, "Y": _Y}),
    Case("greater_equal", {"X": _X, "Y": _Y}),
    Case("greater_equal", {"X": randint(3, 4, dtype="int32"), "Y": randint(3, 4, dtype="int32")}, name="int32"),
    Case("logical_and", {"X": _coin(3, 4), "Y": _coin(3, 4)}),
    Case("logical_and", {"X": randint(3, 4, low=0, high=2, dtype="int32"),
                         "Y": randint(3, 4, low=0, high=2, dtype="int32")}, name="int32"),
    Case("logical_or", {"X": _coin(3, 4), "Y": _coin(4)}, batch_dims=("X",), name="bcast"),
    Case("logical_or", {"X": _coin(3, 4), "Y": _coin(3, 4)}),
    Case("logical_xor", {"X": _coin(3, 4), "Y": _coin(3, 4)}),
    Case("logical_not", {"X": _coin(3, 4)}),
    Case("logical_not", {"X": randint(3, 4, low=0, high=2).astype("float32")}, name="float"),
    Case("where", {"Condition": _coin(3, 4), "X": rand(3, 4), "Y": rand(3, 4)}, grad=("X", "Y")),
    Case("where", {"Condition": _coin(2, 3), "X": rand(2, 3, dtype="float64"), "Y": rand(2, 3, dtype="float64")},
         grad=("X", "Y"), name="f64"),
    Case("isfinite_v2", {"X": np.array([[1.0, np.inf, -np.inf], [np.nan, 0.0, -2.0]], "float32")}),
    Case("isfinite_v2", {"X": rand(2, 3, dtype="float64")}, name="f64"),
]
