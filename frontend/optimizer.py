"""Optimizers: ``minimize(loss)`` appends the backward pass and Paddle's optimizer ops.

>>> # opt = fj.optimizer.Adam(learning_rate=1e-3)
>>> # opt_ops, params_grads = opt.minimize(cost)
>>> # exe.run(fj.default_startup_program())     # parameters, accumulators and the learning rate
>>> # loss, gw = exe.run(feed=..., fetch_list=[cost, "fc_0.w_0@GRAD"])

What ``minimize`` builds is what Paddle 2.6's static ``paddle.optimizer.*`` builds:

1. ``append_backward(loss)`` (gradient ops, op_role Backward);
2. with ``grad_clip=``, the clipping ops (see :mod:`fluidjax.frontend.clip`);
3. regularization ops (``weight_decay=`` / ``ParamAttr(regularizer=...)``, the parameter's own
   regularizer first; see :mod:`fluidjax.frontend.regularizer`);
4. for every parameter, sorted by name, one optimizer op (``sgd``, ``adam``, …) whose ``…Out``
   slots name the same variables as its inputs, so the update happens in place (the Executor
   donates those buffers).

The learning rate (``learning_rate_0``) and the accumulators (``fc_0.w_0_moment1_0``,
``fc_0.w_0_beta1_pow_acc_0``, …) are persistable variables of the main program; the startup
program fills them (``fill_constant``). Optimizer, clipping and regularization ops carry
``op_role`` Optimize (2); the per-parameter learning-rate ``scale`` carries Optimize|LRSched (18),
as in Paddle. A :mod:`~fluidjax.frontend.lr` scheduler as ``learning_rate`` is written into the
learning-rate variable before every run (a run hook), so ``scheduler.step()`` never recompiles.

This module is also Fluid 1.x's ``fluid.optimizer``: every class takes Fluid 1.8's arguments in
Fluid's order (``learning_rate, ..., parameter_list, regularization, grad_clip, name``) and Paddle
2.x's keywords (``parameters=``, ``weight_decay=``); ``SGDOptimizer`` is ``SGD`` and so on. A
``learning_rate`` may be a Variable — a schedule built as ops (``fluid.layers.exponential_decay``,
...) or a ``create_global_var`` — which the optimizer ops then read, as in Fluid. Without a
``grad_clip``, the clips given per parameter (``fluid.clip.set_gradient_clip``,
``ParamAttr(gradient_clip=...)``) are applied. ``ExponentialMovingAverage``, ``ModelAverage`` and
``LookaheadOptimizer`` are in :mod:`.averaging`; the wrappers ``RecomputeOptimizer`` (Fluid 1.8's
recomputation between checkpoints) and ``GradientMergeOptimizer`` (gradient accumulation over
``k_steps`` runs) in :mod:`.recompute` and :mod:`.gradient_merge` (``docs/training.md``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Sequence

import numpy as np

from ..ir import dtypes, unique_name
from ..ir.backward import append_backward
from ..ir.program import (OP_ROLE_LRSCHED, OP_ROLE_OPTIMIZE, Program, default_main_program,
                          default_startup_program)
from ..ir.variable import Parameter, Variable
from . import clip as _clip
from .averaging import ExponentialMovingAverage, LookaheadOptimizer, ModelAverage  # noqa: F401
from .gradient_merge import GradientMergeOptimizer  # noqa: F401
from .recompute import RecomputeOptimizer  # noqa: F401
from . import lr
from .framework import program_guard
from .initializer import Constant
from .lr import LRScheduler
from .minimize import Minimizes
from .regularizer import L2Decay, WeightDecayRegularizer, append_regularization

__all__ = ["Optimizer", "SGD", "Momentum", "Adam", "AdamW", "Adagrad", "RMSProp", "Adamax", "Lamb", "lr",
           "DecayedAdagrad", "Adadelta", "Ftrl", "LarsMomentum",
           "SGDOptimizer", "MomentumOptimizer", "AdamOptimizer", "AdagradOptimizer", "RMSPropOptimizer",
           "AdamaxOptimizer", "LambOptimizer", "DecayedAdagradOptimizer", "AdadeltaOptimizer", "FtrlOptimizer",
           "LarsMomentumOptimizer", "DGCMomentumOptimizer",
           "ExponentialMovingAverage", "ModelAverage", "LookaheadOptimizer", "RecomputeOptimizer",
           "GradientMergeOptimizer"]

ParamsGrads = list[tuple[Parameter, Variable]]

# Paddle creates the learning-rate variable in the default float dtype, whatever the parameters'.
_LR_DTYPE = "float32"


class Optimizer(Minimizes):
    """Base class of the optimizers; subclasses define their accumulators and their op.

    ``learning_rate`` is a float, a :class:`~fluidjax.frontend.lr.LRScheduler` or a Variable of
    the program (Fluid 1.x: a schedule of ``fluid.layers``); ``regularization`` (alias
    ``weight_decay``) a float (L2 coefficient) or a regularizer, for the parameters without their
    own; ``grad_clip`` one of :mod:`fluidjax.frontend.clip`'s classes; ``parameter_list`` (alias
    ``parameters``) limits which parameters are updated; ``name`` prefixes the accumulators.
    """

    _op_type = ""

    def __init__(self, learning_rate: float | LRScheduler | Variable, parameter_list: Sequence | None = None,
                 regularization: float | WeightDecayRegularizer | None = None, grad_clip=None,
                 name: str | None = None, *, parameters: Sequence | None = None,
                 weight_decay: float | WeightDecayRegularizer | None = None) -> None:
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float, LRScheduler, Variable)):
            raise TypeError("learning_rate must be a float, an LRScheduler or a Variable (e.g. "
                            f"fluid.layers.exponential_decay(...)), got {learning_rate!r}")
        if weight_decay is not None and regularization is not None:
            raise ValueError("give weight_decay or regularization, not both")
        if parameters is not None and parameter_list is not None:
            raise ValueError("give parameters or parameter_list, not both")
        decay = weight_decay if weight_decay is not None else regularization
        if isinstance(decay, (int, float)) and not isinstance(decay, bool):
            decay = L2Decay(float(decay))
        if decay is not None and not isinstance(decay, WeightDecayRegularizer):
            raise TypeError("weight_decay must be a float or a regularizer (fj.regularizer.L2Decay, ...), "
                            f"got {decay!r}")
        if grad_clip is not None and not isinstance(grad_clip, _clip.GradientClipBase):
            raise TypeError(f"grad_clip must be a fj.clip.ClipGradBy* object, got {grad_clip!r}")
        if isinstance(learning_rate, (LRScheduler, Variable)):
            self._learning_rate = learning_rate
        else:
            self._learning_rate = float(learning_rate)
        self._parameter_list = list(parameters if parameters is not None else parameter_list or []) or None
        self.regularization = decay
        self._grad_clip = grad_clip
        self._name = name
        self._accumulators: dict[str, dict[str, Variable]] = defaultdict(dict)
        self._lr_vars: dict[int, Variable] = {}          # program uid -> learning-rate variable
        self._hooked: set[int] = set()                    # programs whose run hooks write the lr
        self._main: Program | None = None
        self._startup: Program | None = None
        if isinstance(learning_rate, Variable):
            # A rate computed by the program (a schedule of fluid.layers, a create_global_var):
            # the optimizer ops of that program read it, as in Fluid.
            self._lr_vars[learning_rate.block.program._uid] = learning_rate

    # -- the learning rate -------------------------------------------------------------------
    def get_lr(self) -> float:
        """The current learning rate (a scheduler's current value)."""
        if isinstance(self._learning_rate, Variable):
            raise TypeError(f"this optimizer's learning rate is the Variable {self._learning_rate.name!r}, computed "
                            "by the program: fetch it (exe.run(..., fetch_list=[lr]))")
        if isinstance(self._learning_rate, LRScheduler):
            return self._learning_rate()
        return self._learning_rate

    def set_lr(self, value: float) -> None:
        """Set a float learning rate; programs already built pick it up at their next run
        (through a run hook: no recompilation)."""
        if isinstance(self._learning_rate, LRScheduler):
            raise RuntimeError("this optimizer's learning rate is an LRScheduler; step the scheduler instead")
        if isinstance(self._learning_rate, Variable):
            raise RuntimeError(f"this optimizer's learning rate is the Variable {self._learning_rate.name!r}, "
                               "computed by the program; set that variable (or its schedule) instead")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"set_lr needs a float, got {value!r}")
        self._learning_rate = float(value)
        for uid, var in self._lr_vars.items():
            self._hook_lr(var)

    def _global_learning_rate(self, program: Program | None = None) -> Variable | None:
        """The learning-rate Variable of ``program`` (Fluid's private API, used by 1.x scripts to
        fetch the rate: ``optimizer._global_learning_rate()``).

        Without ``program``: the rate of the default main program, else that of the program
        :meth:`minimize` optimized. Before ``minimize``, a float or :class:`LRScheduler` rate is
        created here in the program asked for (the default main program; its initializer in the
        default startup program), as Fluid's ``_create_global_learning_rate``; ``minimize`` of
        that program then uses the same Variable. A Variable rate is returned for its own program;
        ``None`` for another program."""
        if program is None:
            program = default_main_program()
            if program._uid not in self._lr_vars and self._main is not None:
                return self._lr_vars.get(self._main._uid)
        if program._uid in self._lr_vars:
            return self._lr_vars[program._uid]
        if isinstance(self._learning_rate, Variable):
            return None
        startup = self._startup if program is self._main else default_startup_program()
        return self._create_global_learning_rate(program, startup)

    def _create_global_learning_rate(self, main: Program | None = None,
                                     startup: Program | None = None) -> Variable:
        main = main or self._main
        startup = startup or self._startup
        if main._uid in self._lr_vars:
            return self._lr_vars[main._uid]
        if isinstance(self._learning_rate, Variable):
            raise TypeError(f"the learning rate {self._learning_rate.name!r} is a Variable of another program; "
                            "an optimizer whose rate is a Variable optimizes that program only (as in Fluid)")
        name = unique_name.generate("learning_rate")
        var = main.global_block().create_var(name, (), _LR_DTYPE, persistable=True, stop_gradient=True)
        Constant(self.get_lr())(var, startup.global_block())
        self._lr_vars[main._uid] = var
        if isinstance(self._learning_rate, LRScheduler):
            self._learning_rate._var_name = name
            main.lr_scheduler = self._learning_rate
            self._hook_lr(var)
        return var

    def _hook_lr(self, var: Variable) -> None:
        """Write ``get_lr()`` into ``var`` in the scope before every run of its program."""
        program = var.block.program
        if program._uid in self._hooked:
            return
        self._hooked.add(program._uid)
        from ..lowering.lod_tensor import LoDTensor

        name, shape, dtype = var.name, var.shape, dtypes.to_numpy(var.dtype)

        def write_learning_rate(scope) -> None:
            holder = scope.find_var(name) or scope.var(name)
            holder.get_mutable(LoDTensor).set(np.full(shape, self.get_lr(), dtype))

        write_learning_rate.optimizer = self
        program.run_hooks.append(write_learning_rate)

    def _create_param_lr(self, param: Parameter) -> Variable:
        """The global learning rate, or ``lr * ParamAttr(learning_rate=...)`` by a ``scale`` op."""
        global_lr = self._global_learning_rate()
        factor = getattr(param, "optimize_attr", {}).get("learning_rate", 1.0)
        if isinstance(factor, Variable):
            return factor
        if factor == 1.0:
            return global_lr
        block = self._main.global_block()
        out = block.create_var(unique_name.generate("tmp"), (), global_lr.dtype, stop_gradient=True)
        block.append_op("scale", {"X": global_lr}, {"Out": out},
                        {"scale": float(factor), "bias": 0.0, "bias_after_scale": True,
                         "op_role": OP_ROLE_OPTIMIZE | OP_ROLE_LRSCHED})
        return out

    # -- accumulators ------------------------------------------------------------------------------
    def _add_accumulator(self, name: str, param: Parameter, fill_value: float = 0.0, shape=None,
                         dtype=None) -> Variable:
        """A persistable ``<param>_<name>_<n>`` in the main program, filled by the startup program
        (``<param>_<optimizer name>_<name>_<n>`` for an optimizer given ``name=``, as in Paddle)."""
        if self._name is not None:
            name = f"{self._name}_{name}"
        if param.name in self._accumulators[name]:
            return self._accumulators[name][param.name]
        var_name = unique_name.generate(f"{param.name}_{name}")
        var = self._main.global_block().create_var(
            var_name, param.shape if shape is None else tuple(shape), dtype or param.dtype,
            persistable=True, stop_gradient=True)
        Constant(float(fill_value))(var, self._startup.global_block())
        self._accumulators[name][param.name] = var
        return var

    def _get_accumulator(self, name: str, param: Parameter) -> Variable:
        if self._name is not None:
            name = f"{self._name}_{name}"
        try:
            return self._accumulators[name][param.name]
        except KeyError:
            raise KeyError(f"{type(self).__name__} has no accumulator {name!r} for {param.name!r}") from None

    def _create_accumulators(self, block, parameters: list[Parameter]) -> None:
        """Subclasses add their accumulators for ``parameters``."""

    # -- the passes ---------------------------------------------------------------------------------
    def backward(self, loss: Variable, startup_program: Program | None = None, parameter_list=None,
                 no_grad_set=None, callbacks=None) -> ParamsGrads:
        """Append the backward pass of ``loss``; return ``[(parameter, gradient)]``."""
        params = parameter_list if parameter_list is not None else self._parameter_list
        block = loss.block
        start = len(block.ops)
        params_grads = append_backward(loss, params, no_grad_set)
        _clip.append_error_clip_ops(block, start)
        return params_grads

    def apply_gradients(self, params_grads: ParamsGrads, startup_program: Program | None = None) -> list:
        """Append clipping, regularization and the optimizer ops for ``params_grads``; return the
        optimizer ops (the per-parameter learning-rate ``scale`` ops included)."""
        params_grads = [(p, g) for p, g in params_grads if g is not None]
        if not params_grads:
            raise ValueError("no (parameter, gradient) pairs to optimize: "
                             "does the loss depend on a trainable parameter?")
        params_grads = sorted(params_grads, key=lambda pg: pg[0].name)
        main = params_grads[0][0].block.program
        startup = startup_program or default_startup_program()
        self._main, self._startup = main, startup
        with program_guard(main, startup):
            if self._grad_clip is not None:
                params_grads = self._grad_clip(params_grads)
            else:   # Fluid 1.x: set_gradient_clip(...) or ParamAttr(gradient_clip=...) per parameter
                params_grads = _clip.append_gradient_clip_ops(params_grads)
            params_grads = [(p, self._regularize(p, g)) for p, g in params_grads]
            return self._create_optimization_pass(params_grads)

    def apply_optimize(self, loss: Variable, startup_program: Program | None, params_grads: ParamsGrads) -> list:
        """Paddle's name for :meth:`apply_gradients` called by :meth:`minimize`."""
        return self.apply_gradients(params_grads, startup_program)

    def _regularize(self, param: Parameter, grad: Variable) -> Variable:
        with _clip.optimize_guard(grad.block, param, grad):
            return append_regularization(param, grad, self.regularization)

    def _create_optimization_pass(self, params_grads: ParamsGrads) -> list:
        block = self._main.global_block()
        start = len(block.ops)
        self._create_global_learning_rate()
        self._create_accumulators(block, [p for p, _ in params_grads if not p.stop_gradient])
        for param, grad in params_grads:
            if param.stop_gradient:
                continue
            with _clip.optimize_guard(block, param, grad):
                self._append_optimize_op(block, param, grad)
        self._finish_update(block, params_grads)
        return block.ops[start:]

    def _append_optimize_op(self, block, param: Parameter, grad: Variable):
        raise NotImplementedError

    def _finish_update(self, block, params_grads: ParamsGrads) -> None:
        """Ops after all updates (Adamax advances its beta power here)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(learning_rate={self._learning_rate!r})"


def _float(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a float, got {value!r}")
    return float(value)


class SGD(Optimizer):
    """Plain SGD: ``param -= lr * grad`` (op ``sgd``)."""

    _op_type = "sgd"

    def __init__(self, learning_rate: float | LRScheduler | Variable = 0.001, parameter_list=None,
                 regularization=None, grad_clip=None, name: str | None = None, *, multi_precision: bool = False,
                 **kwargs) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name, **kwargs)
        self._multi_precision = multi_precision

    def _append_optimize_op(self, block, param, grad):
        return block.append_op("sgd", {"Param": param, "Grad": grad, "LearningRate": self._create_param_lr(param)},
                               {"ParamOut": param}, {"multi_precision": False})


class Momentum(Optimizer):
    """SGD with momentum ``mu`` (op ``momentum``), optionally Nesterov's.

    As in Paddle, an L2Decay (the optimizer's, or a parameter's own) is folded into the op
    (``regularization_method="l2_decay"``) instead of emitting ``scale``/``sum`` ops.
    """

    _op_type = "momentum"
    _velocity = "velocity"

    def __init__(self, learning_rate: float | LRScheduler | Variable = 0.001, momentum: float = 0.9,
                 parameter_list=None, use_nesterov: bool = False, regularization=None, grad_clip=None,
                 name: str | None = None, *, weight_decay=None, multi_precision: bool = False,
                 rescale_grad: float = 1.0, use_multi_tensor: bool = False, **kwargs) -> None:
        if weight_decay is not None and regularization is not None:
            raise ValueError("give weight_decay or regularization, not both")
        decay = weight_decay if weight_decay is not None else regularization
        if isinstance(decay, (int, float)) and not isinstance(decay, bool):
            decay = L2Decay(float(decay))
        fused = decay if isinstance(decay, L2Decay) else None
        super().__init__(learning_rate, parameter_list, None if fused is not None else decay, grad_clip, name,
                         **kwargs)
        self._momentum = _float(momentum, "momentum")
        self._use_nesterov = bool(use_nesterov)
        self._rescale_grad = float(rescale_grad)
        self._fused_l2 = fused

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator(self._velocity, p)

    def _regularize(self, param, grad):
        # A parameter's own L2Decay is folded into its momentum op; other regularizers are ops.
        if isinstance(getattr(param, "regularizer", None), L2Decay):
            return grad
        return super()._regularize(param, grad)

    def _append_optimize_op(self, block, param, grad):
        own = getattr(param, "regularizer", None)
        method, coeff = "", 0.0
        if isinstance(own, L2Decay):
            method, coeff = "l2_decay", own.coeff
        elif own is None and self._fused_l2 is not None:
            method, coeff = "l2_decay", self._fused_l2.coeff
        velocity = self._get_accumulator(self._velocity, param)
        return block.append_op(
            "momentum",
            {"Param": param, "Grad": grad, "Velocity": velocity, "LearningRate": self._create_param_lr(param)},
            {"ParamOut": param, "VelocityOut": velocity},
            {"mu": self._momentum, "use_nesterov": self._use_nesterov, "regularization_method": method,
             "regularization_coeff": float(coeff), "multi_precision": False, "rescale_grad": self._rescale_grad})


class _AdamBase(Optimizer):
    _moment1, _moment2 = "moment1", "moment2"
    _beta1_pow, _beta2_pow = "beta1_pow_acc", "beta2_pow_acc"

    def _init_betas(self, beta1, beta2, epsilon, allow_variables: bool = False) -> None:
        betas = []
        for value, what in ((beta1, "beta1"), (beta2, "beta2")):
            if allow_variables and isinstance(value, Variable):
                betas.append(value)
                continue
            value = _float(value, what)
            if not 0 <= value < 1:
                raise ValueError(f"{what} must be in [0, 1), got {value}")
            betas.append(value)
        self._beta1, self._beta2 = betas
        self._epsilon = _float(epsilon, "epsilon")

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator(self._moment1, p)
            self._add_accumulator(self._moment2, p)
            # A Variable beta starts its power at Fluid's defaults (0.9, 0.999), as Fluid does.
            b1 = 0.9 if isinstance(self._beta1, Variable) else self._beta1
            b2 = 0.999 if isinstance(self._beta2, Variable) else self._beta2
            self._add_accumulator(self._beta1_pow, p, fill_value=b1, shape=(1,))
            self._add_accumulator(self._beta2_pow, p, fill_value=b2, shape=(1,))

    def _adam_slots(self, param, grad):
        acc = {k: self._get_accumulator(k, param) for k in (self._moment1, self._moment2, self._beta1_pow,
                                                                self._beta2_pow)}
        inputs = {"Param": param, "Grad": grad, "LearningRate": self._create_param_lr(param),
                  "Moment1": acc[self._moment1], "Moment2": acc[self._moment2],
                  "Beta1Pow": acc[self._beta1_pow], "Beta2Pow": acc[self._beta2_pow]}
        outputs = {"ParamOut": param, "Moment1Out": acc[self._moment1], "Moment2Out": acc[self._moment2],
                   "Beta1PowOut": acc[self._beta1_pow], "Beta2PowOut": acc[self._beta2_pow]}
        return inputs, outputs


class Adam(_AdamBase):
    """Adam (op ``adam``): moments ``moment1``/``moment2`` and beta powers per parameter."""

    _op_type = "adam"

    def __init__(self, learning_rate: float | LRScheduler | Variable = 0.001, beta1: float | Variable = 0.9,
                 beta2: float | Variable = 0.999, epsilon: float = 1e-8, parameter_list=None, regularization=None,
                 grad_clip=None, name: str | None = None, lazy_mode: bool = False, *, multi_precision: bool = False,
                 use_multi_tensor: bool = False, **kwargs) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name, **kwargs)
        self._init_betas(beta1, beta2, epsilon, allow_variables=True)
        self._lazy_mode = bool(lazy_mode)

    def _append_optimize_op(self, block, param, grad):
        inputs, outputs = self._adam_slots(param, grad)
        attrs = {"epsilon": self._epsilon, "lazy_mode": self._lazy_mode, "min_row_size_to_use_multithread": 1000,
                 "multi_precision": False, "use_global_beta_pow": False}
        # Fluid 1.x: a Variable beta (a schedule of the program) goes in Beta1Tensor/Beta2Tensor.
        for key, slot, value in (("beta1", "Beta1Tensor", self._beta1), ("beta2", "Beta2Tensor", self._beta2)):
            if isinstance(value, Variable):
                inputs[slot] = value
            else:
                attrs[key] = value
        return block.append_op("adam", inputs, outputs, attrs)


class AdamW(_AdamBase):
    """AdamW (op ``adamw``): Adam with decoupled weight decay ``weight_decay`` (a float).

    ``apply_decay_param_fun(name) -> bool`` picks the parameters that decay (default: all);
    ``lr_ratio(param) -> float`` scales a parameter's learning rate.
    """

    _op_type = "adamw"

    def __init__(self, learning_rate: float | LRScheduler = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, parameters=None, weight_decay: float = 0.01,
                 lr_ratio: Callable | None = None, apply_decay_param_fun: Callable | None = None, grad_clip=None,
                 lazy_mode: bool = False, multi_precision: bool = False, name: str | None = None,
                 **kwargs) -> None:
        if isinstance(weight_decay, WeightDecayRegularizer) or not isinstance(weight_decay, (int, float)):
            raise TypeError("AdamW's weight_decay is a float coefficient (give a regularizer per parameter "
                            "with ParamAttr(regularizer=...))")
        super().__init__(learning_rate, grad_clip=grad_clip, name=name, parameters=parameters, **kwargs)
        self._init_betas(beta1, beta2, epsilon)
        self._coeff = float(weight_decay)
        self._lr_ratio = lr_ratio
        self._apply_decay_param_fun = apply_decay_param_fun
        self._lazy_mode = bool(lazy_mode)

    def _append_optimize_op(self, block, param, grad):
        inputs, outputs = self._adam_slots(param, grad)
        with_decay = self._apply_decay_param_fun is None or bool(self._apply_decay_param_fun(param.name))
        ratio = 1.0 if self._lr_ratio is None else float(self._lr_ratio(param))
        return block.append_op("adamw", inputs, outputs, {
            "beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon, "lazy_mode": self._lazy_mode,
            "min_row_size_to_use_multithread": 1000, "multi_precision": False, "use_global_beta_pow": False,
            "with_decay": with_decay, "coeff": self._coeff, "lr_ratio": ratio})


class Lamb(_AdamBase):
    """LAMB (op ``lamb``): Adam moments with a layer-wise trust ratio; ``lamb_weight_decay`` is
    its decoupled decay, skipped for parameters where ``exclude_from_weight_decay_fn(param)``."""

    _op_type = "lamb"

    def __init__(self, learning_rate: float | LRScheduler | Variable = 0.001, lamb_weight_decay: float = 0.01,
                 beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-6, parameter_list=None,
                 regularization=None, grad_clip=None, exclude_from_weight_decay_fn: Callable | None = None,
                 name: str | None = None, *, multi_precision: bool = False, always_adapt: bool = False,
                 **kwargs) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name, **kwargs)
        self._init_betas(beta1, beta2, epsilon)
        self._lamb_weight_decay = _float(lamb_weight_decay, "lamb_weight_decay")
        self._exclude_fn = exclude_from_weight_decay_fn
        self._always_adapt = bool(always_adapt)

    def _append_optimize_op(self, block, param, grad):
        inputs, outputs = self._adam_slots(param, grad)
        decay = 0.0 if self._exclude_fn is not None and self._exclude_fn(param) else self._lamb_weight_decay
        return block.append_op("lamb", inputs, outputs, {
            "beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon, "weight_decay": decay,
            "always_adapt": self._always_adapt, "multi_precision": False})


class Adamax(Optimizer):
    """Adamax (op ``adamax``): moment, infinity norm and beta1 power per parameter; a ``scale``
    op after all updates advances each beta1 power."""

    _op_type = "adamax"

    def __init__(self, learning_rate: float | LRScheduler | Variable = 0.001, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-8, parameter_list=None, regularization=None,
                 grad_clip=None, name: str | None = None, **kwargs) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name, **kwargs)
        self._beta1 = _float(beta1, "beta1")
        self._beta2 = _float(beta2, "beta2")
        self._epsilon = _float(epsilon, "epsilon")

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator("moment", p)
            self._add_accumulator("inf_norm", p)
            self._add_accumulator("beta1_pow_acc", p, fill_value=self._beta1, shape=(1,))

    def _append_optimize_op(self, block, param, grad):
        moment = self._get_accumulator("moment", param)
        inf_norm = self._get_accumulator("inf_norm", param)
        beta1_pow = self._get_accumulator("beta1_pow_acc", param)
        return block.append_op(
            "adamax",
            {"Param": param, "Grad": grad, "LearningRate": self._create_param_lr(param), "Moment": moment,
             "InfNorm": inf_norm, "Beta1Pow": beta1_pow},
            {"ParamOut": param, "MomentOut": moment, "InfNormOut": inf_norm},
            {"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon, "multi_precision": False})

    def _finish_update(self, block, params_grads):
        for param, grad in params_grads:
            if param.stop_gradient:
                continue
            beta1_pow = self._get_accumulator("beta1_pow_acc", param)
            with _clip.optimize_guard(block, param, grad):
                block.append_op("scale", {"X": beta1_pow}, {"Out": beta1_pow}, {"scale": self._beta1})


class Adagrad(Optimizer):
    """Adagrad (op ``adagrad``): a ``moment`` accumulator of squared gradients per parameter,
    starting at ``initial_accumulator_value``."""

    _op_type = "adagrad"

    def __init__(self, learning_rate: float | LRScheduler | Variable, epsilon: float = 1e-6, parameter_list=None,
                 regularization=None, grad_clip=None, name: str | None = None,
                 initial_accumulator_value: float = 0.0, **kwargs) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name, **kwargs)
        self._epsilon = _float(epsilon, "epsilon")
        self._initial = _float(initial_accumulator_value, "initial_accumulator_value")

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator("moment", p, fill_value=self._initial)

    def _append_optimize_op(self, block, param, grad):
        moment = self._get_accumulator("moment", param)
        return block.append_op(
            "adagrad",
            {"Param": param, "Grad": grad, "Moment": moment, "LearningRate": self._create_param_lr(param)},
            {"ParamOut": param, "MomentOut": moment}, {"epsilon": self._epsilon, "multi_precision": False})


class RMSProp(Optimizer):
    """RMSProp (op ``rmsprop``): ``mean_square`` (decay ``rho``), ``momentum`` and, for
    ``centered``, ``mean_grad`` accumulators per parameter."""

    _op_type = "rmsprop"

    def __init__(self, learning_rate: float | LRScheduler | Variable, rho: float = 0.95, epsilon: float = 1e-6,
                 momentum: float = 0.0, centered: bool = False, parameter_list=None, regularization=None,
                 grad_clip=None, name: str | None = None, **kwargs) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name, **kwargs)
        self._rho = _float(rho, "rho")
        self._epsilon = _float(epsilon, "epsilon")
        self._momentum = _float(momentum, "momentum")
        self._centered = bool(centered)

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator("momentum", p)
            self._add_accumulator("mean_square", p)
            self._add_accumulator("mean_grad", p)

    def _append_optimize_op(self, block, param, grad):
        acc = {k: self._get_accumulator(k, param) for k in ("momentum", "mean_square", "mean_grad")}
        return block.append_op(
            "rmsprop",
            {"Param": param, "Grad": grad, "Moment": acc["momentum"], "MeanSquare": acc["mean_square"],
             "MeanGrad": acc["mean_grad"], "LearningRate": self._create_param_lr(param)},
            {"ParamOut": param, "MomentOut": acc["momentum"], "MeanSquareOut": acc["mean_square"],
             "MeanGradOut": acc["mean_grad"]},
            {"epsilon": self._epsilon, "decay": self._rho, "momentum": self._momentum,
             "centered": self._centered, "multi_precision": False})


class DecayedAdagrad(Optimizer):
    """Decayed Adagrad (op ``decayed_adagrad``): a ``moment`` accumulator that decays by ``decay``
    (Fluid 1.x's ``DecayedAdagradOptimizer``)."""

    _op_type = "decayed_adagrad"

    def __init__(self, learning_rate: float | LRScheduler | Variable, decay: float = 0.95, epsilon: float = 1e-6,
                 parameter_list=None, regularization=None, grad_clip=None, name: str | None = None,
                 **kwargs) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name, **kwargs)
        self._decay = _float(decay, "decay")
        self._epsilon = _float(epsilon, "epsilon")

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator("moment", p)

    def _append_optimize_op(self, block, param, grad):
        moment = self._get_accumulator("moment", param)
        return block.append_op(
            "decayed_adagrad",
            {"Param": param, "Grad": grad, "Moment": moment, "LearningRate": self._create_param_lr(param)},
            {"ParamOut": param, "MomentOut": moment}, {"epsilon": self._epsilon, "decay": self._decay})


