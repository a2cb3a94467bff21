"""Averaged parameters, built as ops: Fluid's ``ExponentialMovingAverage``, ``ModelAverage`` and
``LookaheadOptimizer`` (``fluid.optimizer.*``).

Each adds its update ops to the training program. ``ExponentialMovingAverage`` and
``ModelAverage`` also build two small programs: ``apply_program`` saves every averaged parameter
into a backup variable and writes the average into the parameter; ``restore_program`` copies the
backups back, exactly. ``apply(exe)`` is a context manager around both:

>>> # ema = fluid.optimizer.ExponentialMovingAverage(0.999); ema.update()   # after minimize
>>> # ... train ...
>>> # with ema.apply(exe):
>>> #     exe.run(test_program, feed=..., fetch_list=...)                # averaged weights
>>> # (the trained weights are back here)

The backups are persistable variables of the apply/restore programs only (Fluid kept them as
plain variables of the training program, which fluidjax's scope would not keep between runs), so
checkpoints of the training program do not include them. Parameters created with
``ParamAttr(do_model_average=False)`` and parameters that are not trainable (batch norm's moving
statistics, which Fluid 1.x marks ``do_model_average=False``) are not averaged.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from ..ir import unique_name
from ..ir.program import Program, default_main_program, default_startup_program
from ..ir.variable import Parameter, Variable
from .clip import optimize_guard
from .control_flow_layers import Switch, cond
from .framework import program_guard
from .initializer import Constant
from .lr_decay_layers import autoincreased_step_counter, create_global_var, lr_schedule_guard
from .math_layers import elementwise_add, elementwise_div, elementwise_mod, elementwise_mul, elementwise_pow, \
    elementwise_sub, equal, greater_than, less_than, scale, sums
from .tensor_layers import assign, cast, fill_constant

__all__ = ["ExponentialMovingAverage", "ModelAverage", "LookaheadOptimizer"]

EMA_STEP_COUNTER = "@EMA_STEP_COUNTER@"


def _averaged_parameters(program: Program) -> list[Parameter]:
    return [p for p in program.global_block().all_parameters()
            if getattr(p, "do_model_average", True) is not False and getattr(p, "trainable", True)]


def _declare(block, var: Variable, name: str | None = None) -> Variable:
    """``var`` (or a variable like it named ``name``) in another program's block, persistable."""
    return block.create_var(name or var.name, var.shape, var.dtype, persistable=True, stop_gradient=True)


class _SwapPrograms:
    """``apply(executor)`` / ``restore(executor)`` around an apply and a restore program."""

    apply_program: Program
    restore_program: Program

    @contextlib.contextmanager
    def apply(self, executor, need_restore: bool = True) -> Iterator[None]:
        """Write the averages into the parameters; inside the ``with`` block they are in use. On
        leaving it (also on an error) the trained values come back, unless ``need_restore`` is
        False (then call :meth:`restore` yourself)."""
        executor.run(self.apply_program)
        try:
            yield
        finally:
            if need_restore:
                self.restore(executor)

    def restore(self, executor) -> None:
        """Put back the parameter values :meth:`apply` saved."""
        executor.run(self.restore_program)


