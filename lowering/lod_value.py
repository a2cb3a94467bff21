"""LoD values inside ``jax.jit``: rows padded to a bucket, plus the offsets of every level.

A variable with ``lod_level > 0`` is, inside a compiled step, a :class:`LoDValue` (a pytree):

- ``data``: the rows, padded with zeros to a *bucket* — the next power of two of the real row
  count (finer under ``FLAGS_lod_row_buckets``: :func:`row_bucket`) — so an epoch of batches
  with random lengths compiles at most ⌈log2(longest)⌉ + 1 times (that many times the flag);
- ``offsets``: one int32 array per level, Paddle's offsets. Inner levels are padded to a bucket,
  by repeating their last offset: the padding is empty sequences at the end. The outermost level
  is padded the same way under ``FLAGS_bucket_sequences`` (on by default), its real count carried
  beside it (:func:`sequence_count`); a step with an op that would not honour it keeps the real
  length (``feeds.bucket_sequence_rows``).

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

from . import flags


def bucket(n: int) -> int:
    """The padded size for ``n`` real entries: the next power of two (1 for 0 or 1)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


# Row counts up to this stay at a power of two whatever ``FLAGS_lod_row_buckets`` says: below it a
# finer bucket saves less per step than an extra compilation costs (docs/lod.md, "Finer row buckets").
FINE_ROWS_FROM = 1024


