"""The program as data: programs, blocks, variables, ops, the op registry, shape inference, format.

Pure Python: building, shape-inferring and serializing a program needs no JAX (op definitions
with their JAX rules are registered by ``fluidjax.lowering``).
"""

from . import dtypes, registry, unique_name
from .errors import (FeedError, FluidJaxError, IndexOutOfRangeError, NumericCheckError, OpRuntimeError,
                     OpVersionError, ParameterMismatchError, ProgramFormatError, ShapeError, SymbolicValueError,
                     TensorFormatError, UninitializedVariableError, UnregisteredOpError, UnsafeFormatError,
                     VariableNotFoundError)
from .program import (Block, Operator, Program, default_main_program, default_startup_program,
                      switch_main_program, switch_startup_program)
from .shape import InferShapeContext, VarInfo, infer_shapes
from .variable import Parameter, Variable

__all__ = [
    "Block", "FeedError", "FluidJaxError", "IndexOutOfRangeError", "NumericCheckError",
    "ProgramFormatError", "UnregisteredOpError", "VariableNotFoundError", "InferShapeContext", "OpRuntimeError", "Operator",
    "OpVersionError", "ParameterMismatchError", "TensorFormatError", "UnsafeFormatError",
    "Parameter", "Program", "ShapeError", "SymbolicValueError", "UninitializedVariableError",
    "VarInfo", "Variable", "default_main_program", "default_startup_program", "dtypes",
    "infer_shapes", "registry", "switch_main_program", "switch_startup_program", "unique_name",
]

from .backward import append_backward  # noqa: E402
