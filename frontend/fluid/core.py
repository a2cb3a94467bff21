"""``fluid.core``: the runtime objects Fluid scripts reach through ``core`` (re-exports only)."""

from ...ir.errors import NotOfferedError  # noqa: F401
from ...lowering.lod_tensor import LoDTensor
from ...lowering.places import CPUPlace, CUDAPinnedPlace, CUDAPlace, is_compiled_with_cuda
from ...lowering.scope import Scope
from ...ir.errors import EOFException
from ...ir.dtypes import VarDesc
from ..fluid_helpers import get_cuda_device_count

__all__ = ["CPUPlace", "CUDAPinnedPlace", "CUDAPlace", "EOFException", "LoDTensor", "Scope", "VarDesc",
           "get_cuda_device_count", "is_compiled_with_cuda"]
