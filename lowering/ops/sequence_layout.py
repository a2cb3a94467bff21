"""Sequence ops that change the layout of LoD data: ``sequence_expand``, ``sequence_pad`` /
``sequence_unpad``, ``sequence_mask``, ``sequence_slice``, ``sequence_reshape``,
``sequence_erase`` and ``lod_reset``.

Where Paddle's output row count depends on the data (expand, unpad, slice, erase), the output is
padded to a static bound computed from the inputs' padded sizes, so a step compiles once per
bucket; its offsets count only the real rows, and the rows past them are zeros that no sequence
owns (``lowering/lod_value.py``). Gradients flow through gathers, so padding rows get none.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ...ir import dtypes
from ...ir.errors import OpRuntimeError
from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext
from ..checks import bound_checked
from ..lod_value import (LoDValue, counted_rows, longest_of, note_longest, note_sequence_count, same_sequences,
                         sequence_count)
from ..lower import lod_aware


def _rows_where(mask, values):
    return jnp.where(mask.reshape(mask.shape + (1,) * (values.ndim - 1)), values, jnp.zeros((), values.dtype))


def _owner(offsets, rows: int):
    """For ``rows`` output rows laid out by ``offsets``: each row's sequence (clipped to a valid
    index), its position in it, and whether it is a real row."""
    count = offsets.shape[0] - 1
    r = jnp.arange(rows, dtype=offsets.dtype)
    seg = jnp.searchsorted(offsets[1:], r, side="right").astype(offsets.dtype)
    real = seg < count
    seg = jnp.minimum(seg, max(count - 1, 0))
    return seg, r - offsets[seg], real


def _with_zero(counts):
    """Offsets from per-sequence row counts."""
    return jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(counts.astype(jnp.int32))])


def _need_lod(ctx: InferShapeContext, slot: str, levels: int | None = None) -> None:
    v = ctx.input(slot)
    if levels is None:
        ctx.check(v.lod_level >= 1, f"{slot} must be a LoD tensor (lod_level >= 1), got lod_level {v.lod_level}")
    else:
        ctx.check(v.lod_level == levels,
                  f"{slot} must be a LoD tensor with {levels} level(s) (Paddle's rule), got lod_level {v.lod_level}")


def _check(ctx, ok, value, message: str, bound=None, lod: bool = False) -> None:
    """A size the data must respect, checked inside the step (Paddle's kernel raises there): a
    failed run raises :class:`~fluidjax.BoundExceededError` (``lod``: :class:`~fluidjax.LoDError`)
    naming the op, ``message``, the bound and ``value``, and commits nothing."""
    if ctx.checks is not None:
        ctx.checks.check_bound(ctx.op, jnp.all(ok), value,
                               {"kind": "bound", "bound": bound, "message": message, "lod": lod})


def _first_bad(ok, value):
    """``value`` where ``ok`` first fails (any, when none does)."""
    ok, value = jnp.ravel(ok), jnp.ravel(value)
    return value[jnp.argmin(ok)] if ok.shape[0] else jnp.zeros((), value.dtype)


def _static_int(value, what: str) -> int:
    """A value that decides a shape: it must be known when the step is traced."""
    try:
        return int(np.max(np.asarray(value)))
    except Exception:                                # a tracer: the value is only known at run time
        raise OpRuntimeError(f"{what} decides the output's shape, so it must be known when the step is "
                             "compiled; give the size as an attribute instead") from None


# -- sequence_expand -------------------------------------------------------------------------------
def _expand_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    ref = int(ctx.attr("ref_level"))
    ctx.check(x.ndim >= 2, f"X must have rank >= 2, got {x.shape}")
    ctx.check(x.lod_level <= 1, f"X may have at most one LoD level, got lod_level {x.lod_level}")
    _need_lod(ctx, "Y")
    ctx.check(ref == -1 or 0 <= ref < y.lod_level, f"ref_level must be -1 or in [0, {y.lod_level}), got {ref}")
    ctx.set_output("Out", (-1,) + tuple(x.shape[1:]), x.dtype, x.lod_level)


@op("sequence_expand", inputs="X Y", outputs="Out", attrs={"ref_level": -1}, infer_shape=_expand_shape,
    no_grad_inputs=["Y"])
def sequence_expand(ctx):
    """Sequence i of X (row i of a plain X) repeated as often as sequence i of Y's ``ref_level``
    (-1: the last) has entries. A LoD X gives Out one sequence per copy; a plain X gives plain
    rows, as in Paddle.

    Inside a compiled step the output is padded to a static bound. Its real rows and sequences
    come first; a plain X's output is a LoD value of one sequence so that a fetch is cut to its
    real rows, and a LoD X's output may end with empty sequences (its number of sequences is data).
    """
    x, y = ctx.input("X"), ctx.input("Y")
    level = int(ctx.attr("ref_level"))
    level = len(y.offsets) - 1 if level == -1 else level
    ref = y.offsets[level]
    # How many entries ref can point at: the rows (last level) or the next level's sequences.
    ref_bound = y.data.shape[0] if level == len(y.offsets) - 1 else y.offsets[level + 1].shape[0] - 1
    # A plain X whose row count is data (a counted LoD value of one sequence) is plain rows.
    declared = ctx.op.block.find_var(ctx.op.input("X")[0])
    lod_x = x.__class__ is LoDValue and (declared is None or declared.lod_level > 0)
    if ref.shape[0] <= 1:                       # no sequences to follow: Paddle copies X
        return {"Out": x}
    data = x.data if x.__class__ is LoDValue else x
    count = x.offsets[0].shape[0] - 1 if lod_x else data.shape[0]
    if x.__class__ is LoDValue and not lod_x and ref.shape[0] < count + 1:
        count = int(ref.shape[0]) - 1           # rows past Y's sequences are X's padding
        data = data[:count]
    if (x.__class__ is not LoDValue and level == 0 and ref.shape[0] > count + 1
            and sequence_count(ref) is not None):
        # Y's padding sequences (FLAGS_bucket_sequences) are empty: X's rows for them are never copied
        data = jnp.concatenate([data, jnp.zeros((int(ref.shape[0]) - 1 - count,) + data.shape[1:], data.dtype)])
        count = int(ref.shape[0]) - 1
    if ref.shape[0] < count + 1 or (level == 0 and ref.shape[0] != count + 1):
        raise OpRuntimeError(f"sequence_expand: X has {count} sequences but Y's level {level} has "
                             f"{int(ref.shape[0]) - 1}; they must match")
    ref = ref[:count + 1]                       # an inner level's padding: empty entries at the end
    if not lod_x:
        out_rows = max(ref_bound, 1)
        seg, _, real = _owner(ref - ref[0], out_rows)
        out = _rows_where(real, data[seg])
        total = (ref[-1] - ref[0]).astype(jnp.int32)
        return {"Out": LoDValue(out, (jnp.stack([jnp.zeros((), jnp.int32), total]),))}
    x_off = x.offsets[0]
    x_len = x_off[1:] - x_off[:-1]
    n_out = max(ref_bound, 1)                   # output sequences: one per entry of ref
    src_seq, _, seq_real = _owner(ref - ref[0], n_out)
    out_off = _with_zero(jnp.where(seq_real, x_len[src_seq], 0))
    # Each output sequence is a copy of one of X's, so Out has at most ref_bound × X's longest
    # sequence rows: with a bound on that (a fed LoD's bucketed longest, or a loop variable's bound
    # its loop checks every iteration: while_loop._Loop) far fewer than ref_bound × X's rows (the
    # book's beam decoder: 256 prefixes × a 16-word bound, not × 1,024 padded rows).
    longest = longest_of(x_off)
    out_rows = ref_bound * data.shape[0] if longest is None else ref_bound * min(longest, data.shape[0])
    out_rows = max(out_rows, 1)
    seg, pos, real = _owner(out_off, out_rows)
    source = jnp.clip(x_off[src_seq[seg]] + pos, 0, data.shape[0] - 1)
    note_longest(out_off, longest)
    return {"Out": LoDValue(_rows_where(real, data[source]), (out_off,))}


# -- sequence_pad / sequence_unpad -----------------------------------------------------------------
def _pad_shape(ctx: InferShapeContext) -> None:
    x, pad = ctx.input("X"), ctx.input("PadValue")
    _need_lod(ctx, "X", 1)
    ctx.check(x.ndim >= 1, f"X must have rank >= 1, got {x.shape}")
    ctx.check(tuple(pad.shape) in ((1,), (), (-1,)) or len(pad.shape) == x.ndim - 1,
              f"PadValue must have shape [1] or X's row shape {x.shape[1:]}, got {pad.shape}")
    length = int(ctx.attr("padded_length"))
    ctx.check(length == -1 or length > 0, f"padded_length must be -1 or > 0, got {length}")
    ctx.set_output("Out", (-1, length) + tuple(x.shape[1:]), x.dtype, 0)
    ctx.set_output("Length", (-1,), "int64", 0)


@op("sequence_pad", inputs="X PadValue", outputs="Out Length", attrs={"padded_length": -1},
    infer_shape=_pad_shape, no_grad_inputs=["PadValue"], no_grad_outputs=["Length"])
def sequence_pad(ctx):
    """Sequences to a dense [count, padded_length, ...] tensor filled with PadValue, and their lengths.

    ``padded_length = -1`` pads to the longest sequence in Paddle. Inside a compiled step that length
    is data, so the time axis is the padded row count of X instead (a static bound); the rows past
    each sequence's length hold PadValue either way, and ``Length`` gives the real lengths.
    """
    x, pad = ctx.input("X"), ctx.input("PadValue")
    data, offsets = x.data, x.offsets[0]
    steps = int(ctx.attr("padded_length"))
    lengths = offsets[1:] - offsets[:-1]
    if steps > 0:
        longest = jnp.max(lengths, initial=0)
        _check(ctx, longest <= steps, longest, f"padded_length is {steps}, shorter than the longest sequence "
               "(Paddle: padded_length must be >= the longest sequence's length)", bound=steps)
    steps = data.shape[0] if steps <= 0 else steps
    t = jnp.arange(steps, dtype=offsets.dtype)
    inside = t[None, :] < lengths[:, None]                                    # [count, steps]
    source = jnp.clip(offsets[:-1, None] + t[None, :], 0, max(data.shape[0] - 1, 0))
    rows = data[source]                                                       # [count, steps, ...]
    fill = pad.astype(data.dtype).reshape(() if pad.size == 1 else data.shape[1:])
    out = jnp.where(inside.reshape(inside.shape + (1,) * (data.ndim - 1)), rows, fill)
    # one row per sequence: with padding sequences (FLAGS_bucket_sequences), only the real ones count
    return {"Out": counted_rows(out, offsets), "Length": counted_rows(lengths.astype(jnp.int64), offsets)}


def _unpad_shape(ctx: InferShapeContext) -> None:
    x, length = ctx.input("X"), ctx.input("Length")
    ctx.check(x.ndim >= 2, f"X must be [count, steps, ...], got {x.shape}")
    ctx.check(length.ndim == 1, f"Length must be 1-D [count], got {length.shape}")
    ctx.check(length.dtype == "int64", f"Length must be int64, got {length.dtype}")
    row = tuple(x.shape[2:]) if x.ndim > 2 else (1,)
    ctx.set_output("Out", (-1,) + row, x.dtype, 1)


@op("sequence_unpad", inputs="X Length", outputs="Out", infer_shape=_unpad_shape, no_grad_inputs=["Length"])
def sequence_unpad(ctx):
    """The first ``Length[i]`` steps of every row i of X ([count, steps, ...]) as sequence i of a
    LoD tensor (a 2-D X gives [rows, 1]). Padded inside a step to count * steps rows."""
    x, length = ctx.input("X"), ctx.input("Length")
    x = x.data if x.__class__ is LoDValue else x
    real_count = None
    if length.__class__ is LoDValue:      # counted lengths (sequence_pad's under FLAGS_bucket_sequences)
        real_count, length = length.row_count(), length.data
    count, steps = x.shape[0], x.shape[1]
    given = length.reshape(-1)
    fits = (given >= 0) & (given <= steps)
    _check(ctx, fits, _first_bad(fits, given), f"a Length must be in [0, {steps}] (X holds {steps} steps per "
           "sequence)", bound=steps)
    lengths = jnp.clip(given.astype(jnp.int32), 0, steps)
    offsets = _with_zero(lengths)
    seg, pos, real = _owner(offsets, max(count * steps, 1))
    flat = x.reshape((count * steps,) + tuple(x.shape[2:]))
    out = _rows_where(real, flat[jnp.clip(seg * steps + pos, 0, max(count * steps - 1, 0))])
    if x.ndim == 2:
        out = out.reshape(out.shape[0], 1)
    note_sequence_count(offsets, real_count)
    return {"Out": LoDValue(out, (offsets,))}


# -- sequence_mask ---------------------------------------------------------------------------------
def _mask_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.check(x.dtype in ("int32", "int64"), f"X must hold int32 or int64 lengths, got {x.dtype}")
    maxlen = int(ctx.attr("maxlen"))
    ctx.check(maxlen == -1 or maxlen > 0, f"maxlen must be -1 or > 0, got {maxlen}")
    steps = maxlen if maxlen > 0 and ctx.input("MaxLenTensor") is None else -1
    ctx.set_output("Y", tuple(x.shape) + (steps,), dtypes.from_enum(int(ctx.attr("out_dtype"))), 0)


@op("sequence_mask", inputs="X MaxLenTensor?", outputs="Y", attrs={"maxlen": -1, "out_dtype": 3},
    infer_shape=_mask_shape, grad=None)
def sequence_mask(ctx):
    """``Y[..., j] = j < X[...]`` for j < maxlen, as ``out_dtype``.

    The width is ``maxlen``, or MaxLenTensor's value, or (maxlen = -1) the largest length; the
    last two are data in Paddle, so inside a compiled step they must be known when it is traced.
    """
    x = ctx.input("X")
    x = x.data if x.__class__ is LoDValue else x
    maxlen = int(ctx.attr("maxlen"))
    if ctx.input("MaxLenTensor") is not None:
        maxlen = _static_int(ctx.input("MaxLenTensor"), "sequence_mask: MaxLenTensor")
    elif maxlen <= 0:
        maxlen = _static_int(x, "sequence_mask with maxlen=-1: the largest length")
    mask = jnp.arange(maxlen, dtype=x.dtype) < x[..., None]
    return {"Y": mask.astype(dtypes.to_numpy(dtypes.from_enum(int(ctx.attr("out_dtype")))))}


# -- sequence_slice --------------------------------------------------------------------------------
def _slice_shape(ctx: InferShapeContext) -> None:
    x, start, length = ctx.input("X"), ctx.input("Offset"), ctx.input("Length")
    _need_lod(ctx, "X", 1)
    for slot, v in (("Offset", start), ("Length", length)):
        ctx.check(v.dtype == "int64", f"{slot} must be int64, got {v.dtype}")
        ctx.check(v.ndim == 2 and v.shape[1] in (1, -1), f"{slot} must be [count, 1], got {v.shape}")
    ctx.set_output("Out", (-1,) + tuple(x.shape[1:]), x.dtype, 1)


@op("sequence_slice", inputs="X Offset Length", outputs="Out", infer_shape=_slice_shape,
    no_grad_inputs=["Offset", "Length"])
def sequence_slice(ctx):
    """Sequence i of Out is rows ``[Offset[i], Offset[i] + Length[i])`` of sequence i of X."""
    x = ctx.input("X")
    x_off = x.offsets[0]

    def per_sequence(slot):        # [count]; X's padding sequences (FLAGS_bucket_sequences): empty slices
        v = ctx.input(slot)
        v = (v.data if v.__class__ is LoDValue else v).reshape(-1).astype(jnp.int32)
        if v.shape[0] < x_off.shape[0] - 1 and sequence_count(x_off) is not None:
            v = jnp.concatenate([v, jnp.zeros((x_off.shape[0] - 1 - v.shape[0],), jnp.int32)])
        return v

    start, length = per_sequence("Offset"), per_sequence("Length")
    seq_len = x_off[1:] - x_off[:-1]
    end = start + length
    fits = (start >= 0) & (length >= 0) & (end <= seq_len)
    _check(ctx, fits, _first_bad(fits, jnp.where(start < 0, start, jnp.where(length < 0, length, end))),
           "every slice must lie within its sequence (Offset >= 0, Length >= 0, Offset + Length <= the "
           "sequence's length); the offending Offset, Length or Offset + Length")
    offsets = same_sequences(_with_zero(length), x_off)
    seg, pos, real = _owner(offsets, x.data.shape[0])
    source = jnp.clip(x_off[seg] + start[seg] + pos, 0, x.data.shape[0] - 1)
    return {"Out": LoDValue(_rows_where(real, x.data[source]), (offsets,))}


# -- sequence_reshape ------------------------------------------------------------------------------
def _reshape_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    new_dim = int(ctx.attr("new_dim"))
    _need_lod(ctx, "X", 1)
    ctx.check(x.ndim == 2, f"X must be 2-D [rows, width], got {x.shape}")
    ctx.check(new_dim > 0, f"new_dim must be > 0, got {new_dim}")
    ctx.set_output("Out", (-1, new_dim), x.dtype, 1)


@op("sequence_reshape", inputs="X", outputs="Out", attrs={"new_dim": 1}, infer_shape=_reshape_shape)
def sequence_reshape(ctx):
    """Every sequence's values re-cut into rows of ``new_dim`` (each sequence's length * width must
    be a multiple of ``new_dim``)."""
    x = ctx.input("X")
    new_dim = int(ctx.attr("new_dim"))
    rows, width = x.data.shape
    flat = x.data.reshape(-1)
    out_rows = max(-(-rows * width // new_dim), 1)
    flat = jnp.pad(flat, (0, out_rows * new_dim - flat.shape[0]))
    values = (x.offsets[0][1:] - x.offsets[0][:-1]) * width
    fits = values % new_dim == 0
    _check(ctx, fits, _first_bad(fits, values), f"every sequence's values (length x {width}) must make whole rows "
           f"of new_dim = {new_dim}; a sequence's number of values", bound=new_dim, lod=True)
    offsets = (x.offsets[0] * width) // new_dim
    offsets = same_sequences(offsets.astype(jnp.int32), x.offsets[0])
    return {"Out": LoDValue(flat.reshape(out_rows, new_dim), (offsets,))}


# -- sequence_erase --------------------------------------------------------------------------------
def _erase_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    _need_lod(ctx, "X", 1)
    ctx.check(x.dtype in ("int32", "int64"), f"X must hold int32 or int64 ids, got {x.dtype}")
    ctx.check(x.ndim == 1 or (x.ndim == 2 and x.shape[1] in (1, -1)), f"X must be [rows, 1], got {x.shape}")
    ctx.set_output("Out", (-1,) + tuple(x.shape[1:]), x.dtype, 1)


@op("sequence_erase", inputs="X", outputs="Out", attrs={"tokens": Attr("ints", [])}, infer_shape=_erase_shape,
    grad=None)
def sequence_erase(ctx):
    """X's ids without those in ``tokens``; every sequence keeps its place (it may become empty)."""
    x = ctx.input("X")
    rows = x.data.shape[0]
    ids = x.data.reshape(rows)
    tokens = jnp.asarray(list(ctx.attr("tokens") or []) or [0], ids.dtype)
    keep = x.row_mask()
    if ctx.attr("tokens"):
        keep = keep & ~jnp.any(ids[:, None] == tokens[None, :], axis=1)
    before = _with_zero(keep)                    # kept rows before each row
    target = jnp.where(keep, before[:-1], rows)  # dropped rows go past the end
    out = jnp.zeros_like(ids).at[target].set(ids, mode="drop")
    offsets = same_sequences(before[x.offsets[0]], x.offsets[0])
    return {"Out": LoDValue(out.reshape(x.data.shape), (offsets,))}