class Adadelta(Optimizer):
    """Adadelta (op ``adadelta``): ``_avg_squared_grad`` and ``_avg_squared_update`` accumulators
    (decay ``rho``) per parameter — Fluid 1.x's ``AdadeltaOptimizer``.

    As in Fluid 1.x, the step is **not** scaled by ``learning_rate``: Fluid 1.x's op had no
    learning-rate input, so the op is emitted without one (Paddle 2.x's ``paddle.optimizer.Adadelta``
    multiplies its step by the rate, and Paddle 2.6 refuses the op without it).
    """

    _op_type = "adadelta"

    def __init__(self, learning_rate: float | LRScheduler | Variable, epsilon: float = 1e-6, rho: float = 0.95,
                 parameter_list=None, regularization=None, grad_clip=None, name: str | None = None,
                 **kwargs) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name, **kwargs)
        self._epsilon = _float(epsilon, "epsilon")
        self._rho = _float(rho, "rho")

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator("_avg_squared_grad", p)
            self._add_accumulator("_avg_squared_update", p)

    def _append_optimize_op(self, block, param, grad):
        sq_grad = self._get_accumulator("_avg_squared_grad", param)
        sq_update = self._get_accumulator("_avg_squared_update", param)
        return block.append_op(
            "adadelta",
            {"Param": param, "Grad": grad, "AvgSquaredGrad": sq_grad, "AvgSquaredUpdate": sq_update},
            {"ParamOut": param, "AvgSquaredGradOut": sq_grad, "AvgSquaredUpdateOut": sq_update},
            {"epsilon": self._epsilon, "rho": self._rho})


