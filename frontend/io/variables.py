"""Fluid 1.x's ``fluid.io`` predicates and accessors of a program's variables: ``is_parameter``,
``is_persistable``, ``is_belong_to_optimizer``, ``get_program_parameter``,
``get_program_persistable_vars``, ``get_parameter_value``, ``get_parameter_value_by_name``.

>>> # [v.name for v in fluid.io.get_program_parameter(main)]      # ['fc_0.b_0', 'fc_0.w_0']
"""

from __future__ import annotations

import numpy as np

from ...ir.program import Program, default_main_program
from ...ir.variable import Variable
from ...lowering.scope import global_scope
from .saved import _is_parameter, _is_saved, _scope_value

__all__ = ["is_parameter", "is_persistable", "is_belong_to_optimizer", "get_program_parameter",
           "get_program_persistable_vars", "get_parameter_value", "get_parameter_value_by_name"]


def is_parameter(var: Variable) -> bool:
    """Whether ``var`` is a parameter (what ``save_params`` saves)."""
    return _is_parameter(var)


def is_persistable(var: Variable) -> bool:
    """Whether ``var`` is persistable and a tensor (not a feed/fetch holder or a reader): what
    ``save_persistables`` saves."""
    return _is_saved(var)


def is_belong_to_optimizer(var: Variable) -> bool:
    """Whether ``var`` is persistable state that is not a parameter (optimizer accumulators,
    learning rates, counters), as Fluid's ``is_belong_to_optimizer`` tells them apart."""
    return _is_saved(var) and not _is_parameter(var)


def get_program_parameter(program: Program) -> list[Variable]:
    """The parameters of ``program``."""
    return [v for v in program.list_vars() if _is_parameter(v)]


def get_program_persistable_vars(program: Program) -> list[Variable]:
    """The persistable variables of ``program`` (see :func:`is_persistable`)."""
    return [v for v in program.list_vars() if _is_saved(v)]


def get_parameter_value(para: Variable, executor=None) -> np.ndarray:
    """The current value of parameter ``para`` in the global scope (``executor`` is Fluid's
    argument; values live in the scope)."""
    if not _is_parameter(para):
        raise TypeError(f"get_parameter_value: {getattr(para, 'name', para)!r} is not a parameter")
    return _scope_value(global_scope(), para.name)[0]


def get_parameter_value_by_name(name: str, executor=None, program: Program | None = None) -> np.ndarray:
    """The current value of the parameter ``name`` of ``program`` (the default main program)."""
    program = default_main_program() if program is None else program
    return get_parameter_value(program.global_block().var(name), executor)