# -- lod_reset -------------------------------------------------------------------------------------
def _lod_reset_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    append = bool(ctx.attr("append"))
    if y is not None and y.lod_level:
        level = y.lod_level
    elif append:
        level = x.lod_level + 1
    else:
        level = 1
    if y is None:
        target = list(ctx.attr("target_lod") or [])
        ctx.check(len(target) > 1 and target[0] == 0 and all(a <= b for a, b in zip(target, target[1:])),
                  f"target_lod must start at 0, never decrease and have >= 2 entries, got {target}")
        ctx.check(x.shape[0] < 0 or x.lod_level or target[-1] == x.shape[0],
                  f"target_lod must end at X's row count {x.shape[0]}, got {target}")
    elif not y.lod_level:
        ctx.check(y.dtype == "int32", f"Y without LoD holds the new offsets and must be int32, got {y.dtype}")
    ctx.set_output("Out", x.shape, x.dtype, level)


@op("lod_reset", inputs="X Y?", outputs="Out", attrs={"target_lod": Attr("ints", []), "append": False},
    infer_shape=_lod_reset_shape, no_grad_inputs=["Y"])
def lod_reset(ctx):
    """X's rows with a new LoD: Y's LoD (all its levels), or Y's values as offsets, or
    ``target_lod``; with ``append`` the new level is added below X's levels."""
    x, y = ctx.input("X"), ctx.input("Y")
    data = x.data if x.__class__ is LoDValue else x
    if y is not None and y.__class__ is LoDValue:
        return {"Out": LoDValue(data, y.offsets)}
    if y is not None:
        level = y.reshape(-1).astype(jnp.int32)
    else:
        level = jnp.asarray(list(ctx.attr("target_lod")), jnp.int32)
    upper = x.offsets if (ctx.attr("append") and x.__class__ is LoDValue) else ()
    # The new (last) level cuts X's real rows.
    rows = x.offsets[-1][-1] if x.__class__ is LoDValue else data.shape[0]
    if level.shape[0] < 2:
        raise OpRuntimeError(f"op 'lod_reset' at {ctx.op.location}: the new LoD needs at least two offsets, got "
                             f"{level.shape[0]}")
    steps = level[1:] - level[:-1]
    good = (level[0] == 0) & jnp.all(steps >= 0) & (level[-1] == rows)
    _check(ctx, good, jnp.where(level[-1] != rows, level[-1], jnp.min(steps, initial=0)),
           "the new offsets must start at 0, never decrease and end at X's row count; the offending last "
           "offset (or a negative step)", lod=True)
    return {"Out": LoDValue(data, (*upper, level))}


bound_checked("sequence_pad", lambda op_: int(op_.attrs.get("padded_length", -1)) > 0)
for _type in ("sequence_unpad", "sequence_slice", "sequence_reshape"):
    bound_checked(_type)
bound_checked("lod_reset")


lod_aware("sequence_expand", "sequence_pad", "sequence_unpad", "sequence_mask", "sequence_slice",
          "sequence_reshape", "sequence_erase", "lod_reset")
