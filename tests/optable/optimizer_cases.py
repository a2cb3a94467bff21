"""Op-table rows: optimizer ops (compared with Paddle's kernels, one update step each) and the
gradient-clipping helpers ``squared_l2_norm`` and ``clip_by_norm``."""

import numpy as np

from . import Case, positive, rand

# Optimizer ops have no gradient; their learning rate and beta-power inputs keep shape [1].
NO_GRAD = ()
SHAPE = (4, 5)


def _lr(value=0.01, dtype="float32"):
    return np.array([value], dtype)


def _pow(beta, t=3, dtype="float32"):
    return np.array([beta ** t], dtype)


def _tensors(*slots):
    """batch_dims: the row's tensor-shaped slots (not the one-element ones)."""
    return tuple(slots)


def _adam_inputs(dtype="float32"):
    return {"Param": rand(*SHAPE, dtype=dtype), "Grad": rand(*SHAPE, dtype=dtype), "LearningRate": _lr(0.01, dtype),
            "Moment1": rand(*SHAPE, dtype=dtype, low=-0.1, high=0.1),
            "Moment2": positive(*SHAPE, dtype=dtype, low=0.001, high=0.1),
            "Beta1Pow": _pow(0.9, dtype=dtype), "Beta2Pow": _pow(0.999, dtype=dtype)}


def _momentum_reference(inputs, attrs):
    p, g, v, lr = inputs["Param"], inputs["Grad"], inputs["Velocity"], inputs["LearningRate"][0]
    g = attrs.get("rescale_grad", 1.0) * g + attrs.get("regularization_coeff", 0.0) * p
    v_out = attrs["mu"] * v + g
    return {"ParamOut": p - lr * v_out, "VelocityOut": v_out}


def _f32(x):
    return np.float64(np.float32(x))


def _adamw_reference(inputs, attrs):
    p, g, m1, m2 = (inputs[k].astype("float64") for k in ("Param", "Grad", "Moment1", "Moment2"))
    lr, b1p, b2p = (float(inputs[k][0]) for k in ("LearningRate", "Beta1Pow", "Beta2Pow"))
    b1, b2, eps = _f32(0.9), _f32(0.999), _f32(1e-8)
    lr = lr * _f32(attrs.get("lr_ratio", 1.0))
    if attrs.get("with_decay"):
        p = p * (1 - lr * _f32(attrs["coeff"]))
    m1 = b1 * m1 + (1 - b1) * g
    m2 = b2 * m2 + (1 - b2) * g * g
    p = p - lr * np.sqrt(1 - b2p) / (1 - b1p) * (m1 / (np.sqrt(m2) + eps * np.sqrt(1 - b2p)))
    return {"ParamOut": p, "Moment1Out": m1, "Moment2Out": m2, "Beta1PowOut": np.array([b1p * b1]),
            "Beta2PowOut": np.array([b2p * b2])}


def _adam_master_reference(inputs, attrs):
    """Adam on the float32 master copy; the float16 parameter is its cast."""
    p, g = inputs["MasterParam"].astype("float64"), inputs["Grad"].astype("float64")
    m1, m2 = inputs["Moment1"].astype("float64"), inputs["Moment2"].astype("float64")
    lr, b1p, b2p = (float(inputs[k][0]) for k in ("LearningRate", "Beta1Pow", "Beta2Pow"))
    b1, b2, eps = _f32(0.9), _f32(0.999), _f32(1e-8)
    m1 = b1 * m1 + (1 - b1) * g
    m2 = b2 * m2 + (1 - b2) * g * g
    p = p - lr * np.sqrt(1 - b2p) / (1 - b1p) * (m1 / (np.sqrt(m2) + eps * np.sqrt(1 - b2p)))
    return {"ParamOut": p.astype("float16"), "MasterParamOut": p, "Moment1Out": m1, "Moment2Out": m2}


def _rmsprop_reference(inputs, attrs):
    p, ms, g, mom = (inputs[k].astype("float64") for k in ("Param", "MeanSquare", "Grad", "Moment"))
    lr = float(inputs["LearningRate"][0])
    rho, eps, momentum = _f32(attrs["decay"]), _f32(attrs["epsilon"]), _f32(attrs.get("momentum", 0.0))
    ms = rho * ms + (1 - rho) * g * g
    out = {"MeanSquareOut": ms}
    denom = ms + eps
    if attrs.get("centered"):
        mg = rho * inputs["MeanGrad"] + (1 - rho) * g
        denom = ms - mg * mg + eps
        out["MeanGradOut"] = mg
    mom = momentum * mom + lr * g / np.sqrt(denom)
    return {**out, "MomentOut": mom, "ParamOut": p - mom}