class Ftrl(Optimizer):
    """FTRL-Proximal (op ``ftrl``): ``squared`` and ``linear`` accumulators per parameter, L1/L2
    strengths ``l1``/``l2`` and ``lr_power`` (Fluid 1.x's ``FtrlOptimizer``).

    Fluid 1.x passed ``l1`` as the op's ``l2`` too (a bug fixed in Paddle 2.x); here ``l2`` is
    ``l2``, as documented.
    """

    _op_type = "ftrl"

    def __init__(self, learning_rate: float | LRScheduler | Variable, l1: float = 0.0, l2: float = 0.0,
                 lr_power: float = -0.5, parameter_list=None, regularization=None, grad_clip=None,
                 name: str | None = None, **kwargs) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name, **kwargs)
        self._l1, self._l2 = _float(l1, "l1"), _float(l2, "l2")
        self._lr_power = _float(lr_power, "lr_power")

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator("squared", p)
            self._add_accumulator("linear", p)

    def _append_optimize_op(self, block, param, grad):
        squared = self._get_accumulator("squared", param)
        linear = self._get_accumulator("linear", param)
        return block.append_op(
            "ftrl",
            {"Param": param, "Grad": grad, "SquaredAccumulator": squared, "LinearAccumulator": linear,
             "LearningRate": self._create_param_lr(param)},
            {"ParamOut": param, "SquaredAccumOut": squared, "LinearAccumOut": linear},
            {"l1": self._l1, "l2": self._l2, "lr_power": self._lr_power})


