"""Op-table rows: mixed precision's loss scaling (``check_finite_and_unscale``,
``update_loss_scaling``), against Paddle 2.6.2's CPU kernels for float32/float64 tensors and
NumPy for float16 ones (Paddle's CPU kernels of both ops refuse float16).

Paddle leaves ``check_finite_and_unscale``'s Out unspecified on an overflow, and its
``update_loss_scaling`` writes Out only on an overflow (the op runs in place, so Out *is* X
otherwise), and writes LossScaling only when it changes it (a step that reaches neither count
leaves the in-place scale as it was): the rows compare what the kernel writes.
"""

import numpy as np

from . import Case, rand

SHAPES = ((3, 4), (5,), (2, 2, 3))


def _grads(dtype="float32", bad=None):
    """Three gradient tensors; ``bad`` = (tensor, value) plants an inf or nan."""
    xs = [rand(*s, dtype="float32", low=-40.0, high=40.0).astype(dtype) for s in SHAPES]
    if bad is not None:
        i, value = bad
        xs[i].flat[1] = value
    return xs


def _scale(value=1024.0, dtype="float32"):
    return np.array([value], dtype)


def _steps(n):
    return np.array([n], "int32")


def _unscale_reference(inputs, attrs):
    inverse = np.float32(1.0) / inputs["Scale"].astype("float32")[0]
    xs = inputs["X"]
    found = any(not np.all(np.isfinite(x.astype("float32"))) for x in xs)
    return {"Out": [(x.astype("float32") * inverse).astype(x.dtype) for x in xs],
            "FoundInfinite": np.array([found])}


def _update_reference(inputs, attrs):
    """Paddle's UpdateLossScaling functor, written out."""
    found = bool(inputs["FoundInfinite"][0])
    scale = inputs["PrevLossScaling"].astype("float32")[0]
    good, bad = int(inputs["InGoodSteps"][0]), int(inputs["InBadSteps"][0])
    if attrs.get("stop_update") or bool(inputs.get("StopUpdate", [False])[0]):
        pass                                    # a stopped step keeps the scale and the counts
    elif found:
        good, bad = 0, bad + 1
        if bad == attrs["decr_every_n_nan_or_inf"]:
            scale, bad = max(scale * np.float32(attrs["decr_ratio"]), np.float32(1.0)), 0
    else:
        good, bad = good + 1, 0
        if good == attrs["incr_every_n_steps"]:
            grown = scale * np.float32(attrs["incr_ratio"])
            scale, good = (grown if np.isfinite(grown) else scale), 0
    return {"Out": [np.zeros_like(x) if found else x for x in inputs["X"]],
            "LossScaling": np.array([scale], "float32"), "OutGoodSteps": _steps(good), "OutBadSteps": _steps(bad)}


def _update_inputs(found, scale, good, bad, dtype="float32"):
    return {"X": _grads(dtype), "FoundInfinite": np.array([found]), "PrevLossScaling": _scale(scale),
            "InGoodSteps": _steps(good), "InBadSteps": _steps(bad)}


_ATTRS = {"incr_every_n_steps": 3, "decr_every_n_nan_or_inf": 2, "incr_ratio": 2.0, "decr_ratio": 0.5}
_COUNTS = {"Out": 3}
_STATE = ("LossScaling", "OutGoodSteps", "OutBadSteps")
_COUNTERS = ("OutGoodSteps", "OutBadSteps")