_MASTER = rand(*SHAPE)
ADAM_OUTS = ("ParamOut", "Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut")
# Paddle's rmsprop kernel insists that ParamOut is Param (in place), which a one-op table program with
# fresh outputs cannot be: NumPy is the reference here; tests/test_optimizers.py runs it in place
# against Paddle.
RMSPROP_REF = {"paddle": False, "oracle": _rmsprop_reference}
ADAM_TENSORS = _tensors("Param", "Grad", "Moment1", "Moment2")

CASES = [
    Case("sgd", {"Param": rand(*SHAPE), "LearningRate": _lr(0.1), "Grad": rand(*SHAPE)}, outputs=("ParamOut",),
         grad=NO_GRAD, batch_dims=_tensors("Param", "Grad")),
    Case("sgd", {"Param": rand(3, 4, dtype="float64"), "LearningRate": _lr(0.1, "float64"),
                 "Grad": rand(3, 4, dtype="float64")}, outputs=("ParamOut",), grad=NO_GRAD, batch_dims=(),
         name="f64"),
    Case("momentum", {"Param": rand(*SHAPE), "Grad": rand(*SHAPE), "Velocity": rand(*SHAPE), "LearningRate": _lr()},
         {"mu": 0.9}, outputs=("ParamOut", "VelocityOut"), grad=NO_GRAD,
         batch_dims=_tensors("Param", "Grad", "Velocity")),
    Case("momentum", {"Param": rand(*SHAPE), "Grad": rand(*SHAPE), "Velocity": rand(*SHAPE), "LearningRate": _lr()},
         {"mu": 0.8, "use_nesterov": True}, outputs=("ParamOut", "VelocityOut"), grad=NO_GRAD,
         batch_dims=_tensors("Param", "Grad", "Velocity"), name="nesterov"),
    Case("momentum", {"Param": rand(*SHAPE), "Grad": rand(*SHAPE), "Velocity": rand(*SHAPE), "LearningRate": _lr()},
         {"mu": 0.9, "regularization_method": "l2_decay", "regularization_coeff": 0.05},
         outputs=("ParamOut", "VelocityOut"), grad=NO_GRAD, batch_dims=_tensors("Param", "Grad", "Velocity"),
         name="l2_decay"),
    # Paddle's CPU momentum kernel ignores rescale_grad (its GPU kernel and its docs apply it to the
    # gradient first): this row follows the documented formula, with NumPy as the reference.
    Case("momentum", {"Param": rand(*SHAPE), "Grad": rand(*SHAPE), "Velocity": rand(*SHAPE), "LearningRate": _lr()},
         {"mu": 0.9, "regularization_method": "l2_decay", "regularization_coeff": 0.05, "rescale_grad": 0.5},
         outputs=("ParamOut", "VelocityOut"), grad=NO_GRAD, batch_dims=_tensors("Param", "Grad", "Velocity"),
         paddle=False, oracle=_momentum_reference, name="rescale_grad"),
    Case("adam", _adam_inputs(), {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}, outputs=ADAM_OUTS, grad=NO_GRAD,
         batch_dims=ADAM_TENSORS),
    Case("adam", _adam_inputs(), {"beta1": 0.8, "beta2": 0.99, "epsilon": 1e-3, "use_global_beta_pow": True},
         outputs=("ParamOut", "Moment1Out", "Moment2Out"), grad=NO_GRAD, batch_dims=ADAM_TENSORS,
         name="global_beta_pow"),
    Case("adam", {**_adam_inputs(), "Beta1Tensor": np.array([0.85], "float32"),
                  "Beta2Tensor": np.array([0.995], "float32"), "EpsilonTensor": np.array([1e-4], "float32")},
         outputs=ADAM_OUTS, grad=NO_GRAD, batch_dims=ADAM_TENSORS, name="beta_tensors"),
    Case("adam", {**_adam_inputs(), "SkipUpdate": np.array([True])}, outputs=ADAM_OUTS, grad=NO_GRAD,
         batch_dims=ADAM_TENSORS, name="skip_update"),
    Case("adam", _adam_inputs("float64"), outputs=ADAM_OUTS, grad=NO_GRAD, batch_dims=(), rtol=1e-10, atol=1e-12,
         name="f64"),
    # multi_precision: a float16 parameter updated through its float32 master copy (Paddle has no
    # float16 CPU kernel to compare with).
    Case("adam", {**_adam_inputs(), "Param": _MASTER.astype("float16"), "Grad": rand(*SHAPE).astype("float16"),
                  "MasterParam": _MASTER},
         {"multi_precision": True}, outputs=("ParamOut", "MasterParamOut", "Moment1Out", "Moment2Out"),
         grad=NO_GRAD, batch_dims=ADAM_TENSORS + ("MasterParam",), rtol=1e-3, atol=1e-3, paddle=False,
         oracle=_adam_master_reference, name="multi_precision"),
    Case("adamw", _adam_inputs(), {"coeff": 0.05, "with_decay": True}, outputs=ADAM_OUTS, grad=NO_GRAD,
         batch_dims=ADAM_TENSORS),
    # lr_ratio: Paddle's CPU kernel applies it to the decay only (its GPU kernel and docs to the whole
    # step; its Python API refuses it on CPU). We follow the documented formula; NumPy is the reference.
    Case("adamw", _adam_inputs(), {"coeff": 0.05, "with_decay": True, "lr_ratio": 0.5}, outputs=ADAM_OUTS,
         grad=NO_GRAD, batch_dims=ADAM_TENSORS, paddle=False, oracle=_adamw_reference, name="lr_ratio"),
    Case("adamw", _adam_inputs(), {"coeff": 0.05, "with_decay": False}, outputs=ADAM_OUTS, grad=NO_GRAD,
         batch_dims=ADAM_TENSORS, name="no_decay"),
    Case("adamax", {"Param": rand(*SHAPE), "Grad": rand(*SHAPE), "LearningRate": _lr(),
                    "Moment": rand(*SHAPE, low=-0.1, high=0.1), "InfNorm": positive(*SHAPE, low=0.01, high=1.0),
                    "Beta1Pow": _pow(0.9)},
         outputs=("ParamOut", "MomentOut", "InfNormOut"), grad=NO_GRAD,
         batch_dims=_tensors("Param", "Grad", "Moment", "InfNorm")),
    Case("lamb", _adam_inputs(), {"weight_decay": 0.01}, outputs=ADAM_OUTS, grad=NO_GRAD, batch_dims=ADAM_TENSORS),
    Case("lamb", _adam_inputs(), {"weight_decay": 0.0}, outputs=ADAM_OUTS, grad=NO_GRAD, batch_dims=ADAM_TENSORS,
         name="no_decay"),
    Case("lamb", _adam_inputs(), {"weight_decay": 0.0, "always_adapt": True}, outputs=ADAM_OUTS, grad=NO_GRAD,
         batch_dims=ADAM_TENSORS, name="always_adapt"),
    Case("adagrad", {"Param": rand(*SHAPE), "Grad": rand(*SHAPE), "Moment": positive(*SHAPE, low=0.0, high=1.0),
                     "LearningRate": _lr()},
         outputs=("ParamOut", "MomentOut"), grad=NO_GRAD, batch_dims=_tensors("Param", "Grad", "Moment")),
    Case("rmsprop", {"Param": rand(*SHAPE), "MeanSquare": positive(*SHAPE, low=0.0, high=0.5), "Grad": rand(*SHAPE),
                     "Moment": rand(*SHAPE, low=-0.1, high=0.1), "LearningRate": _lr()},
         {"decay": 0.95, "epsilon": 1e-6}, outputs=("ParamOut", "MomentOut", "MeanSquareOut"), grad=NO_GRAD,
         batch_dims=_tensors("Param", "MeanSquare", "Grad", "Moment"), **RMSPROP_REF),
    Case("rmsprop", {"Param": rand(*SHAPE), "MeanSquare": positive(*SHAPE, low=0.0, high=0.5), "Grad": rand(*SHAPE),
                     "Moment": rand(*SHAPE, low=-0.1, high=0.1), "LearningRate": _lr()},
         {"decay": 0.9, "epsilon": 1e-6, "momentum": 0.9}, outputs=("ParamOut", "MomentOut", "MeanSquareOut"),
         grad=NO_GRAD, batch_dims=_tensors("Param", "MeanSquare", "Grad", "Moment"), name="momentum", **RMSPROP_REF),
    Case("rmsprop", {"Param": rand(*SHAPE), "MeanSquare": positive(*SHAPE, low=0.3, high=0.5), "Grad": rand(*SHAPE),
                     "Moment": rand(*SHAPE, low=-0.1, high=0.1), "LearningRate": _lr(),
                     "MeanGrad": rand(*SHAPE, low=-0.1, high=0.1)},
         {"decay": 0.95, "epsilon": 1e-6, "momentum": 0.5, "centered": True},
         outputs=("ParamOut", "MomentOut", "MeanSquareOut", "MeanGradOut"), grad=NO_GRAD,
         batch_dims=_tensors("Param", "MeanSquare", "Grad", "Moment", "MeanGrad"), name="centered", **RMSPROP_REF),
    Case("squared_l2_norm", {"X": rand(3, 4)}),
    Case("squared_l2_norm", {"X": rand(2, 3, 2, dtype="float64")}, rtol=1e-10, atol=1e-12, name="f64"),
    Case("clip_by_norm", {"X": rand(3, 4)}, {"max_norm": 0.5}, grad=NO_GRAD, name="clipped"),
    Case("clip_by_norm", {"X": rand(3, 4)}, {"max_norm": 10.0}, grad=NO_GRAD, name="unclipped"),
]
