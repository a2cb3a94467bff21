"""A recurrence over ragged sequences whose work follows the real tokens (Paddle's sequence2batch).

The sequences of a LoD value are sorted by length, longest first, once per batch (inside the
step: it is data). Step ``t`` of the recurrence then concerns the first ``n_t`` sorted sequences
(those longer than ``t``), and its rows lie contiguously in a *batch layout* of the input, the
rows of step 0 first, then those of step 1, ... (exactly the real rows, in Paddle's batch order).

Shapes are static under ``jax.jit`` although ``n_t`` is data: the recurrence runs in *phases*, one
per static width ``B`` of :func:`batch_levels` (descending from the number of sequences). Phase
``j`` works on the first ``B_j`` sorted sequences and runs while more than ``B_{j+1}`` of them
are still running; where it stops is data (the length of the ``B_{j+1}``-th longest sequence),
a loop with a traced trip count. So each step computes ``B_j`` rows where ``n_t`` are real, with
``B_{j+1} < n_t <= B_j``: the work is the real tokens plus at most one level's gap per step, and
the compiled step does not depend on the lengths (no compilation more than the row buckets).

Per step the rows are read and written with contiguous dynamic slices of the batch layout; the
layout is built with one gather of the input before the loops and read back into LoD row order
with one gather after them. In a forward step, the slab rows past ``n_t`` (finished sequences)
compute values that land on rows of later steps, each of which its own later step overwrites,
or past the real rows, which are masked at the end; no select is needed. The backward walks the
same phases in reverse with the cell's ``jax.vjp`` per step, masks the finished rows (selects,
so nothing they hold can reach a gradient), and computes the recurrent weight's gradient as one
product over all rows after the loops. Residuals: per row the state and the linear part, as
Paddle keeps (O(rows · D), nothing proportional to padding).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ..lod_value import bucket


def batch_levels(count: int) -> tuple[int, ...]:
    """The static active-batch widths for ``count`` sequences, descending from ``count``.

    Up to 8 sequences: every width. Else the multiples of ``g = bucket(count) // 8`` below
    ``count``, then ``g/2, g/4, ..., 1``: for 64 sequences 64, 56, ..., 8, 4, 2, 1 (11 levels). A
    step of phase ``j`` computes at most ``g - 1`` rows more than the sequences still running
    (``1/8`` of the batch), and the number of levels grows like log2(count) + 8: each level is one
    loop in the forward and one in the backward of the compiled step (code, not compilations).
    """
    if count <= 0:
        return ()
    if count <= 8:
        return tuple(range(count, 0, -1))
    g = bucket(count) // 8
    levels = [count] + [m for m in range((count - 1) // g * g, 0, -g)]
    while g > 1:
        g //= 2
        levels.append(g)
    return tuple(dict.fromkeys(levels))


class Schedule(NamedTuple):
    """Where every row of a ragged batch goes in the batch layout (all traced int32 arrays).

    ``order`` [N]: sequence ids, longest first (stable); ``starts`` [T + 1]: position of step
    ``t``'s first row in the batch layout; ``ends`` [levels]: the step where each phase stops;
    ``row_of`` [R]: the input row at each batch position (positions past the real rows: row 0);
    ``pos_of`` [R]: the batch position of each input row; ``prev_of`` [R]: for each batch
    position, the position of the state its step starts from, in the state buffers (whose first
    N rows hold the initial states in sorted order); ``valid`` [R]: real batch positions.
    """

    order: jax.Array
    starts: jax.Array
    ends: jax.Array
    row_of: jax.Array
    pos_of: jax.Array
    prev_of: jax.Array
    valid: jax.Array


def schedule(offsets, rows: int, steps_bound: int, levels: tuple[int, ...], reverse: bool) -> Schedule:
    """The batch layout of the sequences of ``offsets`` ([N + 1]) for ``rows`` padded rows.

    ``steps_bound`` is a static bound on the longest sequence (the fed bucket of it, or the padded
    row count)."""
    count = offsets.shape[0] - 1
    dt = jnp.int32
    offsets = offsets.astype(dt)
    seq_start, seq_end = offsets[:-1], offsets[1:]
    lengths = seq_end - seq_start
    order = jnp.argsort(-lengths, stable=True).astype(dt)
    rank = jnp.zeros((count,), dt).at[order].set(jnp.arange(count, dtype=dt))
    ascending = jnp.sort(lengths)
    t = jnp.arange(steps_bound, dtype=dt)
    running = count - jnp.searchsorted(ascending, t, side="right").astype(dt)          # n_t
    starts = jnp.concatenate([jnp.zeros((1,), dt), jnp.cumsum(running, dtype=dt)])
    sorted_len = lengths[order]
    ends = jnp.stack([sorted_len[b] for b in levels[1:]] + [sorted_len[0]]).astype(dt)

    p = jnp.arange(rows, dtype=dt)
    total = offsets[-1]
    valid = p < total
    step = jnp.clip(jnp.searchsorted(starts[1:], p, side="right").astype(dt), 0, steps_bound - 1)
    slot = jnp.clip(p - starts[step], 0, count - 1)
    seq = order[slot]
    row = seq_end[seq] - 1 - step if reverse else seq_start[seq] + step
    row_of = jnp.where(valid, jnp.clip(row, 0, rows - 1), 0)
    prev_of = jnp.where(step == 0, slot, count + starts[jnp.maximum(step - 1, 0)] + slot)
    prev_of = jnp.where(valid, prev_of, 0)

    r = p
    seg = jnp.clip(jnp.searchsorted(seq_end, r, side="right").astype(dt), 0, count - 1)
    r_step = seq_end[seg] - 1 - r if reverse else r - seq_start[seg]
    pos_of = jnp.where(valid, starts[jnp.clip(r_step, 0, steps_bound - 1)] + rank[seg], 0)
    return Schedule(order, starts, ends, row_of, pos_of, prev_of, valid)


def _pad_rows(a, extra: int):
    return jnp.concatenate([a, jnp.zeros((extra,) + a.shape[1:], a.dtype)]) if extra else a


def _slab(buf, start, width: int):
    return lax.dynamic_slice_in_dim(buf, start, width, axis=0)


def _put(buf, value, start):
    return lax.dynamic_update_slice_in_dim(buf, value, start, axis=0)


def _phases(levels, ends):
    """(level index, width, first step, stop step) of every phase (steps traced)."""
    out = []
    for j, width in enumerate(levels):
        first = ends[j - 1] if j else jnp.zeros((), ends.dtype)
        out.append((j, width, first, jnp.maximum(ends[j], first)))
    return out


def _forward(cell, x_rows, w_lin, params, init, sched: Schedule, levels):
    """The recurrence in the batch layout: (state buffers [N + R + N, ...], linear part [R + N, width])."""
    rows, count = x_rows.shape[0], init[0].shape[0]
    width = w_lin.shape[1]
    x_b = _pad_rows(x_rows[sched.row_of], count)
    init_sorted = tuple(i[sched.order] for i in init)
    bufs = tuple(_pad_rows(jnp.concatenate([i, jnp.zeros((rows,) + i.shape[1:], i.dtype)]), count)
                 for i in init_sorted)
    pre_buf = jnp.zeros((rows + count, width), x_rows.dtype)
    carry = init_sorted
    for j, b, first, stop in _phases(levels, sched.ends):
        carry = tuple(c[:b] for c in carry)

        def body(t, state, b=b):
            carry, bufs, pre_buf = state
            start = sched.starts[t]
            xt = _slab(x_b, start, b)
            pre = xt[:, :width] + carry[0] @ w_lin
            new = cell.step(pre, xt[:, width:], carry, params)
            bufs = tuple(_put(buf, n, count + start) for buf, n in zip(bufs, new))
            return tuple(new), bufs, _put(pre_buf, pre, start)

        carry, bufs, pre_buf = lax.fori_loop(first, stop, body, (carry, bufs, pre_buf))
    return x_b, bufs, pre_buf


def _to_rows(buf_b, sched: Schedule, shift: int = 0):
    """Batch layout -> LoD row order; padding rows are zeros."""
    out = buf_b[sched.pos_of + shift]
    return jnp.where(sched.valid[:, None], out, jnp.zeros((), out.dtype))


def _from_rows(rows_value, sched: Schedule, extra: int):
    """LoD row order -> batch layout (with ``extra`` zero rows at the end)."""
    out = jnp.where(sched.valid[:, None], rows_value[sched.row_of], jnp.zeros((), rows_value.dtype))
    return _pad_rows(out, extra)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 6, 7))
def ragged_recurrence(cell, x_rows, w_lin, params, init, offsets, steps_bound: int, levels: tuple):
    """Run ``cell`` over every sequence of ``offsets`` (see the module docstring).

    ``cell.step(pre, x_rest, carry, params)`` -> new carry (state first); ``pre = x[:, :width] +
    carry[0] @ w_lin``. Returns (per-row states, per-row linear parts) in LoD row order, zeros
    on padding rows."""
    sched = schedule(offsets, x_rows.shape[0], steps_bound, levels, cell.reverse)
    _, bufs, pre_buf = _forward(cell, x_rows, w_lin, params, init, sched, levels)
    count = init[0].shape[0]
    return tuple(_to_rows(b, sched, count) for b in bufs), _to_rows(pre_buf, sched)


def _fwd(cell, x_rows, w_lin, params, init, offsets, steps_bound, levels):
    sched = schedule(offsets, x_rows.shape[0], steps_bound, levels, cell.reverse)
    x_b, bufs, pre_buf = _forward(cell, x_rows, w_lin, params, init, sched, levels)
    count = init[0].shape[0]
    out = tuple(_to_rows(b, sched, count) for b in bufs), _to_rows(pre_buf, sched)
    return out, (x_b, w_lin, params, init, sched, bufs, pre_buf)


def _bwd(cell, steps_bound, levels, saved, cotangents):
    x_b, w_lin, params, init, sched, bufs, pre_buf = saved
    ct_states, ct_pre = cotangents
    count = init[0].shape[0]
    rows = x_b.shape[0] - count
    width = w_lin.shape[1]
    has_rest = x_b.shape[1] > width
    ct_b = tuple(_from_rows(c, sched, count) for c in ct_states)
    ct_pre_b = _from_rows(ct_pre, sched, count)
    dx_b = jnp.zeros_like(x_b)
    d_params = jax.tree_util.tree_map(jnp.zeros_like, params)
    d_carry = None
    zero = lambda v: jnp.zeros((), v.dtype)  # noqa: E731
    for j, b, first, stop in reversed(_phases(levels, sched.ends)):
        if d_carry is None:
            d_carry = tuple(jnp.zeros((b,) + i.shape[1:], i.dtype) for i in init)
        else:
            d_carry = tuple(_pad_rows(d, b - d.shape[0]) for d in d_carry)

        def body(k, state, b=b, stop=stop):
            d_carry, dx_b, d_params = state
            t = stop - 1 - k
            start = sched.starts[t]
            prev_start = jnp.where(t == 0, 0, count + sched.starts[jnp.maximum(t - 1, 0)])
            keep = (jnp.arange(b) < sched.starts[t + 1] - start)[:, None]
            carry_prev = tuple(jnp.where(keep, _slab(buf, prev_start, b), zero(buf)) for buf in bufs)
            pre = jnp.where(keep, _slab(pre_buf, start, b), zero(pre_buf))
            x_rest = jnp.where(keep, _slab(x_b, start, b)[:, width:], zero(x_b)) if has_rest \
                else jnp.zeros((b, 0), x_b.dtype)
            d_new = tuple(jnp.where(keep, d + _slab(ct, start, b), zero(d)) for d, ct in zip(d_carry, ct_b))
            _, step_vjp = jax.vjp(cell.step, pre, x_rest, carry_prev, params)
            d_pre, d_rest, d_prev, d_step_params = step_vjp(d_new)
            d_pre = jnp.where(keep, d_pre + _slab(ct_pre_b, start, b), zero(d_pre))
            d_prev = (d_prev[0] + d_pre @ w_lin.T,) + tuple(d_prev[1:])
            d_carry = tuple(jnp.where(keep, n, zero(n)) for n in d_prev)
            d_x = jnp.concatenate([d_pre, jnp.where(keep, d_rest, zero(d_rest))], axis=1) if has_rest else d_pre
            dx_b = _put(dx_b, jnp.where(keep, d_x, _slab(dx_b, start, b)), start)
            d_params = jax.tree_util.tree_map(jnp.add, d_params, d_step_params)
            return d_carry, dx_b, d_params

        d_carry, dx_b, d_params = lax.fori_loop(0, stop - first, body, (d_carry, dx_b, d_params))
    if d_carry is None:
        d_init = tuple(jnp.zeros_like(i) for i in init)
    else:
        d_init = tuple(_pad_rows(d, count - d.shape[0]) for d in d_carry)
        rank_order = sched.order
        d_init = tuple(jnp.zeros_like(i).at[rank_order].set(d) for i, d in zip(init, d_init))
    dx_rows = _to_rows(dx_b, sched)
    # The recurrent weight's gradient, one product over all rows: sum_t h_{t-1}^T d_pre_t.
    h_prev = jnp.where(sched.valid[:, None], bufs[0][sched.prev_of], zero(bufs[0]))
    d_w_lin = h_prev.T @ dx_b[:rows, :width]
    return dx_rows, d_w_lin, d_params, d_init, None


ragged_recurrence.defvjp(_fwd, _bwd)
