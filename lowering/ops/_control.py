"""Control flow, and what its ops share.

The ops: ``conditional_block`` and ``select_input`` / ``select_output`` (``conditional.py``),
``while`` with ``increment`` and ``is_empty`` (``while_loop.py``), tensor arrays
(``tensor_array.py``); their gradients sit next to them. Here: conditions, the values passed
into and out of sub-blocks, what a forward op keeps for its gradient op, and constants read off
the program.

A control-flow op asks its context for its sub-block (``ctx.sub_block()``): a pure function of
the values it reads (see ``lowering/lower.py``, ``SubBlock``). ``conditional_block`` becomes
``lax.cond``, ``while`` becomes ``lax.while_loop``. Their gradient ops do not run Paddle's grad
sub-blocks: they re-lower the *forward* sub-block and take ``jax.vjp`` of the whole forward op
(``while_grad`` through a bounded ``lax.scan`` when the loop carries ``max_iterations``, else by
recomputation). The reasoning and the costs are in ``docs/control_flow.md``.

The ``Scope`` / ``StepScopes`` output of the forward op (Paddle's scopes, kept for its backward)
holds here what the gradient op needs from the forward run: the op's input values as they were
before it ran (``while`` overwrites its loop variables in place) and its random key.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir.errors import OpRuntimeError
from ...ir.program import EMPTY_VAR_NAME
from ...ir.shape import InferShapeContext


_tree_map = jax.tree_util.tree_map


def _keep_declared(ctx: InferShapeContext) -> None:
    """The outputs keep the shapes the sub-block's own ops gave them when they were appended."""


def _where(op) -> str:
    return f"op {op.type!r} at {op.location}"


def _truth(value, op, what: str):
    """A one-element condition as a bool scalar."""
    v = jnp.asarray(value)
    if v.size != 1:
        raise OpRuntimeError(f"{_where(op)}: {what} must hold exactly one value (shape [1] or []), "
                             f"got shape {tuple(v.shape)}")
    return v.reshape(()).astype(bool)


def _floating(value) -> bool:
    return (value is not None and hasattr(value, "dtype") and hasattr(value, "shape")
            and jnp.issubdtype(value.dtype, jnp.inexact))


def _given(names, values) -> dict[str, Any]:
    return {n: v for n, v in zip(names, values) if n != EMPTY_VAR_NAME and v is not None}


def _strong(value):
    """``value`` without JAX's weak type (branches and loop carries must agree on types exactly)."""
    return _tree_map(lambda v: lax.convert_element_type(v, v.dtype) if hasattr(v, "dtype") else v, value)


def _zeros(struct):
    return _tree_map(lambda s: jnp.zeros(s.shape, s.dtype), struct)


def _same_structure(a, b) -> bool:
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    return ta == tb and all(getattr(x, "shape", None) == getattr(y, "shape", None)
                            and getattr(x, "dtype", None) == getattr(y, "dtype", None) for x, y in zip(la, lb))


def _cotangents(op, ctx, out_names: list[str]) -> list:
    """The ``Out@GRAD`` value of each forward output (None where none is given).

    Paddle's ``while_grad`` lists only the gradients that exist, with ``original_output_grad``
    naming them; otherwise the slot is aligned with ``Out`` by position (or by name).
    """
    grad_names = op.input("Out@GRAD")
    grad_values = ctx.inputs("Out@GRAD")
    by_name = {n: v for n, v in zip(grad_names, grad_values) if n != EMPTY_VAR_NAME}
    original = op.attrs.get("original_output_grad")
    if original and len(original) == len(grad_names):
        by_original = {o: v for o, v in zip(original, grad_values)}
        return [by_original.get(n + "@GRAD") for n in out_names]
    if len(grad_names) == len(out_names):
        return [None if g == EMPTY_VAR_NAME else v for g, v in zip(grad_names, grad_values)]
    return [by_name.get(n + "@GRAD") for n in out_names]


def _scope(given: dict, key) -> dict:
    """What a forward control-flow op keeps for its gradient op (its Scope / StepScopes output)."""
    return {"inputs": dict(given), "key": key}


def _restore(ctx, given: dict, slot: str):
    """The forward op's inputs as they were before it ran, and its key, from its saved scope."""
    scope = ctx.input(slot)
    if isinstance(scope, dict):
        return {**given, **scope.get("inputs", {})}, scope.get("key")
    return given, None


# -- constants read off the program ----------------------------------------------------------------
def _last_writer(ops, name: str):
    found = None
    for o in ops:
        if name in o.output_arg_names:
            found = o
    return found


def _constant(block, fwd_op, name: str):
    """The value of a one-element ``fill_constant`` that last writes ``name`` before ``fwd_op``."""
    ops = block.ops[:block.ops.index(fwd_op)] if fwd_op in block.ops else []
    writer = _last_writer(ops, name)
    if writer is None or writer.type != "fill_constant" or writer.input_arg_names:
        return None
    if int(np.prod(writer.attrs.get("shape") or [1])) != 1:
        return None
    text = writer.attrs.get("str_value") or ""
    try:
        value = float(text) if text else float(writer.attrs.get("value", 0.0))
    except ValueError:
        return None
    return value if value == int(value) else None
