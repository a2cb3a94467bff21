"""``fluid.transpiler``: not offered. The parameter-server transpiler rewrites programs for
Paddle's RPC runtime; fluidjax scales with XLA's SPMD partitioning instead
(``fluidjax.CompiledProgram(...).with_data_parallel()``, ``fluidjax.distributed``)."""

from ...ir.errors import NotOfferedError
from ..memory_optimization import memory_optimize, release_memory  # noqa: F401  (no-ops, as in Fluid 1.6+)

REASON = ("the parameter-server transpiler is not offered: fluidjax runs data-parallel and sharded "
          "training through XLA (fluid.CompiledProgram(main).with_data_parallel(...), "
          "fluidjax.distributed; docs/scaling.md)")


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotOfferedError(f"fluid.transpiler.{name}: {REASON}")
