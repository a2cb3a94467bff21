"""LoD values inside ``jax.jit``: rows padded to a bucket, plus the offsets of every level.

A variable with ``lod_level > 0`` is, inside a compiled step, a :class:`LoDValue` (a pytree):

- ``data``: the rows, padded with zeros to a *bucket* — the next power of two of the real row
  count — so an epoch of batches with random lengths compiles at most ⌈log2(longest)⌉ + 1 times;
- ``offsets``: one int32 array per level, Paddle's offsets. The outermost level keeps its real
  length (the number of top-level sequences: the batch size, which is part of the step's
  signature like any batch dimension). Inner levels are padded to a bucket as well, by repeating
  their last offset: the padding is empty sequences at the end.

The real row count is the last offset of the last level. Rows past it belong to no sequence:
sequence ops drop them (their segment ids fall outside), ops that act row by row (``fc``,
activations) compute on them harmlessly, and a fetched LoD value is cut back to its real rows.
Ops that mix rows (reductions over the row dimension) must be LoD-aware; ``mean`` is.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np


def bucket(n: int) -> int:
    """The padded size for ``n`` real entries: the next power of two (1 for 0 or 1)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


class Offsets(tuple):
    """A fed value's offsets with ``longest``: per level, a bucket of its longest sequence (in
    entries of the next level; rows for the last), known on the host. Part of the step's
    signature, so a compiled step may size what runs along a sequence (a DynamicRNN's arrays, its
    loop's room) by it rather than by the padded row count. Only feeds carry it: the step turns
    it into a side table (:func:`bounds_from_feeds`) and runs on plain offsets."""

    longest: tuple[int, ...]

    def __new__(cls, items, longest: tuple[int, ...]):
        self = super().__new__(cls, items)
        self.longest = tuple(longest)
        return self


@jax.tree_util.register_pytree_node_class
class LoDValue:
    """Padded rows and per-level offsets (see the module docstring)."""

    __slots__ = ("data", "offsets")

    def __init__(self, data, offsets: Sequence) -> None:
        self.data = data
        self.offsets = offsets if offsets.__class__ is Offsets else tuple(offsets)

    def tree_flatten(self):
        offsets = self.offsets
        if offsets.__class__ is Offsets:
            return (self.data, *offsets), (len(offsets), offsets.longest)
        return (self.data, *offsets), len(offsets)

    @classmethod
    def tree_unflatten(cls, aux, children):
        if aux.__class__ is tuple:
            levels, longest = aux
            return cls(children[0], Offsets(children[1:1 + levels], longest))
        return cls(children[0], children[1:1 + aux])

    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def lod_level(self) -> int:
        return len(self.offsets)

    def row_count(self):
        """The real number of rows (traced inside jit)."""
        return self.offsets[-1][-1]

    def row_mask(self):
        """A [rows] bool mask of the real rows."""
        return jnp.arange(self.data.shape[0]) < self.row_count()

    def segment_ids(self):
        """For each row, the index of its sequence in the last level (padding rows: past the end)."""
        last = self.offsets[-1]
        return jnp.searchsorted(last[1:], jnp.arange(self.data.shape[0], dtype=last.dtype), side="right")

    def __repr__(self) -> str:
        return f"LoDValue(data={getattr(self.data, 'shape', '?')}, levels={len(self.offsets)})"


def from_host(data: np.ndarray, lod: Sequence[Sequence[int]]) -> LoDValue:
    """A padded :class:`LoDValue` of NumPy arrays from Paddle's (data, offsets)."""
    rows = data.shape[0]
    padded_rows = bucket(rows)
    if padded_rows != rows:
        pad = np.zeros((padded_rows - rows,) + data.shape[1:], data.dtype)
        data = np.concatenate([data, pad])
    offsets = []
    for level, level_offsets in enumerate(lod):
        arr = np.asarray(level_offsets, np.int32)
        if level > 0:                     # inner levels: pad with empty sequences at the end
            count = len(arr) - 1
            extra = bucket(count) - count
            if extra:
                arr = np.concatenate([arr, np.full(extra, arr[-1], np.int32)])
        offsets.append(arr)
    longest = []
    for level_offsets in lod:
        arr = np.asarray(level_offsets, np.int64)
        longest.append(bucket(int((arr[1:] - arr[:-1]).max())) if len(arr) > 1 else 1)
    return LoDValue(data, Offsets(offsets, longest))


# -- the longest sequences of the fed values, while a step is traced ------------------------------------
_bounds = threading.local()


@contextlib.contextmanager
def bounds_from_feeds(env: dict):
    """While a step is traced: the fed LoD values of ``env`` on plain offsets, their ``longest``
    kept in a side table by the identity of each level's offsets array, which every op that keeps
    its input's LoD passes on as it is (:func:`longest_of`). A value whose offsets an op rebuilt,
    or one inside a loop body (new tracers), has no entry: its bound is its padded size."""
    table = {}
    for name, value in env.items():
        if value.__class__ is LoDValue and value.offsets.__class__ is Offsets:
            for arr, n in zip(value.offsets, value.offsets.longest):
                table[id(arr)] = (arr, n)
            env[name] = LoDValue(value.data, tuple(value.offsets))
    before = getattr(_bounds, "table", None)
    _bounds.table = table
    try:
        yield env
    finally:
        _bounds.table = before


def longest_of(offsets_level) -> int | None:
    """The bucketed longest sequence of one level's offsets array, when it came from a feed as it
    is (see :func:`bounds_from_feeds`); else None."""
    table = getattr(_bounds, "table", None)
    hit = table.get(id(offsets_level)) if table else None
    return hit[1] if hit is not None and hit[0] is offsets_level else None


def note_longest(offsets_level, n: int) -> None:
    """Record ``n`` as the bucketed longest sequence of ``offsets_level`` for the rest of the step's
    trace (:func:`longest_of`): for offsets an op built whose longest sequence is bounded by its
    input's (``sequence_expand`` copies whole sequences of X). Nothing outside a step's trace."""
    table = getattr(_bounds, "table", None)
    if table is not None and n is not None:
        table[id(offsets_level)] = (offsets_level, int(n))


@contextlib.contextmanager
def assumed_longest(pairs):
    """While a loop body is traced: ``pairs`` (offsets array, bound) recorded as
    :func:`note_longest` does, removed afterwards. The loop checks each iteration's values against
    the bounds at run time (``while_loop._Loop``), so an op of the body may size its output by them."""
    table = getattr(_bounds, "table", None)
    if table is None or not pairs:
        yield
        return
    added = []
    for arr, n in pairs:
        if id(arr) not in table:
            table[id(arr)] = (arr, int(n))
            added.append(id(arr))
    try:
        yield
    finally:
        for key in added:
            table.pop(key, None)


def to_host(value: LoDValue) -> tuple[np.ndarray, list[list[int]]]:
    """A fetched :class:`LoDValue` cut back to its real rows and sequences: (data, lod)."""
    offsets = [np.asarray(o) for o in value.offsets]
    lod = []
    count = len(offsets[0]) - 1
    for arr in offsets:
        level = arr[:count + 1].tolist()
        lod.append(level)
        count = level[-1]
    return np.asarray(value.data)[:count], lod