class ExponentialMovingAverage(_SwapPrograms):
    """The exponential moving average of the parameters, ``ema = decay * ema + (1 - decay) * w``
    after every training step, applied with bias correction ``ema / (1 - decay ** t)``.

    ``thres_steps`` (a step Variable, e.g. ``fluid.layers.autoincreased_step_counter()``) makes the
    decay ``min(decay, (1 + t) / (10 + t))``, small at first. Build it after ``minimize`` inside the
    training program's guard and call :meth:`update` there. ``name`` prefixes the average
    variables (``<name><param>_ema_0``).

    As Paddle 2.x does, applying does not change the averages themselves (Fluid 1.x wrote the
    bias-corrected value back into them on every apply); values match
    ``paddle.static.ExponentialMovingAverage``.
    """

    def __init__(self, decay: float = 0.999, thres_steps: Variable | None = None, name: str | None = None) -> None:
        self._decay = float(decay)
        self._thres_steps = thres_steps
        self._name = name or ""
        main = default_main_program()
        self._main, self._startup = main, default_startup_program()
        self._decay_var = self._scheduled_decay()
        self._params = _averaged_parameters(main)
        self._ema_vars = {}
        for param in self._params:
            self._ema_vars[param.name] = create_global_var(
                param.shape, 0.0, param.dtype, persistable=True,
                name=unique_name.generate(f"{self._name}{param.name}_ema"))
        self._backups = {p.name: unique_name.generate(f"{self._name}{p.name}.ema_tmp") for p in self._params}
        self.apply_program = self._build_apply()
        self.restore_program = self._build_restore()

    def _scheduled_decay(self) -> Variable:
        with lr_schedule_guard():
            decay = create_global_var([1], self._decay, "float32", persistable=True, name="scheduled_ema_decay_rate")
            if self._thres_steps is not None:
                steps = self._thres_steps
                if steps.dtype != "float32":
                    steps = cast(steps, "float32")
                ramp = elementwise_div(scale(steps, bias=1.0), scale(steps, bias=10.0))
                chosen = cond(less_than(ramp, fill_constant([1], "float32", self._decay)),
                              lambda: ramp, lambda: fill_constant([1], "float32", self._decay))
                assign(chosen, decay)
        return decay

    def _build_apply(self) -> Program:
        program = Program()
        block = program.global_block()
        with program_guard(program, self._startup):
            step = cast(create_global_var([1], 0, "int64", persistable=True, name=EMA_STEP_COUNTER), "float32")
            decay_pow = elementwise_pow(_declare(block, self._decay_var), step)
            for param in self._params:
                weights = _declare(block, param)
                ema = _declare(block, self._ema_vars[param.name])
                assign(weights, _declare(block, param, self._backups[param.name]))
                corrected = cond(greater_than(step, fill_constant([1], "float32", 0.0)),
                                 lambda: elementwise_div(ema, scale(decay_pow, scale=-1.0, bias=1.0)),
                                 lambda: ema)
                assign(corrected, weights)
        return program

    def _build_restore(self) -> Program:
        program = Program()
        block = program.global_block()
        for param in self._params:
            block.append_op("assign", {"X": _declare(block, param, self._backups[param.name])},
                            {"Out": _declare(block, param)})
        return program

    def update(self) -> None:
        """Append the average update of every parameter to the training program (call once,
        after ``minimize``)."""
        block = self._main.global_block()
        with program_guard(self._main, self._startup):
            autoincreased_step_counter(EMA_STEP_COUNTER)
            with optimize_guard(block):
                keep = scale(self._decay_var, scale=-1.0, bias=1.0)
                for param in self._params:
                    ema = self._ema_vars[param.name]
                    new = elementwise_add(elementwise_mul(ema, self._decay_var), elementwise_mul(param, keep))
                    assign(new, ema)


class ModelAverage(_SwapPrograms):
    """The average of the parameters over a sliding window of recent steps (Fluid's
    ``ModelAverage``): an ``average_accumulates`` op per parameter, added to the training program
    when this is built (after ``minimize``), keeps the window's sums; :meth:`apply` writes
    ``(sum_1 + sum_2 + sum_3) / (num_accumulates + old_num_accumulates)`` into the parameters.

    The window restarts once it holds ``min_average_window`` steps and
    ``min(max_average_window, num_updates * average_window_rate)``. ``regularization`` is
    accepted for Fluid's API (it has no effect there either); ``name`` prefixes the accumulators.
    """

    def __init__(self, average_window_rate: float, min_average_window: int = 10000,
                 max_average_window: int = 10000, regularization=None, name: str | None = None) -> None:
        self.average_window = float(average_window_rate)
        self.min_average_window = int(min_average_window)
        self.max_average_window = int(max_average_window)
        self._name = name
        main, startup = default_main_program(), default_startup_program()
        self._params = _averaged_parameters(main)
        self._accumulators: dict[str, dict[str, Variable]] = {}
        block = main.global_block()
        for param in self._params:
            acc = self._accumulators[param.name] = {}
            for key in ("sum_1", "sum_2", "sum_3"):
                acc[key] = self._accumulator(main, startup, param, key, param.shape, param.dtype)
            for key in ("num_accumulates", "old_num_accumulates", "num_updates"):
                acc[key] = self._accumulator(main, startup, param, key, (1,), "int64")
            with optimize_guard(block):
                block.append_op(
                    "average_accumulates",
                    {"param": param, **{f"in_{k}": v for k, v in acc.items()}},
                    {f"out_{k}": v for k, v in acc.items()},
                    {"average_window": self.average_window, "min_average_window": self.min_average_window,
                     "max_average_window": self.max_average_window})
        self._backups = {p.name: unique_name.generate(f"{p.name}.tmp") for p in self._params}
        self.apply_program = self._build_apply()
        self.restore_program = Program()
        restore = self.restore_program.global_block()
        for param in self._params:
            restore.append_op("assign", {"X": _declare(restore, param, self._backups[param.name])},
                              {"Out": _declare(restore, param)})

    def _accumulator(self, main, startup, param, key, shape, dtype) -> Variable:
        key = f"{self._name}_{key}" if self._name is not None else key
        var = main.global_block().create_var(unique_name.generate(f"{param.name}_{key}"), tuple(shape), dtype,
                                             persistable=True, stop_gradient=True)
        Constant(0.0)(var, startup.global_block())
        return var

    def _build_apply(self) -> Program:
        program = Program()
        block = program.global_block()
        with program_guard(program, Program()):
            for param in self._params:
                acc = {k: _declare(block, v) for k, v in self._accumulators[param.name].items()}
                weights = _declare(block, param)
                assign(weights, _declare(block, param, self._backups[param.name]))
                count = cast(sums([acc["num_accumulates"], acc["old_num_accumulates"]]), param.dtype)
                total = cast(sums([acc["sum_1"], acc["sum_2"], acc["sum_3"]]), param.dtype)
                block.append_op("elementwise_div", {"X": total, "Y": count}, {"Out": weights}, {"axis": -1})
        return program


