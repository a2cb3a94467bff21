"""``fluid.transpiler``: the parameter-server transpiler is not offered; fluidjax scales with
XLA's SPMD partitioning instead (``fluidjax.CompiledProgram(...).with_data_parallel()``,
``fluidjax.distributed``). ``memory_optimize`` / ``release_memory`` are the no-ops they are in
Fluid 1.6+; ``DistributeTranspiler`` and Fluid 1.8's other names are importable stand-ins that
raise :class:`~fluidjax.ir.errors.NotOfferedError` when used (``frontend/fluid/paths.py``)."""

from ..memory_optimization import memory_optimize, release_memory  # noqa: F401  (no-ops, as in Fluid 1.6+)

__all__ = ["memory_optimize", "release_memory"]
