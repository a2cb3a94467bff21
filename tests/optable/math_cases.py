"""Op-table rows: elementwise arithmetic (with Paddle's axis broadcasting), scale, sum, mean."""

from . import Case, away_from_zero, positive, rand, randint

X_ONLY = ("X",)

CASES = [
    # add/sub/mul/div: same shapes, NumPy trailing broadcast, and Paddle's legacy axis rule.
    Case("elementwise_add", {"X": rand(2, 3, 4), "Y": rand(2, 3, 4)}),
    Case("elementwise_add", {"X": rand(2, 3, 4), "Y": rand(3, 1)}, batch_dims=X_ONLY, name="bcast"),
    Case("elementwise_add", {"X": rand(2, 3, 4), "Y": rand(3)}, {"axis": 1}, batch_dims=X_ONLY, name="axis1"),
    Case("elementwise_add", {"X": rand(2, 3, 4, dtype="float64"), "Y": rand(2, 3, dtype="float64")},
         {"axis": 0}, batch_dims=(), name="axis0_f64"),
    Case("elementwise_add", {"X": randint(2, 3), "Y": randint(2, 3)}, name="int64"),
    Case("elementwise_sub", {"X": rand(2, 3, 4), "Y": rand(4)}, batch_dims=X_ONLY),
    Case("elementwise_sub", {"X": rand(2, 3, dtype="float64"), "Y": rand(2, 3, dtype="float64")}, name="f64"),
    Case("elementwise_mul", {"X": rand(2, 3, 4), "Y": rand(3, 4)}, batch_dims=X_ONLY),
    Case("elementwise_mul", {"X": rand(2, 3, 4), "Y": rand(2, 3)}, {"axis": 0}, name="axis0"),
    Case("elementwise_div", {"X": rand(2, 3), "Y": away_from_zero(2, 3)}),
    Case("elementwise_div", {"X": rand(2, 3, dtype="float64"), "Y": away_from_zero(3, dtype="float64")},
         batch_dims=X_ONLY, name="f64"),
    # max/min: no ties in the data (Paddle sends a tie's gradient to Y; so do we).
    Case("elementwise_max", {"X": rand(2, 3, 4), "Y": rand(2, 3, 4)}),
    # Paddle 2.6's own elementwise_max_grad rejects axis != -1, so this row compares outputs only.
    Case("elementwise_max", {"X": rand(2, 3, 4), "Y": rand(3)}, {"axis": 1}, batch_dims=X_ONLY, grad=(),
         name="axis1"),
    Case("elementwise_max", {"X": rand(3, 4, dtype="float64"), "Y": rand(3, 4, dtype="float64")}, name="f64"),
    Case("elementwise_max", {"X": randint(3, 4), "Y": randint(3, 4)}, name="int64"),
    Case("elementwise_min", {"X": rand(2, 3, 4), "Y": rand(4)}, batch_dims=X_ONLY),
    Case("elementwise_min", {"X": rand(3, 4, dtype="float64"), "Y": rand(3, 4, dtype="float64")}, name="f64"),
    Case("elementwise_pow", {"X": positive(2, 3), "Y": rand(2, 3)}),
    Case("elementwise_pow", {"X": positive(2, 3, dtype="float64"), "Y": rand(3, dtype="float64")},
         batch_dims=X_ONLY, name="f64"),
    Case("elementwise_pow", {"X": randint(2, 3, low=-3, high=4), "Y": randint(2, 3, low=0, high=4)}, name="int64"),
    # mod/floordiv: Python's sign conventions; no gradient (as in Paddle 2.6).
    Case("elementwise_mod", {"X": rand(3, 4, low=-5, high=5), "Y": away_from_zero(3, 4) * 2}, grad=()),
    Case("elementwise_mod", {"X": randint(3, 4, low=-9, high=9), "Y": randint(3, 4, low=1, high=4)
                             * (1 - 2 * randint(3, 4, low=0, high=2))}, name="int64"),
    Case("elementwise_floordiv", {"X": rand(3, 4, low=-5, high=5), "Y": away_from_zero(3, 4) * 2}, grad=()),
    Case("elementwise_floordiv", {"X": randint(3, 4, low=-9, high=9), "Y": randint(3, 4, low=1, high=4)
                                  * (1 - 2 * randint(3, 4, low=0, high=2))}, name="int64"),
    Case("scale", {"X": rand(2, 3)}, {"scale": 2.5, "bias": 0.5}),
    Case("scale", {"X": rand(2, 3, dtype="float64")}, {"scale": -1.5, "bias": 0.25, "bias_after_scale": False},
         name="bias_first_f64"),
    Case("scale", {"X": rand(2, 3), "ScaleTensor": positive(1)}, {"bias": 1.0}, batch_dims=X_ONLY,
         name="scale_tensor"),
    Case("sum", {"X": [rand(2, 3), rand(2, 3), rand(2, 3)]}),
    Case("sum", {"X": [rand(2, 3, dtype="float64"), rand(2, 3, dtype="float64")]}, name="f64"),
    Case("sum", {"X": [rand(4)]}, name="one"),
    Case("mean", {"X": rand(2, 3, 4)}),
    Case("mean", {"X": rand(3, 4, dtype="float64")}, name="f64"),
]