def row_bucket(n: int, per_octave: int | None = None) -> int:
    """The padded row count of a fed LoD value of ``n`` real rows (docs/lod.md, "Finer row buckets").

    ``per_octave`` (default ``FLAGS_lod_row_buckets``) buckets split each octave
    (``bucket(n)/2``, ``bucket(n)``] evenly: the rows are rounded up to the next of
    ``bucket(n)/2 · (1 + j/per_octave)``, j = 1..per_octave (for a power of two ``per_octave``, a
    multiple of ``bucket(n) / (2 * per_octave)``). 1 (the default) is the power of two
    of :func:`bucket`; 8 pads 6,720 rows to 7,168 instead of 8,192. At most ``per_octave`` row
    counts per octave, so an epoch compiles at most ``per_octave`` times as often as with powers of
    two. ``n`` up to :data:`FINE_ROWS_FROM` always gets :func:`bucket`."""
    p = bucket(n)
    if per_octave is None:
        per_octave = flags.lod_row_buckets
    if per_octave <= 1 or n <= FINE_ROWS_FROM:
        return p
    half = p // 2
    j = -(-(int(n) - half) * per_octave // half)          # the j-th of per_octave steps above half
    return half + -(-j * half // per_octave)


class Offsets(tuple):
    """A fed value's offsets with ``longest``: per level, a bucket of its longest sequence (in
    entries of the next level; rows for the last), known on the host. Part of the step's
    signature, so a compiled step may size what runs along a sequence (a DynamicRNN's arrays, its
    loop's room) by it rather than by the padded row count. Only feeds carry it: the step turns
    it into a side table (:func:`bounds_from_feeds`) and runs on plain offsets."""

    longest: tuple[int, ...]
    count: object  # the real number of top-level sequences (an int32 scalar) when the outermost
    #               level is padded to a bucket (FLAGS_bucket_sequences), else None

    def __new__(cls, items, longest: tuple[int, ...], count=None):
        self = super().__new__(cls, items)
        self.longest = tuple(longest)
        self.count = count
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
            if offsets.count is not None:
                return (self.data, *offsets, offsets.count), (len(offsets), offsets.longest, True)
            return (self.data, *offsets), (len(offsets), offsets.longest, False)
        return (self.data, *offsets), len(offsets)

    @classmethod
    def tree_unflatten(cls, aux, children):
        if aux.__class__ is tuple:
            levels, longest, counted = aux
            return cls(children[0], Offsets(children[1:1 + levels], longest,
                                            children[1 + levels] if counted else None))
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


def from_host(data: np.ndarray, lod: Sequence[Sequence[int]], bucket_sequences: bool = False) -> LoDValue:
    """A padded :class:`LoDValue` of NumPy arrays from Paddle's (data, offsets).

    With ``bucket_sequences`` the outermost level is padded too, to a bucket of its sequence
    count, by repeating its last offset (empty padding sequences at the end); the real count
    travels with the offsets (``Offsets.count``) and, inside the step, in a side table
    (:func:`sequence_count`)."""
    rows = data.shape[0]
    padded_rows = row_bucket(rows)
    if padded_rows != rows:
        pad = np.zeros((padded_rows - rows,) + data.shape[1:], data.dtype)
        data = np.concatenate([data, pad])
    offsets = []
    for level, level_offsets in enumerate(lod):
        arr = np.asarray(level_offsets, np.int32)
        if level > 0 or bucket_sequences:     # pad with empty sequences at the end
            count = len(arr) - 1
            extra = bucket(count) - count
            if extra:
                arr = np.concatenate([arr, np.full(extra, arr[-1], np.int32)])
        offsets.append(arr)
    longest = []
    for level_offsets in lod:
        arr = np.asarray(level_offsets, np.int64)
        longest.append(bucket(int((arr[1:] - arr[:-1]).max())) if len(arr) > 1 else 1)
    count = np.int32(len(lod[0]) - 1) if bucket_sequences and len(lod) else None
    return LoDValue(data, Offsets(offsets, longest, count))


# -- the longest sequences of the fed values, while a step is traced ------------------------------------
_bounds = threading.local()


@contextlib.contextmanager
def bounds_from_feeds(env: dict):
    """While a step is traced: the fed LoD values of ``env`` on plain offsets, their ``longest``
    kept in a side table by the identity of each level's offsets array, which every op that keeps
    its input's LoD passes on as it is (:func:`longest_of`). A value whose offsets an op rebuilt,
    or one inside a loop body (new tracers), has no entry: its bound is its padded size."""
    table, counts = {}, {}
    for name, value in env.items():
        if value.__class__ is LoDValue and value.offsets.__class__ is Offsets:
            for arr, n in zip(value.offsets, value.offsets.longest):
                table[id(arr)] = (arr, n)
            if value.offsets.count is not None:
                counts[id(value.offsets[0])] = (value.offsets[0], value.offsets.count)
            env[name] = LoDValue(value.data, tuple(value.offsets))
    before = getattr(_bounds, "table", None), getattr(_bounds, "counts", None)
    _bounds.table, _bounds.counts = table, counts
    try:
        yield env
    finally:
        _bounds.table, _bounds.counts = before


def sequence_count(offsets_level):
    """The real number of sequences of an outermost offsets array: a traced int32 scalar when the
    level came from a feed padded with empty sequences (``FLAGS_bucket_sequences``), passed on as
    it is by the ops that keep their input's LoD; else None (every sequence of the level is real)."""
    counts = getattr(_bounds, "counts", None)
    hit = counts.get(id(offsets_level)) if counts else None
    return hit[1] if hit is not None and hit[0] is offsets_level else None


def note_sequence_count(offsets_level, count) -> None:
    """Record ``count`` as the real number of sequences of ``offsets_level`` (an op that builds new
    outermost offsets with as many sequences as its input's: :func:`sequence_count`)."""
    counts = getattr(_bounds, "counts", None)
    if counts is not None and count is not None:
        counts[id(offsets_level)] = (offsets_level, count)


def same_sequences(new_level, old_level):
    """``new_level`` (outermost offsets an op built with one sequence per sequence of
    ``old_level``: sequence_erase, sequence_reshape) keeping ``old_level``'s real sequence count
    (:func:`sequence_count`); returns ``new_level``."""
    note_sequence_count(new_level, sequence_count(old_level))
    return new_level


def counted_rows(out, offsets_level):
    """``out`` (one row per sequence of ``offsets_level``) as a counted value of the real sequences
    when the level carries padding sequences (:func:`sequence_count`); else ``out`` as it is."""
    count = sequence_count(offsets_level)
    if count is None or out.__class__ is LoDValue:
        return out
    return LoDValue(out, (jnp.stack([jnp.zeros((), jnp.int32), jnp.asarray(count, jnp.int32)]),))


def mark_fetch(value):
    """A fetched value as the step returns it: a LoD value whose outermost level carries padding
    sequences gets -1 in their offsets, so :func:`to_host` cuts them (their count is data)."""
    if value.__class__ is not LoDValue or not value.offsets:
        return value
    count = sequence_count(value.offsets[0])
    if count is None:
        return value
    top = value.offsets[0]
    top = jnp.where(jnp.arange(top.shape[0]) <= count, top, jnp.asarray(-1, top.dtype))
    return LoDValue(value.data, (top, *value.offsets[1:]))


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
    if count >= 0 and offsets[0][-1] < 0:          # padding sequences marked by mark_fetch
        count = int(np.argmax(offsets[0] < 0)) - 1
    for arr in offsets:
        level = arr[:count + 1].tolist()
        lod.append(level)
        count = level[-1]
    return np.asarray(value.data)[:count], lod
