"""Op-table rows: unary activations and elementwise math (relu … gelu, exp/log, pow, clip, rounding).

Inputs stay away from kinks (``away_from_zero``) where an op has one, so that Paddle's and JAX's
one-sided conventions and finite differences all agree.
"""

import numpy as np

from . import Case, away_from_zero, positive, rand


def _oracle(fn):
    """A NumPy reference for attribute values Paddle 2.6 no longer honours."""
    return lambda inputs, attrs: {"Out": fn(inputs["X"], attrs)}


def _relu6_ref(x, attrs):
    return np.clip(x, 0, attrs.get("threshold", 6.0)).astype(x.dtype)


def _swish_ref(x, attrs):
    return (x / (1 + np.exp(-attrs.get("beta", 1.0) * x))).astype(x.dtype)


def _hard_swish_ref(x, attrs):
    return (x * np.clip(x + attrs["offset"], 0, attrs["threshold"]) / attrs["scale"]).astype(x.dtype)


# Values on both sides of relu6's and clip's corners, none of them on a corner.
WIDE = (away_from_zero(3, 4) * 8).astype("float32")

CASES = [
    Case("relu", {"X": away_from_zero(3, 4)}),
    Case("relu", {"X": away_from_zero(3, 4, dtype="float64")}, name="f64"),
    Case("relu6", {"X": WIDE}),
    Case("relu6", {"X": WIDE.astype("float64")}, name="f64"),
    Case("relu6", {"X": WIDE.astype("float64")}, {"threshold": 3.0}, paddle=False, oracle=_oracle(_relu6_ref),
         name="threshold"),
    Case("leaky_relu", {"X": away_from_zero(3, 4)}),
    Case("leaky_relu", {"X": away_from_zero(3, 4, dtype="float64")}, {"alpha": 0.1}, name="alpha_f64"),
    Case("elu", {"X": rand(3, 4, low=-3, high=3)}),
    Case("elu", {"X": away_from_zero(3, 4, dtype="float64") * 3}, {"alpha": 0.5}, name="alpha_f64"),
    Case("gelu", {"X": rand(3, 4, low=-3, high=3)}),
    Case("gelu", {"X": rand(3, 4, low=-3, high=3, dtype="float64")}, {"approximate": True}, name="tanh_f64"),
    Case("gelu", {"X": rand(3, 4, low=-3, high=3, dtype="float64")}, name="erf_f64"),
    Case("sigmoid", {"X": rand(3, 4, low=-4, high=4)}),
    Case("sigmoid", {"X": rand(3, 4, low=-4, high=4, dtype="float64")}, name="f64"),
    Case("tanh", {"X": rand(3, 4, low=-3, high=3)}),
    Case("swish", {"X": rand(3, 4, low=-4, high=4)}),
    Case("swish", {"X": rand(3, 4, low=-4, high=4, dtype="float64")}, {"beta": 2.0}, paddle=False,
         oracle=_oracle(_swish_ref), name="beta"),
    Case("silu", {"X": rand(3, 4, low=-4, high=4)}),
    Case("silu", {"X": rand(3, 4, low=-4, high=4, dtype="float64")}, name="f64"),
    Case("hard_swish", {"X": WIDE}),
    Case("hard_swish", {"X": WIDE.astype("float64")}, {"threshold": 4.0, "scale": 5.0, "offset": 2.0}, paddle=False,
         oracle=_oracle(_hard_swish_ref), name="attrs"),
    Case("hard_sigmoid", {"X": WIDE}),
    Case("hard_sigmoid", {"X": WIDE.astype("float64")}, {"slope": 0.3, "offset": 0.4}, name="attrs_f64"),
    Case("softplus", {"X": rand(3, 4, low=-5, high=5)}),
    Case("softplus", {"X": rand(3, 4, low=-5, high=5, dtype="float64")}, {"beta": 2.0, "threshold": 3.0},
         name="beta_threshold_f64"),
    Case("softsign", {"X": rand(3, 4, low=-3, high=3)}),
    Case("softsign", {"X": away_from_zero(3, 4, dtype="float64")}, name="f64"),
    Case("exp", {"X": rand(3, 4, low=-2, high=2)}),
    Case("exp", {"X": rand(3, 4, low=-2, high=2, dtype="float64")}, name="f64"),
    Case("log", {"X": positive(3, 4)}),
    Case("log", {"X": positive(3, 4, dtype="float64")}, name="f64"),
    Case("sqrt", {"X": positive(3, 4)}),
    Case("rsqrt", {"X": positive(3, 4)}),
    Case("rsqrt", {"X": positive(3, 4, dtype="float64")}, name="f64"),
    Case("abs", {"X": away_from_zero(3, 4)}),
    Case("abs", {"X": away_from_zero(3, 4, dtype="float64")}, name="f64"),
    Case("square", {"X": rand(3, 4)}),
    Case("square", {"X": rand(3, 4, dtype="float64")}, name="f64"),
    Case("pow", {"X": positive(3, 4)}, {"factor": 2.5}),
    Case("pow", {"X": positive(3, 4, dtype="float64")}, {"factor": -1.5}, name="f64"),
    Case("pow", {"X": positive(3, 4), "FactorTensor": np.array([3.0], "float32")}, {"factor": 2.0},
         batch_dims=("X",), name="factor_tensor"),
    Case("clip", {"X": WIDE}, {"min": -3.0, "max": 2.0}),
    Case("clip", {"X": WIDE.astype("float64")}, {"min": -3.0, "max": 2.0}, name="f64"),
    Case("clip", {"X": WIDE, "Min": np.array([-1.0], "float32"), "Max": np.array([2.5], "float32")},
         {"min": -3.0, "max": 3.0}, batch_dims=("X",), name="tensor_bounds"),
    Case("sign", {"X": np.array([[-2.0, 0.0, 3.0], [0.5, -0.5, 0.0]], "float32")}),
    Case("floor", {"X": rand(3, 4, low=-3, high=3)}),
    Case("ceil", {"X": rand(3, 4, low=-3, high=3)}),
    Case("round", {"X": rand(3, 4, low=-3, high=3)}),
    Case("round", {"X": np.array([[-2.5, -1.5, -0.5, 0.5], [1.5, 2.5, 0.49, -0.51]], "float32")}, name="halves"),
    Case("reciprocal", {"X": away_from_zero(3, 4)}),
    Case("reciprocal", {"X": away_from_zero(3, 4, dtype="float64")}, name="f64"),
]