class LarsMomentum(Optimizer):
    """Momentum with LARS (op ``lars_momentum``): each parameter's rate is scaled by
    ``lars_coeff * ||w|| / (||g|| + lars_weight_decay * ||w||)`` and ``lars_weight_decay * w`` is
    added to its gradient (Fluid 1.x's ``LarsMomentumOptimizer``). ``exclude_from_weight_decay``
    (Paddle 2.x) lists name fragments of parameters that get no LARS decay."""

    _op_type = "lars_momentum"
    _velocity = "velocity"

    def __init__(self, learning_rate: float | LRScheduler | Variable, momentum: float, lars_coeff: float = 0.001,
                 lars_weight_decay: float = 0.0005, parameter_list=None, regularization=None, grad_clip=None,
                 name: str | None = None, *, exclude_from_weight_decay: Sequence[str] | None = None,
                 epsilon: float = 0.0, rescale_grad: float = 1.0, **kwargs) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name, **kwargs)
        self._momentum = _float(momentum, "momentum")
        self._lars_coeff = _float(lars_coeff, "lars_coeff")
        self._lars_weight_decay = _float(lars_weight_decay, "lars_weight_decay")
        self._exclude = list(exclude_from_weight_decay or [])
        self._epsilon = _float(epsilon, "epsilon")
        self._rescale_grad = _float(rescale_grad, "rescale_grad")

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator(self._velocity, p)

    def _append_optimize_op(self, block, param, grad):
        velocity = self._get_accumulator(self._velocity, param)
        decay = 0.0 if any(part in param.name for part in self._exclude) else self._lars_weight_decay
        return block.append_op(
            "lars_momentum",
            {"Param": [param], "Grad": [grad], "Velocity": [velocity], "LearningRate": [self._create_param_lr(param)]},
            {"ParamOut": [param], "VelocityOut": [velocity]},
            {"mu": self._momentum, "lars_coeff": self._lars_coeff, "lars_weight_decay": [decay],
             "epsilon": self._epsilon, "rescale_grad": self._rescale_grad})


