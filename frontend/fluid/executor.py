"""``fluid.executor``: the Executor and the global scope (re-exports only)."""

from ...lowering.executor import Executor
from ...lowering.scope import global_scope, scope_guard

__all__ = ["Executor", "global_scope", "scope_guard"]
