"""``fluid.core``: the runtime objects Fluid scripts reach through ``core`` (re-exports only)."""

from ...ir.errors import NotOfferedError  # noqa: F401
from ...lowering.lod_tensor import LoDTensor
from ...lowering.places import CPUPlace, CUDAPinnedPlace, CUDAPlace, is_compiled_with_cuda
from ...lowering.scope import Scope
from ...ir.errors import EOFException
from ...ir.dtypes import VarDesc

__all__ = ["CPUPlace", "CUDAPinnedPlace", "CUDAPlace", "EOFException", "LoDTensor", "Scope", "VarDesc", "is_compiled_with_cuda"]
