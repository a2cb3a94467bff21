"""How a JAX rule reports what it cannot compute: an :class:`OpRuntimeError` naming the op."""

from __future__ import annotations

from ...ir.errors import OpRuntimeError


def _fail(ctx, message: str):
    raise OpRuntimeError(f"op {ctx.opdef.type!r}: {message}")

def _runtime_fail(op_type: str):
    """A ``fail(message)`` for JAX rules: raises :class:`OpRuntimeError` naming the op."""

    def fail(message: str):
        raise OpRuntimeError(f"op {op_type!r}: {message}")

    return fail
