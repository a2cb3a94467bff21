"""Fluid 1.x's learning-rate schedules, built as ops inside the program (``fluid.layers.*_decay``).

Each schedule reads Fluid's global step counter ``@LR_DECAY_COUNTER@`` — a persistable int64
``[1]`` variable that the startup program fills with ``begin - 1`` and that an ``increment`` op at
the very top of the main program advances on every run — and computes the rate with ordinary ops
(``cast``, ``scale``, ``elementwise_*``, ``floor``, ``ceil``, ``exp``, ``cos``) or, for
``piecewise_decay``, ``linear_lr_warmup`` and ``polynomial_decay(cycle=True)``, with Fluid's
``Switch`` (``conditional_block`` ops). All of them carry ``op_role`` LRSched (16), as Fluid's
``_lr_schedule_guard`` gives them. The result is a ``[1]`` float Variable: pass it as an
optimizer's ``learning_rate``. Because the schedule is part of the program, a Fluid-saved training
program that has these ops runs here unchanged, and the programs built here run in Paddle.

>>> # lr = exponential_decay(learning_rate=0.1, decay_steps=100, decay_rate=0.5, staircase=True)
>>> # fluid.optimizer.SGDOptimizer(learning_rate=lr).minimize(avg_cost)

The step seen by a run is the number of runs before it (``begin=0``); ``noam_decay`` starts at 1.
The variable names Fluid gives its state are kept (``@LR_DECAY_COUNTER@``, ``learning_rate`` for
``piecewise_decay``, ``learning_rate_warmup``), so Fluid checkpoints load into these programs.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator, Sequence

from ..ir import dtypes
from ..ir.program import Program, default_main_program, default_startup_program
from ..ir.variable import Variable
from .control_flow_layers import Switch
from .initializer import Constant
from .layer_helper import LayerHelper
from .math_layers import ceil, elementwise_div, elementwise_min, elementwise_mul, elementwise_pow, equal, exp, \
    floor, less_than, scale
from .tensor_layers import assign, cast, fill_constant

__all__ = ["create_global_var", "autoincreased_step_counter", "exponential_decay", "natural_exp_decay",
           "inverse_time_decay", "polynomial_decay", "piecewise_decay", "noam_decay", "cosine_decay",
           "linear_lr_warmup"]

STEP_COUNTER = "@STEP_COUNTER@"
LR_DECAY_COUNTER = "@LR_DECAY_COUNTER@"


@contextlib.contextmanager
def lr_schedule_guard(program: Program | None = None, with_optimize: bool = False) -> Iterator[None]:
    """Ops appended to ``program`` (default: the main program) inside get ``op_role`` LRSched
    (Optimize|LRSched with ``with_optimize``), Fluid's ``Program._lr_schedule_guard``."""
    with (program or default_main_program())._lr_schedule_guard(is_with_opt=with_optimize):
        yield


def create_global_var(shape: Sequence[int], value: float, dtype, persistable: bool = False,
                      force_cpu: bool = False, name: str | None = None) -> Variable:
    """A variable of the main program's global block, filled with ``value`` by the startup program
    (Fluid's ``fluid.layers.create_global_var``). ``name`` is used as given (Fluid does not make it
    unique): a second call with the same name returns the same variable. ``force_cpu`` is accepted
    for Fluid's API; JAX places the value.

    The variable is created persistable whatever ``persistable`` says, because fluidjax keeps only
    persistable variables between runs (Paddle's scope keeps every variable the startup program
    made); ``persistable=False`` is recorded on nothing else.
    """
    shape = [int(d) for d in shape]
    if any(d < 0 for d in shape):
        raise ValueError(f"create_global_var needs a fully known shape, got {shape}")
    dtype = dtypes.normalize(dtype)
    block = default_main_program().global_block()
    if name is not None and block.has_var(name):
        return block.var(name)
    var = block.create_var(name, tuple(shape), dtype, persistable=True, stop_gradient=True)
    Constant(value)(var, default_startup_program().global_block())
    return var


def autoincreased_step_counter(counter_name: str | None = None, begin: int = 1, step: int = 1) -> Variable:
    """A persistable int64 ``[1]`` counter (default name ``@STEP_COUNTER@``) that an ``increment``
    op at the top of the main program advances by ``step`` on every run. As in Fluid, the startup
    program fills it with ``begin - 1``, so the first run sees ``begin - 1 + step`` (``begin`` for
    the default step 1). Asking again for an existing counter returns it (and adds no second
    increment)."""
    name = counter_name or STEP_COUNTER
    main = default_main_program().global_block()
    if main.has_var(name):
        return main.var(name)
    counter = main.create_var(name, (1,), "int64", persistable=True, stop_gradient=True)
    Constant(int(begin) - 1)(counter, default_startup_program().global_block())
    main.insert_op(0, "increment", {"X": counter}, {"Out": counter}, {"step": float(step)})
    return counter


