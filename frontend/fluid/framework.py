"""``fluid.framework``: programs, variables and the places of this process (re-exports only)."""

from ...ir.program import Program, default_main_program, default_startup_program
from ...ir.variable import Parameter, Variable
from ...lowering.flags import get_flags, set_flags
from ...lowering.places import cpu_places, cuda_places, is_compiled_with_cuda
from ..framework import in_dygraph_mode, name_scope, program_guard

__all__ = ["Parameter", "Program", "Variable", "cpu_places", "cuda_places", "default_main_program",
           "default_startup_program", "get_flags", "in_dygraph_mode", "is_compiled_with_cuda", "name_scope",
           "program_guard", "set_flags"]
