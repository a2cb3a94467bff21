"""``fluid.compiler``: data-parallel programs (re-exports only)."""

from ...lowering.parallel import BuildStrategy, CompiledProgram, ExecutionStrategy

__all__ = ["BuildStrategy", "CompiledProgram", "ExecutionStrategy"]