def _decay_step_counter(begin: int = 0) -> Variable:
    """The learning-rate step as float32: the run count since the start, plus ``begin``."""
    return cast(autoincreased_step_counter(LR_DECAY_COUNTER, begin=begin, step=1), "float32")


def _constant(value: float, dtype: str = "float32") -> Variable:
    return fill_constant([1], dtype, value)


def _times(learning_rate: float | Variable, x: Variable) -> Variable:
    """``learning_rate * x`` as Fluid's operators build it: a ``scale`` for a number, an
    ``elementwise_mul`` for a Variable."""
    if isinstance(learning_rate, Variable):
        return elementwise_mul(learning_rate, x)
    return scale(x, scale=float(learning_rate))


def _check_rate(learning_rate, layer: str) -> None:
    if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float, Variable)):
        raise TypeError(f"{layer}: learning_rate must be a float or a Variable, got {learning_rate!r}")


def _check_steps(value, what: str, layer: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{layer}: {what} must be a positive number, got {value!r}")


def _step_ratio(decay_steps, staircase: bool) -> Variable:
    """``step / decay_steps``, floored when ``staircase``."""
    ratio = scale(_decay_step_counter(), scale=1.0 / decay_steps)
    return floor(ratio) if staircase else ratio


def exponential_decay(learning_rate: float | Variable, decay_steps: int, decay_rate: float,
                      staircase: bool = False) -> Variable:
    """``learning_rate * decay_rate ** (step / decay_steps)`` (the exponent floored when
    ``staircase``)."""
    _check_rate(learning_rate, "exponential_decay")
    _check_steps(decay_steps, "decay_steps", "exponential_decay")
    with lr_schedule_guard():
        ratio = _step_ratio(decay_steps, staircase)
        return _times(learning_rate, elementwise_pow(_constant(decay_rate), ratio))


def natural_exp_decay(learning_rate: float | Variable, decay_steps: int, decay_rate: float,
                      staircase: bool = False) -> Variable:
    """``learning_rate * exp(-decay_rate * step / decay_steps)`` (the ratio floored when
    ``staircase``)."""
    _check_rate(learning_rate, "natural_exp_decay")
    _check_steps(decay_steps, "decay_steps", "natural_exp_decay")
    with lr_schedule_guard():
        ratio = _step_ratio(decay_steps, staircase)
        return _times(learning_rate, exp(scale(ratio, scale=-1.0 * decay_rate)))


def inverse_time_decay(learning_rate: float | Variable, decay_steps: int, decay_rate: float,
                       staircase: bool = False) -> Variable:
    """``learning_rate / (1 + decay_rate * step / decay_steps)`` (the ratio floored when
    ``staircase``)."""
    _check_rate(learning_rate, "inverse_time_decay")
    _check_steps(decay_steps, "decay_steps", "inverse_time_decay")
    with lr_schedule_guard():
        ratio = _step_ratio(decay_steps, staircase)
        denominator = scale(scale(ratio, scale=float(decay_rate)), scale=1.0, bias=1.0)
        numerator = learning_rate if isinstance(learning_rate, Variable) else _constant(learning_rate)
        return elementwise_div(numerator, denominator)


def polynomial_decay(learning_rate: float | Variable, decay_steps: int, end_learning_rate: float = 0.0001,
                     power: float = 1.0, cycle: bool = False) -> Variable:
    """``(learning_rate - end_learning_rate) * (1 - step / decay_steps) ** power +
    end_learning_rate``, the step held at ``decay_steps`` afterwards; with ``cycle``, the decay
    restarts: ``decay_steps`` becomes the next multiple of itself above the step (1x at step 0)."""
    _check_rate(learning_rate, "polynomial_decay")
    _check_steps(decay_steps, "decay_steps", "polynomial_decay")
    with lr_schedule_guard():
        step = _decay_step_counter()
        if cycle:
            periods = ceil(scale(step, scale=1.0 / decay_steps))
            zero, one = _constant(0.0), _constant(1.0)
            with Switch() as switch:
                with switch.case(equal(step, zero)):
                    assign(one, periods)
            fraction = elementwise_div(step, scale(periods, scale=float(decay_steps)))
        else:
            step = elementwise_min(step, _constant(float(decay_steps)))
            fraction = scale(step, scale=1.0 / decay_steps)
        remaining = elementwise_pow(scale(fraction, scale=-1.0, bias=1.0), _constant(float(power)))
        if isinstance(learning_rate, Variable):
            span = scale(learning_rate, scale=1.0, bias=-float(end_learning_rate))
            return scale(elementwise_mul(span, remaining), scale=1.0, bias=float(end_learning_rate))
        return scale(remaining, scale=float(learning_rate) - float(end_learning_rate), bias=float(end_learning_rate))


def piecewise_decay(boundaries: Sequence[int], values: Sequence[float]) -> Variable:
    """``values[i]`` while the step is below ``boundaries[i]``, ``values[-1]`` after the last
    boundary. The rate lives in the persistable ``learning_rate`` variable (Fluid's name), written
    by a ``Switch`` on every run."""
    if len(values) - len(boundaries) != 1:
        raise ValueError(f"piecewise_decay needs len(values) == len(boundaries) + 1, got {len(values)} values "
                         f"for {len(boundaries)} boundaries")
    with lr_schedule_guard():
        step = _decay_step_counter()
        lr = create_global_var([1], 0.0, "float32", persistable=True, name="learning_rate")
        with Switch() as switch:
            for boundary, value in zip(boundaries, values):
                with switch.case(less_than(step, _constant(float(boundary)))):
                    fill_constant([1], "float32", float(value), out=lr)
            with switch.default():
                fill_constant([1], "float32", float(values[-1]), out=lr)
        return lr


def noam_decay(d_model: float, warmup_steps: float, learning_rate: float | Variable = 1.0) -> Variable:
    """The Transformer's schedule: ``learning_rate * d_model ** -0.5 * min(step ** -0.5,
    warmup_steps ** -1.5 * step)``, the step starting at 1."""
    _check_rate(learning_rate, "noam_decay")
    with lr_schedule_guard():
        step = _decay_step_counter(begin=1)
        a = elementwise_pow(step, _constant(-0.5))
        b = scale(step, scale=float(warmup_steps) ** -1.5)
        smaller = elementwise_min(a, b)
        if isinstance(learning_rate, Variable):
            return elementwise_mul(scale(learning_rate, scale=float(d_model) ** -0.5), smaller)
        return scale(smaller, scale=float(learning_rate) * float(d_model) ** -0.5)


def cosine_decay(learning_rate: float | Variable, step_each_epoch: int, epochs: int) -> Variable:
    """``learning_rate * 0.5 * (cos(epoch * pi / epochs) + 1)`` with ``epoch = floor(step /
    step_each_epoch)``."""
    _check_rate(learning_rate, "cosine_decay")
    _check_steps(step_each_epoch, "step_each_epoch", "cosine_decay")
    _check_steps(epochs, "epochs", "cosine_decay")
    with lr_schedule_guard():
        epoch = floor(scale(_decay_step_counter(), scale=1.0 / step_each_epoch))
        angle = scale(scale(epoch, scale=math.pi), scale=1.0 / epochs)
        helper = LayerHelper("cos")
        wave = scale(helper.simple_op("cos", {"X": angle}), scale=1.0, bias=1.0)
        if isinstance(learning_rate, Variable):
            return elementwise_mul(scale(learning_rate, scale=0.5), wave)
        return scale(wave, scale=float(learning_rate) * 0.5)


def linear_lr_warmup(learning_rate: float | Variable, warmup_steps: int, start_lr: float,
                     end_lr: float) -> Variable:
    """``start_lr + (end_lr - start_lr) * step / warmup_steps`` while the step is below
    ``warmup_steps``, then ``learning_rate`` (a number or a schedule's Variable). The rate lives in
    the persistable ``learning_rate_warmup`` variable (Fluid's name), written by a ``Switch``."""
    _check_rate(learning_rate, "linear_lr_warmup")
    _check_steps(warmup_steps, "warmup_steps", "linear_lr_warmup")
    dtype = learning_rate.dtype if isinstance(learning_rate, Variable) else "float32"
    slope = float(end_lr) - float(start_lr)
    with lr_schedule_guard():
        lr = create_global_var([1], 0.0, dtype, persistable=True, name="learning_rate_warmup")
        step = _decay_step_counter()
        with Switch() as switch:
            with switch.case(less_than(step, _constant(float(warmup_steps)))):
                ramp = scale(scale(scale(step, scale=1.0 / float(warmup_steps)), scale=slope), scale=1.0,
                             bias=float(start_lr))
                assign(ramp, lr)
            with switch.default():
                after = learning_rate if isinstance(learning_rate, Variable) else _constant(learning_rate, dtype)
                assign(after, lr)
        return lr