class LookaheadOptimizer:
    """Lookahead (Fluid's ``LookaheadOptimizer``): ``inner_optimizer`` updates the ("fast")
    parameters every step; every ``k`` steps the slow copies ``<param>@SLOW`` move to
    ``slow + alpha * (fast - slow)`` and the parameters are reset to them.

    ``minimize`` appends the inner optimizer's ops, then a step counter (``lookahead_step``) and a
    ``Switch`` on ``step % k == 0`` (Fluid's ops; they carry op_role Optimize here, so a
    ``clone(for_test=True)`` leaves them out).
    """

    def __init__(self, inner_optimizer, alpha: float = 0.5, k: int = 5) -> None:
        if inner_optimizer is None:
            raise ValueError("LookaheadOptimizer needs an inner optimizer")
        if not 0.0 <= float(alpha) <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise ValueError(f"k must be a positive int, got {k!r}")
        self.inner_optimizer = inner_optimizer
        self.alpha = float(alpha)
        self.k = k
        self.type = "lookahead"

    def minimize(self, loss: Variable, startup_program: Program | None = None):
        """The inner optimizer's ``minimize``, then the lookahead ops; returns what the inner
        ``minimize`` returns."""
        result = self.inner_optimizer.minimize(loss, startup_program=startup_program)
        startup = startup_program or default_startup_program()
        main_block = loss.block
        main = main_block.program
        params = list(main.global_block().all_parameters())
        slow = {}
        start_block = startup.global_block()
        for param in params:
            slow[param.name] = main_block.create_var(f"{param.name}@SLOW", param.shape, param.dtype,
                                                     persistable=True, stop_gradient=True)
            fast_init = start_block.var(param.name)
            slow_init = start_block.create_var(f"{param.name}@SLOW", param.shape, param.dtype, persistable=True)
            start_block.append_op("assign", {"X": fast_init}, {"Out": slow_init})
        with program_guard(main, startup), optimize_guard(main_block):
            k = create_global_var([1], int(self.k), "int32", persistable=True, name="lookahead_k")
            alpha = create_global_var([1], self.alpha, "float32", persistable=True, name="lookahead_alpha")
            step = create_global_var([1], 0, "int32", persistable=True, name="lookahead_step")
            main_block.append_op("increment", {"X": step}, {"Out": step}, {"step": 1.0})
            one = fill_constant([1], "float32", 1.0)
            zero = fill_constant([1], "int32", 0)
            with Switch() as switch:
                with switch.case(equal(elementwise_mod(step, k), zero)):
                    for param in params:
                        mixed = elementwise_add(elementwise_mul(param, alpha),
                                                elementwise_mul(slow[param.name], elementwise_sub(one, alpha)))
                        assign(mixed, slow[param.name])
                        assign(mixed, param)
        return result
