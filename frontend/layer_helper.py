"""What every layer function does: name things, create parameters, append ops."""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, TypeVar

from ..ir import tracking, unique_name
from ..ir.program import default_main_program, default_startup_program
from ..ir.variable import Parameter, Variable
from .initializer import Constant, Initializer, Xavier
from .layer_args import with_fluid_spellings
from .param_attr import ParamAttr, WeightNormParamAttr
from .weight_norm import create_weight_normalized


_F = TypeVar("_F", bound=Callable)


def atomic_layer(fn: _F) -> _F:
    """Make layer function ``fn`` all-or-nothing: if it raises, every program it touched (the
    main and startup programs: variables, ops, blocks, the current block, even the version) is
    put back exactly as it was, and the error propagates. The unique names it drew stay drawn
    (the next layer gets the next number, as in Paddle).

    It journals the IR's tracked mutations (:mod:`fluidjax.ir.tracking`) instead of copying the
    programs up front, so a call costs a few hundred nanoseconds however big the program is.
    Calls nest: an inner layer call that fails is undone alone (a savepoint), and only the
    outermost call's success discards the journal. Every public function of ``fj.layer`` and
    the Variable operators are wrapped (see the end of ``frontend/layers.py``).

    It also gives the layer Fluid's keyword spellings (:mod:`.layer_args`).
    """
    layer = functools.wraps(fn)(tracking.transactional(with_fluid_spellings(fn)))
    layer.__fluidjax_atomic__ = True
    return layer  # type: ignore[return-value]


class LayerHelper:
    """Names a layer (``fc_0``), creates its parameters and temporaries, and appends its ops."""

    def __init__(self, layer_type: str, name: str | None = None) -> None:
        self.layer_type = layer_type
        self.name = name or unique_name.generate(layer_type)

    @property
    def main_program(self):
        """The program the layer appends its ops to."""
        return default_main_program()

    @property
    def startup_program(self):
        """The program that initialises the layer's parameters."""
        return default_startup_program()

    @property
    def block(self):
        """The main program's current block."""
        return self.main_program.current_block()

    def create_parameter(self, attr: ParamAttr, shape, dtype: str, *, is_bias: bool = False,
                         default_initializer: Initializer | None = None) -> Parameter:
        """A parameter in the main program and its init op in the startup program."""
        suffix = "b" if is_bias else "w"
        name = attr.name or unique_name.generate(f"{self.name}.{suffix}")
        init = attr.initializer or default_initializer or (Constant(0.0) if is_bias else Xavier())
        if isinstance(attr, WeightNormParamAttr):     # w = g * v / ||v||, from parameters g and v
            return create_weight_normalized(self, attr, name, shape, dtype, init)
        param = self.main_program.global_block().create_parameter(
            name, shape, dtype, trainable=attr.trainable, regularizer=attr.regularizer,
            learning_rate=attr.learning_rate, need_clip=attr.need_clip)
        # Fluid 1.x's per-parameter gradient clip and model-averaging flag (read by minimize and
        # by ExponentialMovingAverage / ModelAverage).
        param.gradient_clip_attr = getattr(attr, "gradient_clip", None)
        param.do_model_average = getattr(attr, "do_model_average", True)
        startup = self.startup_program.global_block()
        if not startup.has_var(name):
            init(param, startup)
        return param

    def create_tmp(self, dtype: str = "float32", stop_gradient: bool = False, *, shape=(),
                   lod_level: int = 0) -> Variable:
        """A fresh intermediate ``<layer>.tmp_<n>``; its shape comes from the op that writes it."""
        name = unique_name.generate(f"{self.name}.tmp")
        return self.block.create_var(name, shape, dtype, lod_level, stop_gradient=stop_gradient)

    def append_op(self, type: str, inputs: Mapping[str, Any] | None = None,
                  outputs: Mapping[str, Any] | None = None, attrs: Mapping[str, Any] | None = None):
        """Append an op to the current block (see ``Block.append_op``)."""
        return self.block.append_op(type, inputs, outputs, attrs)

    def simple_op(self, type: str, inputs: Mapping[str, Any], attrs: Mapping[str, Any] | None = None,
                  out_slot: str = "Out", dtype: str | None = None) -> Variable:
        """Append ``type`` writing one new temporary, and return that temporary."""
        first = next(v for v in inputs.values() if v is not None)
        first = first[0] if isinstance(first, (list, tuple)) else first
        out = self.create_tmp(dtype or first.dtype)
        self.append_op(type, inputs, {out_slot: out}, attrs)
        return out
