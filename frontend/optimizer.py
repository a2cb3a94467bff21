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
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Sequence

import numpy as np

from ..ir import dtypes, unique_name
from ..ir.backward import append_backward
from ..ir.program import OP_ROLE_LRSCHED, OP_ROLE_OPTIMIZE, Program, default_startup_program
from ..ir.variable import Parameter, Variable
from . import clip as _clip
from . import lr
from .framework import program_guard
from .initializer import Constant
from .lr import LRScheduler
from .regularizer import L2Decay, WeightDecayRegularizer, append_regularization

__all__ = ["Optimizer", "SGD", "Momentum", "Adam", "AdamW", "Adagrad", "RMSProp", "Adamax", "Lamb", "lr",
           "SGDOptimizer", "MomentumOptimizer", "AdamOptimizer", "AdagradOptimizer", "RMSPropOptimizer",
           "AdamaxOptimizer", "LambOptimizer"]

ParamsGrads = list[tuple[Parameter, Variable]]

# Paddle creates the learning-rate variable in the default float dtype, whatever the parameters'.
_LR_DTYPE = "float32"


class Optimizer:
    """Base class of the optimizers; subclasses define their accumulators and their op.

    ``learning_rate`` is a float or a :class:`~fluidjax.frontend.lr.LRScheduler`;
    ``weight_decay`` (alias ``regularization``) a float (L2 coefficient) or a regularizer;
    ``grad_clip`` one of :mod:`fluidjax.frontend.clip`'s classes; ``parameters`` (alias
    ``parameter_list``) limits which parameters are updated.
    """

    _op_type = ""

    def __init__(self, learning_rate: float | LRScheduler, parameters: Sequence | None = None,
                 weight_decay: float | WeightDecayRegularizer | None = None, grad_clip=None,
                 name: str | None = None, *, regularization: WeightDecayRegularizer | None = None,
                 parameter_list: Sequence | None = None) -> None:
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float, LRScheduler)):
            raise TypeError(f"learning_rate must be a float or an LRScheduler, got {learning_rate!r}")
        if weight_decay is not None and regularization is not None:
            raise ValueError("give weight_decay or regularization, not both")
        decay = weight_decay if weight_decay is not None else regularization
        if isinstance(decay, (int, float)) and not isinstance(decay, bool):
            decay = L2Decay(float(decay))
        if decay is not None and not isinstance(decay, WeightDecayRegularizer):
            raise TypeError("weight_decay must be a float or a regularizer (fj.regularizer.L2Decay, ...), "
                            f"got {decay!r}")
        if grad_clip is not None and not isinstance(grad_clip, _clip.GradientClipBase):
            raise TypeError(f"grad_clip must be a fj.clip.ClipGradBy* object, got {grad_clip!r}")
        self._learning_rate = learning_rate if isinstance(learning_rate, LRScheduler) else float(learning_rate)
        self._parameter_list = list(parameters if parameters is not None else parameter_list or []) or None
        self.regularization = decay
        self._grad_clip = grad_clip
        self._name = name
        self._accumulators: dict[str, dict[str, Variable]] = defaultdict(dict)
        self._lr_vars: dict[int, Variable] = {}          # program uid -> learning-rate variable
        self._hooked: set[int] = set()                    # programs whose run hooks write the lr
        self._main: Program | None = None
        self._startup: Program | None = None

    # -- the learning rate -------------------------------------------------------------------
    def get_lr(self) -> float:
        """The current learning rate (a scheduler's current value)."""
        if isinstance(self._learning_rate, LRScheduler):
            return self._learning_rate()
        return self._learning_rate

    def set_lr(self, value: float) -> None:
        """Set a float learning rate; programs already built pick it up at their next run
        (through a run hook: no recompilation)."""
        if isinstance(self._learning_rate, LRScheduler):
            raise RuntimeError("this optimizer's learning rate is an LRScheduler; step the scheduler instead")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"set_lr needs a float, got {value!r}")
        self._learning_rate = float(value)
        for uid, var in self._lr_vars.items():
            self._hook_lr(var)

    def _global_learning_rate(self, program: Program | None = None) -> Variable | None:
        program = program or self._main
        return self._lr_vars.get(program._uid) if program is not None else None

    def _create_global_learning_rate(self) -> Variable:
        main = self._main
        if main._uid in self._lr_vars:
            return self._lr_vars[main._uid]
        name = unique_name.generate("learning_rate")
        var = main.global_block().create_var(name, (), _LR_DTYPE, persistable=True, stop_gradient=True)
        Constant(self.get_lr())(var, self._startup.global_block())
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
        """A persistable ``<param>_<name>_<n>`` in the main program, filled by the startup program."""
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
        return append_backward(loss, params, no_grad_set)

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
            params_grads = [(p, self._regularize(p, g)) for p, g in params_grads]
            return self._create_optimization_pass(params_grads)

    def apply_optimize(self, loss: Variable, startup_program: Program | None, params_grads: ParamsGrads) -> list:
        """Paddle's name for :meth:`apply_gradients` called by :meth:`minimize`."""
        return self.apply_gradients(params_grads, startup_program)

    def minimize(self, loss: Variable, startup_program: Program | None = None, parameter_list=None,
                 no_grad_set=None, *, parameters=None) -> tuple[list, ParamsGrads]:
        """Append the backward pass and the optimizer ops of ``loss`` to its program.

        Returns ``(optimize_ops, params_grads)``. ``startup_program`` (default: the default
        startup program) receives the fill ops of the accumulators and the learning rate.
        """
        if not isinstance(loss, Variable):
            raise TypeError(f"minimize needs the loss Variable, got {loss!r}")
        params = parameters if parameters is not None else parameter_list
        params_grads = self.backward(loss, startup_program, params, no_grad_set)
        ops = self.apply_optimize(loss, startup_program, params_grads)
        return ops, params_grads

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

    def __init__(self, learning_rate: float | LRScheduler = 0.001, parameters=None, weight_decay=None, grad_clip=None,
                 multi_precision: bool = False, name: str | None = None, **kwargs) -> None:
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name, **kwargs)
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

    def __init__(self, learning_rate: float | LRScheduler = 0.001, momentum: float = 0.9, parameters=None,
                 use_nesterov: bool = False, weight_decay=None, grad_clip=None, multi_precision: bool = False,
                 rescale_grad: float = 1.0, use_multi_tensor: bool = False, name: str | None = None,
                 **kwargs) -> None:
        decay = weight_decay if weight_decay is not None else kwargs.pop("regularization", None)
        if isinstance(decay, (int, float)) and not isinstance(decay, bool):
            decay = L2Decay(float(decay))
        fused = decay if isinstance(decay, L2Decay) else None
        super().__init__(learning_rate, parameters, None if fused is not None else decay, grad_clip, name, **kwargs)
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

    def _init_betas(self, beta1, beta2, epsilon) -> None:
        self._beta1 = _float(beta1, "beta1")
        self._beta2 = _float(beta2, "beta2")
        self._epsilon = _float(epsilon, "epsilon")
        if not 0 <= self._beta1 < 1 or not 0 <= self._beta2 < 1:
            raise ValueError(f"beta1 and beta2 must be in [0, 1), got {beta1} and {beta2}")

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator(self._moment1, p)
            self._add_accumulator(self._moment2, p)
            self._add_accumulator(self._beta1_pow, p, fill_value=self._beta1, shape=(1,))
            self._add_accumulator(self._beta2_pow, p, fill_value=self._beta2, shape=(1,))

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

    def __init__(self, learning_rate: float | LRScheduler = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, parameters=None, weight_decay=None, grad_clip=None, lazy_mode: bool = False,
                 multi_precision: bool = False, use_multi_tensor: bool = False, name: str | None = None,
                 **kwargs) -> None:
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name, **kwargs)
        self._init_betas(beta1, beta2, epsilon)
        self._lazy_mode = bool(lazy_mode)

    def _append_optimize_op(self, block, param, grad):
        inputs, outputs = self._adam_slots(param, grad)
        return block.append_op("adam", inputs, outputs, {
            "beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon, "lazy_mode": self._lazy_mode,
            "min_row_size_to_use_multithread": 1000, "multi_precision": False, "use_global_beta_pow": False})


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
        super().__init__(learning_rate, parameters, None, grad_clip, name, **kwargs)
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

    def __init__(self, learning_rate: float | LRScheduler = 0.001, lamb_weight_decay: float = 0.01,
                 beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-6, parameters=None,
                 grad_clip=None, exclude_from_weight_decay_fn: Callable | None = None,
                 multi_precision: bool = False, always_adapt: bool = False, name: str | None = None,
                 **kwargs) -> None:
        super().__init__(learning_rate, parameters, None, grad_clip, name, **kwargs)
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

    def __init__(self, learning_rate: float | LRScheduler = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, parameters=None, weight_decay=None, grad_clip=None,
                 name: str | None = None, **kwargs) -> None:
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name, **kwargs)
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

    def __init__(self, learning_rate: float | LRScheduler, epsilon: float = 1e-6, parameters=None,
                 weight_decay=None, grad_clip=None, name: str | None = None, initial_accumulator_value: float = 0.0,
                 **kwargs) -> None:
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name, **kwargs)
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

    def __init__(self, learning_rate: float | LRScheduler, rho: float = 0.95, epsilon: float = 1e-6,
                 momentum: float = 0.0, centered: bool = False, parameters=None, weight_decay=None,
                 grad_clip=None, name: str | None = None, **kwargs) -> None:
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name, **kwargs)
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


# Paddle 1.x (fluid.optimizer) names.
SGDOptimizer = SGD
MomentumOptimizer = Momentum
AdamOptimizer = Adam
AdagradOptimizer = Adagrad
RMSPropOptimizer = RMSProp
AdamaxOptimizer = Adamax
LambOptimizer = Lamb