CASES = [
    # check_finite_and_unscale: finite gradients are divided by the scale.
    Case("check_finite_and_unscale", {"X": _grads(), "Scale": _scale()}, outputs=("Out", "FoundInfinite"),
         output_counts=_COUNTS, grad=(), name="finite"),
    Case("check_finite_and_unscale", {"X": _grads("float64"), "Scale": _scale(1e-3, "float64")},
         outputs=("Out", "FoundInfinite"), output_counts=_COUNTS, grad=(), rtol=1e-12, name="float64"),
    Case("check_finite_and_unscale", {"X": _grads(bad=(1, np.inf)), "Scale": _scale()},
         outputs=("FoundInfinite",), output_counts=_COUNTS, grad=(), name="inf"),
    Case("check_finite_and_unscale", {"X": _grads(bad=(2, np.nan)), "Scale": _scale()},
         outputs=("FoundInfinite",), output_counts=_COUNTS, grad=(), name="nan"),
    Case("check_finite_and_unscale", {"X": _grads("float16"), "Scale": _scale(32768.0)},
         outputs=("Out", "FoundInfinite"), output_counts=_COUNTS, grad=(), paddle=False,
         oracle=_unscale_reference, rtol=1e-3, name="float16"),
    Case("check_finite_and_unscale", {"X": _grads("float16", bad=(0, np.inf)), "Scale": _scale(32768.0)},
         outputs=("Out", "FoundInfinite"), output_counts=_COUNTS, grad=(), paddle=False,
         oracle=_unscale_reference, rtol=1e-3, name="float16-inf"),
    # update_loss_scaling: a good step that does not reach incr_every_n_steps counts up ...
    Case("update_loss_scaling", _update_inputs(False, 1024.0, 0, 1), _ATTRS, outputs=_COUNTERS,
         output_counts=_COUNTS, grad=(), name="good"),
    # ... the incr_every_n_steps-th grows the scale and restarts the count ...
    Case("update_loss_scaling", _update_inputs(False, 1024.0, 2, 0), _ATTRS, outputs=_STATE,
         output_counts=_COUNTS, grad=(), name="grow"),
    # ... unless the grown scale is not finite.
    Case("update_loss_scaling", _update_inputs(False, 3e38, 2, 0), _ATTRS, outputs=_STATE,
         output_counts=_COUNTS, grad=(), name="grow-overflow"),
    # An overflow zeroes the gradients and counts a bad step ...
    Case("update_loss_scaling", _update_inputs(True, 1024.0, 2, 0), _ATTRS, outputs=("Out",) + _COUNTERS,
         output_counts=_COUNTS, grad=(), name="bad"),
    # ... the decr_every_n_nan_or_inf-th shrinks the scale, never below 1.
    Case("update_loss_scaling", _update_inputs(True, 1024.0, 0, 1), _ATTRS, outputs=("Out",) + _STATE,
         output_counts=_COUNTS, grad=(), name="shrink"),
    Case("update_loss_scaling", _update_inputs(True, 1.5, 0, 1), _ATTRS, outputs=("Out",) + _STATE,
         output_counts=_COUNTS, grad=(), name="shrink-floor"),
    Case("update_loss_scaling", _update_inputs(True, 1024.0, 0, 1), {**_ATTRS, "stop_update": True},
         outputs=("Out",), output_counts=_COUNTS, grad=(), name="stopped"),
    Case("update_loss_scaling", {**_update_inputs(True, 1024.0, 0, 1), "StopUpdate": np.array([True])}, _ATTRS,
         outputs=("Out",), output_counts=_COUNTS, grad=(), name="stopped-by-tensor"),
    Case("update_loss_scaling", _update_inputs(True, 1024.0, 0, 1, "float16"), _ATTRS, outputs=("Out",) + _STATE,
         output_counts=_COUNTS, grad=(), paddle=False, oracle=_update_reference, name="float16-shrink"),
    Case("update_loss_scaling", _update_inputs(False, 1024.0, 2, 0, "float16"), _ATTRS, outputs=("Out",) + _STATE,
         output_counts=_COUNTS, grad=(), paddle=False, oracle=_update_reference, name="float16-grow"),
    Case("update_loss_scaling", {**_update_inputs(True, 1024.0, 0, 1, "float16"), "StopUpdate": np.array([True])},
         _ATTRS, outputs=("Out",) + _STATE, output_counts=_COUNTS, grad=(), paddle=False, oracle=_update_reference,
         name="float16-stopped"),
]
