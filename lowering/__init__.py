"""Lowering: op JAX rules, a block → one ``jax.jit`` function, the Executor, the runtime Scope.

fluidjax follows Paddle's dtypes, so JAX's 64-bit mode is switched on here: int64 labels and
float64 programs keep their types (JAX would otherwise silently use 32 bits).
"""

import jax

jax.config.update("jax_enable_x64", True)

from . import compile_cache  # noqa: E402,F401  (the persistent compilation cache, on by default)

from . import ops  # noqa: E402,F401  (registers every op)
from .executor import Executor, compiled_memory  # noqa: E402
from ..ir import summary as _summary  # noqa: E402

_summary.memory_figures = compiled_memory   # program.summary(feed=...) (the IR never compiles)
from .lod_tensor import LoDTensor  # noqa: E402
from .parallel import BuildStrategy, CompiledProgram  # noqa: E402
from .places import CPUPlace, CUDAPlace, Place, TPUPlace  # noqa: E402
from .scope import Scope, ScopeVariable, global_scope, scope_guard  # noqa: E402

__all__ = ["BuildStrategy", "CompiledProgram", "CPUPlace", "CUDAPlace", "Executor", "LoDTensor", "Place", "Scope", "ScopeVariable", "TPUPlace",
           "global_scope", "scope_guard", "compiled_memory"]
