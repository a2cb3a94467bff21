"""Recomputed segments: the forward ops ``RecomputeOptimizer`` copies into the backward pass.

A copy carries the attribute ``recompute_segment`` (see :mod:`fluidjax.frontend.recompute`); the
copies of one segment stand together, just before the grad ops that read what they compute.
Lowered as plain ops inside one ``jax.jit``, XLA would merge each copy with the forward op it
repeats (common-subexpression elimination) and keep the forward's activations alive for the
backward: nothing saved. ``lax.optimization_barrier`` (what ``jax.checkpoint`` relies on) does not
prevent that on every backend: XLA's CPU pipeline expands the barriers before its later CSE
passes (measured: ``jax.checkpoint`` saves 4 of 196 MiB of a 24-layer MLP's step on CPU).

So :func:`run_group` runs the group inside a two-way ``lax.cond`` whose branches are the same
recomputation: XLA's CSE works within one computation, so a branch is never merged with the
forward, and a conditional holding matmuls is never turned into a select. The predicate is read
from a value the op before the group computed (a gradient the backward has just reached), so
the recomputation cannot be scheduled before that point; whichever way it goes, the result is
the same. The cost: the segment's HLO twice in the executable, and one small conditional per
segment per step.

A random op in a segment and its copy carry the same ``recompute_key``; :func:`key_positions`
tells the lowering which forward position's key each copy draws with, so the recomputation draws
the forward's numbers and the gradients are those of the forward pass that ran.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, MutableMapping, Sequence

import jax
import jax.numpy as jnp

from ..ir.names import RECOMPUTE_KEY_ATTR, RECOMPUTE_SEGMENT_ATTR
from .lod_value import LoDValue


def segment(op) -> int | None:
    """The recomputed segment ``op`` belongs to (None for every other op)."""
    return op.attrs.get(RECOMPUTE_SEGMENT_ATTR)


def group_end(ops: Sequence, start: int) -> int:
    """The index after the last op of the group of copies that starts at ``start``."""
    number, end = segment(ops[start]), start + 1
    while end < len(ops) and segment(ops[end]) == number:
        end += 1
    return end


def key_positions(ops: Sequence, start: int, stop: int) -> dict[int, int]:
    """For the random copies among ``ops[start:stop]`` (one group), the position of the forward op
    each repeats: the op outside any segment carrying the same ``recompute_key``. A copy draws
    with the key of that position, so it reproduces the forward's numbers (every random op, not
    only ``dropout``: noise, ``randint`` indices, ``sampling_id``, crops, sampled losses)."""
    wanted = {ops[i].attrs[RECOMPUTE_KEY_ATTR]: i for i in range(start, stop) if RECOMPUTE_KEY_ATTR in ops[i].attrs}
    if not wanted:
        return {}
    found = {}
    for position, op in enumerate(ops):
        number = op.attrs.get(RECOMPUTE_KEY_ATTR)
        if number in wanted and segment(op) is None:
            found[wanted[number]] = position
    return found


def _device_value(value) -> bool:
    return isinstance(value, jax.Array) or value.__class__ is LoDValue


def _predicate(values: Sequence) -> jax.Array | None:
    """A boolean XLA cannot fold, from the first element of the first non-empty value (True
    unless it is NaN; the branches agree, so only its data dependence matters)."""
    for value in values:
        leaf = value.data if value.__class__ is LoDValue else value
        if getattr(leaf, "size", 0):
            first = jnp.ravel(leaf)[0].astype(jnp.float32)
            return first == first
    return None


def run_group(group: Sequence, env: MutableMapping[str, Any], previous,
              run: Callable[[MutableMapping[str, Any]], None]) -> None:
    """Run ``group`` (the copies of one segment) as described in the module docstring:
    ``run(local)`` runs its ops on the mapping ``local``; what they write lands in ``env``."""
    written: set[str] = set()
    reads: list[str] = []
    for op in group:
        for name in op.input_arg_names:
            if name not in written and name not in reads and name in env and _device_value(env[name]):
                reads.append(name)
        written.update(op.output_arg_names)
    after = [] if previous is None else [env[n] for n in previous.output_arg_names
                                         if n in env and _device_value(env[n])]
    pred = _predicate(after) if after else None
    if pred is None:
        pred = _predicate([env[n] for n in reads])
    if pred is None:                    # nothing to hang it on: plain ops
        run(env)
        return
    names: list[str] = []

    def recompute(values):
        local = collections.ChainMap({}, dict(zip(reads, values)), env)
        run(local)
        names[:] = [n for n in local.maps[0] if _device_value(local.maps[0][n])]
        return [local.maps[0][n] for n in names]

    outs = jax.lax.cond(pred, recompute, recompute, [env[n] for n in reads])
    env.update(zip(names, outs))
