"""Op-table rows: Fluid 1.x's other optimizer ops (``decayed_adagrad``, ``adadelta``, ``ftrl``,
``lars_momentum``), one update step each, compared with Paddle 2.6.2's kernels."""

import numpy as np

from . import Case, positive, rand

NO_GRAD = ()
SHAPE = (4, 5)


def _lr(value=0.01, dtype="float32"):
    return np.array([value], dtype)


def _adadelta_without_rate(inputs, attrs):
    """Fluid 1.x's adadelta op had no LearningRate: the step is not scaled."""
    p, g = inputs["Param"].astype("float64"), inputs["Grad"].astype("float64")
    eg, ex = inputs["AvgSquaredGrad"].astype("float64"), inputs["AvgSquaredUpdate"].astype("float64")
    rho, eps = np.float64(np.float32(attrs["rho"])), np.float64(np.float32(attrs["epsilon"]))
    eg = rho * eg + (1 - rho) * g * g
    update = -np.sqrt((ex + eps) / (eg + eps)) * g
    ex = rho * ex + (1 - rho) * update * update
    return {"ParamOut": p + update, "AvgSquaredGradOut": eg, "AvgSquaredUpdateOut": ex}


def _adadelta_inputs():
    return {"Param": rand(*SHAPE), "Grad": rand(*SHAPE), "AvgSquaredGrad": positive(*SHAPE, low=0.01, high=0.5),
            "AvgSquaredUpdate": positive(*SHAPE, low=0.001, high=0.1)}


def _ftrl_inputs():
    return {"Param": rand(*SHAPE), "SquaredAccumulator": positive(*SHAPE, low=0.1, high=1.0),
            "LinearAccumulator": rand(*SHAPE, low=-0.5, high=0.5), "Grad": rand(*SHAPE), "LearningRate": _lr(0.1)}


def _lars_inputs(n=1):
    return {"Param": [rand(*SHAPE) for _ in range(n)], "Grad": [rand(*SHAPE) for _ in range(n)],
            "Velocity": [rand(*SHAPE, low=-0.1, high=0.1) for _ in range(n)],
            "LearningRate": [_lr(0.1) for _ in range(n)]}


ADADELTA_OUTS = ("ParamOut", "AvgSquaredGradOut", "AvgSquaredUpdateOut")
FTRL_OUTS = ("ParamOut", "SquaredAccumOut", "LinearAccumOut")

CASES = [
    Case("decayed_adagrad", {"Param": rand(*SHAPE), "Grad": rand(*SHAPE), "Moment": positive(*SHAPE, low=0.0, high=1.0),
                             "LearningRate": _lr()},
         {"decay": 0.9, "epsilon": 1e-6}, outputs=("ParamOut", "MomentOut"), grad=NO_GRAD,
         batch_dims=("Param", "Grad", "Moment")),
    Case("adadelta", {**_adadelta_inputs(), "LearningRate": _lr(0.5)}, {"rho": 0.9, "epsilon": 1e-6},
         outputs=ADADELTA_OUTS, grad=NO_GRAD, batch_dims=("Param", "Grad", "AvgSquaredGrad", "AvgSquaredUpdate")),
    Case("adadelta", _adadelta_inputs(), {"rho": 0.95, "epsilon": 1e-6}, outputs=ADADELTA_OUTS, grad=NO_GRAD,
         batch_dims=("Param", "Grad", "AvgSquaredGrad", "AvgSquaredUpdate"), paddle=False,
         oracle=_adadelta_without_rate, name="fluid1_no_rate"),
    Case("ftrl", _ftrl_inputs(), {"l1": 0.01, "l2": 0.02}, outputs=FTRL_OUTS, grad=NO_GRAD,
         batch_dims=("Param", "SquaredAccumulator", "LinearAccumulator", "Grad")),
    Case("ftrl", _ftrl_inputs(), {"l1": 0.2, "l2": 0.0, "lr_power": -0.7}, outputs=FTRL_OUTS, grad=NO_GRAD,
         batch_dims=("Param", "SquaredAccumulator", "LinearAccumulator", "Grad"), name="lr_power"),
    Case("lars_momentum", _lars_inputs(), {"mu": 0.9, "lars_coeff": 0.001, "lars_weight_decay": [0.0005]},
         outputs=("ParamOut", "VelocityOut"), grad=NO_GRAD, batch_dims=()),
    Case("lars_momentum", _lars_inputs(2), {"mu": 0.8, "lars_coeff": 0.01, "lars_weight_decay": [0.001, 0.0],
                                            "epsilon": 1e-6, "rescale_grad": 0.5},
         outputs=("ParamOut", "VelocityOut"), output_counts={"ParamOut": 2, "VelocityOut": 2}, grad=NO_GRAD,
         batch_dims=(), name="two_params"),
]
