"""What every layer function does: name things, create parameters, append ops."""

from __future__ import annotations

import copy
import functools
from typing import Any, Callable, Mapping, TypeVar

from ..ir import dtypes, tracking, unique_name
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
    spelled = with_fluid_spellings(fn)
    layer = functools.wraps(fn)(tracking.transactional(spelled))
    layer.__fluidjax_atomic__ = True
    if hasattr(spelled, "__fluid_renames__"):
        layer.__fluid_renames__ = spelled.__fluid_renames__
        layer.__fluid_ignored__ = spelled.__fluid_ignored__
    return layer  # type: ignore[return-value]


class LayerHelper:
    """Names a layer (``fc_0``), creates its parameters and temporaries, and appends its ops.

    It is also Fluid 1.x's ``fluid.layer_helper.LayerHelper``, which custom layers call as
    ``LayerHelper("my_layer", **locals())``: the keyword arguments are kept (``self.kwargs``) and
    read by ``input()`` / ``multiple_input()`` / ``input_dtype()`` (the ``input`` argument),
    ``param_attr`` / ``bias_attr``, ``append_bias_op`` and ``append_activation`` (``act``), and
    ``create_parameter`` / ``create_variable_for_type_inference`` / ``create_variable`` /
    ``create_global_variable`` / ``set_variable_initializer`` / ``append_op`` take Fluid's arguments.

    >>> helper = LayerHelper("scaled", input=x, act="relu", param_attr=None)      # doctest: +SKIP
    >>> w = helper.create_parameter(helper.param_attr, [1], helper.input_dtype()) # doctest: +SKIP
    """

    def __init__(self, layer_type: str, name: str | None = None, **kwargs) -> None:
        self.layer_type = layer_type
        self.name = name or unique_name.generate(layer_type)
        self.kwargs = dict(kwargs, name=name)

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

    def create_parameter(self, attr: ParamAttr, shape, dtype: str | None = None, is_bias: bool = False,
                         default_initializer: Initializer | None = None, stop_gradient: bool = False,
                         type=None) -> Parameter:  # noqa: A002
        """A parameter in the main program and its init op in the startup program. ``attr`` is a
        ``ParamAttr`` or anything ``ParamAttr.to_attr`` takes (a name, an initializer, None;
        ``False`` gives no parameter: None is returned, as in Fluid). ``stop_gradient`` makes it
        untrainable; ``type`` is Fluid's (a LoD tensor is the only kind)."""
        if not isinstance(attr, ParamAttr):
            attr = ParamAttr.to_attr(attr)
            if attr is None:
                return None
        if stop_gradient and attr.trainable:
            attr = copy.copy(attr)
            attr.trainable = False
        dtype = "float32" if dtype is None else dtypes.normalize(dtype)
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

    # -- Fluid 1.x's LayerHelper API (custom layers written against fluid.layer_helper) ----------
    def create_variable_for_type_inference(self, dtype="float32", stop_gradient: bool = False) -> Variable:
        """A fresh temporary whose shape the op that writes it infers (Fluid's name)."""
        return self.create_tmp(dtypes.normalize(dtype), stop_gradient)

    def create_variable(self, name: str | None = None, shape=(), dtype="float32", lod_level: int = 0,
                        persistable: bool = False, stop_gradient: bool = False, **kwargs) -> Variable:
        """A variable of the current block (Fluid's ``LayerHelper.create_variable``)."""
        kwargs.pop("type", None)
        return self.block.create_var(name or unique_name.generate(f"{self.name}.tmp"), shape, dtype, lod_level,
                                     persistable=persistable, stop_gradient=stop_gradient)

    def create_global_variable(self, persistable: bool = False, *, name: str | None = None, shape=(),
                               dtype="float32", lod_level: int = 0, stop_gradient: bool = False,
                               **kwargs) -> Variable:
        """A variable of the main program's global block (Fluid's ``create_global_variable``)."""
        kwargs.pop("type", None)
        return self.main_program.global_block().create_var(
            name or unique_name.generate(f"{self.name}.tmp"), shape, dtype, lod_level, persistable=persistable,
            stop_gradient=stop_gradient)

    def create_or_get_global_variable(self, name: str, *args, **kwargs) -> tuple[Variable, bool]:
        """``(variable, created)``: the global variable ``name``, made when it does not exist."""
        block = self.main_program.global_block()
        if block.has_var(name):
            return block.var(name), False
        return self.create_global_variable(*args, name=name, **kwargs), True

    def set_variable_initializer(self, var: Variable, initializer: Initializer) -> Variable:
        """Initialise persistable ``var`` in the startup program with ``initializer``."""
        startup = self.startup_program.global_block()
        if not startup.has_var(var.name):
            startup.create_var(var.name, var.shape, var.dtype, var.lod_level, persistable=True)
        initializer(startup.var(var.name), startup)
        return var

    def multiple_input(self, input_param_name: str = "input") -> list:
        """The keyword argument ``input_param_name`` as a list of Variables."""
        value = self.kwargs.get(input_param_name, [])
        return list(value) if isinstance(value, (list, tuple)) else [value]

    def input(self, input_param_name: str = "input") -> Variable:
        """The keyword argument ``input_param_name``: exactly one Variable."""
        values = self.multiple_input(input_param_name)
        if len(values) != 1:
            raise ValueError(f"{self.layer_type}: {input_param_name} must be one Variable, got {len(values)}")
        return values[0]

    def input_dtype(self, input_param_name: str = "input") -> str:
        """The dtype of the inputs ``input_param_name`` (all must agree)."""
        found = {v.dtype for v in self.multiple_input(input_param_name)}
        if len(found) > 1:
            raise ValueError(f"{self.layer_type}: the inputs {input_param_name} mix dtypes {sorted(found)}")
        return found.pop() if found else None

    @property
    def param_attr(self) -> ParamAttr | None:
        """The ``param_attr`` keyword argument as a ``ParamAttr``."""
        return ParamAttr.to_attr(self.kwargs.get("param_attr"))

    @property
    def bias_attr(self) -> ParamAttr | None:
        """The ``bias_attr`` keyword argument as a ``ParamAttr`` (None for ``bias_attr=False``)."""
        return ParamAttr.to_attr(self.kwargs.get("bias_attr"))

    def multiple_param_attr(self, length: int) -> list:
        """``param_attr`` repeated for ``length`` inputs (a list of that length is taken as it is)."""
        attr = self.kwargs.get("param_attr")
        if isinstance(attr, (list, tuple)):
            if len(attr) != length:
                raise ValueError(f"{self.layer_type}: {length} inputs but {len(attr)} param_attr")
            return [ParamAttr.to_attr(a) for a in attr]
        first = ParamAttr.to_attr(attr)
        return [first] + [copy.deepcopy(first) for _ in range(length - 1)]

    def iter_inputs_and_params(self, input_param_name: str = "input"):
        """Pairs ``(input, param_attr)`` over the inputs ``input_param_name``."""
        inputs = self.multiple_input(input_param_name)
        yield from zip(inputs, self.multiple_param_attr(len(inputs)))

    def get_parameter(self, name: str) -> Parameter:
        """The parameter ``name`` of the main program."""
        var = self.main_program.global_block().var(name)
        if not isinstance(var, Parameter):
            raise ValueError(f"{name!r} is not a parameter")
        return var

    def append_bias_op(self, input_var: Variable, dim_start: int = 1, dim_end: int | None = None) -> Variable:
        """``input_var`` plus a bias of shape ``input_var.shape[dim_start:dim_end]`` (``bias_attr``);
        ``input_var`` itself when ``bias_attr`` is False."""
        attr = self.bias_attr
        if attr is None:
            return input_var
        bias = self.create_parameter(attr, list(input_var.shape[dim_start:dim_end]), input_var.dtype, is_bias=True)
        out = self.create_variable_for_type_inference(input_var.dtype)
        self.append_op("elementwise_add", {"X": [input_var], "Y": [bias]}, {"Out": [out]}, {"axis": dim_start})
        return out

    def append_activation(self, input_var: Variable) -> Variable:
        """``input_var`` through the ``act`` keyword argument (an op name, or a dict with ``type``)."""
        act = self.kwargs.get("act")
        if act is None:
            return input_var
        attrs = {}
        if isinstance(act, dict):
            attrs = {k: v for k, v in act.items() if k != "type"}
            act = act["type"]
        if not isinstance(act, str):
            raise TypeError(f"{self.layer_type}: act must be an op name or a dict, got {act!r}")
        return self.simple_op(act, {"X": input_var}, attrs or None)

    def is_instance(self, param_name: str, cls) -> None:
        """A ``TypeError`` unless the keyword argument ``param_name`` is a ``cls``."""
        if not isinstance(self.kwargs.get(param_name), cls):
            raise TypeError(f"{self.layer_type}: {param_name} must be a {cls.__name__}")