class DGCMomentum(Momentum):
    """Fluid 1.x's ``DGCMomentumOptimizer``, run as plain momentum (op ``momentum``).

    Deep Gradient Compression changes what multi-GPU workers *send* each other (the top
    ``1 - sparsity`` of each large gradient, the rest accumulated locally) and needs Paddle's NCCL
    runtime. fluidjax reduces gradients with XLA's collectives, so it takes DGC's arguments
    (``rampup_begin_step``, ``rampup_step``, ``sparsity``, ``num_trainers``) and updates with plain
    momentum — which is what Fluid itself does for every parameter under 16384 elements and for
    every step before ``rampup_begin_step``. As in Fluid, ``grad_clip`` must be a
    ``GradientClipByNorm``.
    """

    def __init__(self, learning_rate: float | LRScheduler | Variable, momentum: float, rampup_begin_step: int,
                 rampup_step: int = 1, sparsity: Sequence[float] = (0.999,), parameter_list=None,
                 use_nesterov: bool = False, num_trainers: int | None = None, regularization=None, grad_clip=None,
                 name: str | None = None, **kwargs) -> None:
        if grad_clip is not None and not isinstance(grad_clip, _clip.ClipGradByNorm):
            raise TypeError("DGCMomentumOptimizer's grad_clip must be a GradientClipByNorm (as in Fluid)")
        if int(rampup_begin_step) < 0:
            raise ValueError(f"rampup_begin_step must be >= 0, got {rampup_begin_step}")
        super().__init__(learning_rate, momentum, parameter_list, use_nesterov, regularization, grad_clip, name,
                         **kwargs)
        self._rampup_begin_step = int(rampup_begin_step)
        self._rampup_step = int(rampup_step)
        self._sparsity = list(sparsity)
        self._num_trainers = num_trainers


# Fluid 1.x's names (fluid.optimizer.SGDOptimizer, ...): the same classes.
SGDOptimizer = SGD
MomentumOptimizer = Momentum
AdamOptimizer = Adam
AdagradOptimizer = Adagrad
RMSPropOptimizer = RMSProp
AdamaxOptimizer = Adamax
LambOptimizer = Lamb
DecayedAdagradOptimizer = DecayedAdagrad
AdadeltaOptimizer = Adadelta
FtrlOptimizer = Ftrl
LarsMomentumOptimizer = LarsMomentum
DGCMomentumOptimizer = DGCMomentum
