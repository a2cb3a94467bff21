"""CTR and recommendation ops of Fluid 1.x and a few odds: data_norm (with its statistics'
"gradients"), cvm (continuous_value_model), filter_by_instag, hash (XXH64), the SelectedRows
helpers merge_selected_rows / get_tensor_from_selected_rows, and load (a tensor from a file).

- ``data_norm`` normalizes with *summaries* kept as parameters: Means = BatchSum / BatchSize,
  Scales = sqrt(BatchSize / BatchSquareSum). Its gradient op is Paddle's CPU kernel: besides X@GRAD
  (and scale_w@GRAD / bias@GRAD) it writes the batch's statistics as the summaries' "gradients"
  (N, Σx, Σ(x − Means)² + N·ε; with ``slot_dim`` the per-slot averages of the instances whose show
  is non-zero). ``summary_decay_rate`` and ``sync_stats`` are carried for Paddle's CUDA kernel, which
  also folds the statistics into the summaries in place; Paddle's CPU kernel (the oracle) does not,
  and neither does this one: the optimizer applies its rule to those gradients, as on Paddle's CPU.
- ``filter_by_instag``'s kept row count depends on the data: outputs are padded to a static
  capacity (all rows of Ins; one per instance for LossWeight / IndexMap) and carry the real LoD
  (docs/ops_data_dependent.md). Their one LoD level has one entry per *instance* of Ins_tag (a
  static number): the kept instances' sequences first, then empty ones, so a fetch returns
  Paddle's rows exactly and Paddle's LoD followed by empty sequences.
- ``hash`` is XXH64 (seed = the hash's index) of each row's bytes, in uint64 arithmetic
  (``lowering`` enables x64).
- fluidjax has no SelectedRows: every tensor is dense, and a dense tensor has no duplicate rows to
  merge, so ``merge_selected_rows`` and ``get_tensor_from_selected_rows`` pass X through (Paddle
  refuses a dense X for both).
- ``load`` reads Paddle's tensor stream (the layout of ``save`` / ``fluid.io.save_vars``) when the
  step runs, through a host callback: the file's header (dtype, shape, LoD) is read while the step
  is traced and fixes the output's shape; each run reads the data again and checks that the header
  is unchanged. It is never folded into a constant (an ``effect`` op), so a rerun sees the file
  as it is then.
"""

from __future__ import annotations

import os
import struct

import jax
import jax.numpy as jnp
import numpy as np

from ...ir import dtypes
from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext, same_as
from ..lod_value import LoDValue, bucket
from ..lower import lod_aware
from ._errors import _fail
from ._shapes import dims_equal

_SHOW_ZERO = 1e-7      # |show| below this counts as zero (Paddle's min_precision)


def _rows(value):
    """(plain rows, real-row mask or None) of a possibly-LoD value."""
    if value.__class__ is LoDValue:
        return value.data, value.row_mask()
    return value, None


# -- data_norm -------------------------------------------------------------------------------------------
_DN_ATTRS = {"epsilon": 1e-4, "slot_dim": -1, "summary_decay_rate": 0.9999999, "enable_scale_and_shift": False,
             "data_layout": "NCHW", "sync_stats": False}


def _data_norm_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.check(x.ndim == 2, f"X must be 2-D [batch, channels] (Paddle's kernel takes no other rank), got {x.shape}")
    ctx.check(x.dtype in ("float32", "float64"), f"X must be float32 or float64, got {x.dtype}")
    ctx.check(ctx.attr("data_layout") in ("NCHW", "NHWC", "AnyLayout", None),
              f"data_layout must be 'NCHW' or 'NHWC', got {ctx.attr('data_layout')!r}")
    eps = ctx.attr("epsilon")
    eps = 1e-4 if eps is None else eps
    ctx.check(0.0 <= eps <= 0.001, f"epsilon must lie in [0, 0.001], got {eps}")
    c = x.shape[1]
    slots = ["BatchSize", "BatchSum", "BatchSquareSum"]
    if ctx.attr("enable_scale_and_shift"):
        ctx.check(ctx.input("scale_w") is not None and ctx.input("bias") is not None,
                  "enable_scale_and_shift needs the inputs scale_w and bias")
        slots += ["scale_w", "bias"]
    for slot in slots:
        v = ctx.input(slot)
        if v is None:
            continue
        ctx.check(v.ndim == 1 and dims_equal(v.shape[0], c), f"{slot} must be a vector of {c} channels, got {v.shape}")
        ctx.check(v.dtype == x.dtype, f"{slot} must be {x.dtype} like X, got {v.dtype}")
    slot_dim = ctx.attr("slot_dim") or -1
    if slot_dim > 0 and c >= 0:
        ctx.check(c % slot_dim == 0, f"slot_dim={slot_dim} must divide the {c} channels")
    ctx.set_output("Y", x.shape, x.dtype, x.lod_level)
    ctx.set_output("Means", (c,), x.dtype, 0)
    ctx.set_output("Scales", (c,), x.dtype, 0)


def _shows(x, slot_dim: int):
    """[rows, C] bool: the element's slot has a non-zero show (its slot's first column)."""
    show = x[:, ::slot_dim]
    nonzero = ~((show > -_SHOW_ZERO) & (show < _SHOW_ZERO))
    return jnp.repeat(nonzero, slot_dim, axis=1)


def _data_norm_grad_maker(op, out_grads, in_grads):
    inputs = {"X": op.input("X"), "Y@GRAD": out_grads["Y"], "Means": op.output("Means"),
              "Scales": op.output("Scales")}
    for slot in ("scale_w", "bias"):
        if op.input(slot):
            inputs[slot] = op.input(slot)
    outputs = {f"{slot}@GRAD": names for slot, names in in_grads.items()}
    # Paddle's grad op names the summaries as outputs too (its CUDA kernel updates them in place);
    # this rule, like Paddle's CPU kernel, leaves them as they are.
    for slot in ("BatchSize", "BatchSum", "BatchSquareSum"):
        outputs[slot] = op.input(slot)
    return [("data_norm_grad", inputs, outputs, {k: v for k, v in op.attrs.items() if k not in ("op_callstack", "op_role")})]


@op("data_norm", inputs="scale_w? bias? X BatchSize BatchSum BatchSquareSum", outputs="Y Means Scales",
    attrs=_DN_ATTRS, infer_shape=_data_norm_shape, no_grad_outputs=["Means", "Scales"],
    grad_maker=_data_norm_grad_maker)
def data_norm(ctx):
    """Y = (X − Means) · Scales per channel, Means = BatchSum / BatchSize, Scales = sqrt(BatchSize /
    BatchSquareSum). ``enable_scale_and_shift``: Y · scale_w + bias. ``slot_dim`` > 0: X is made of
    slots of ``slot_dim`` columns whose first column is the show count; a slot whose show is zero
    (|show| < 1e-7) gives zeros."""
    x, _ = _rows(ctx.input("X"))
    means = ctx.input("BatchSum") / ctx.input("BatchSize")
    scales = jnp.sqrt(ctx.input("BatchSize") / ctx.input("BatchSquareSum"))
    y = (x - means) * scales
    if ctx.attr("enable_scale_and_shift"):
        y = y * ctx.input("scale_w") + ctx.input("bias")
    slot_dim = int(ctx.attr("slot_dim") or -1)
    if slot_dim > 0:
        y = jnp.where(_shows(x, slot_dim), y, jnp.zeros((), x.dtype))
    return {"Y": y.astype(x.dtype), "Means": means, "Scales": scales}


def _data_norm_grad_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    c = x.shape[1]
    ctx.set_output("X@GRAD", x.shape, x.dtype, x.lod_level)
    for slot in ("BatchSize@GRAD", "BatchSum@GRAD", "BatchSquareSum@GRAD", "scale_w@GRAD", "bias@GRAD"):
        ctx.set_output(slot, (c,), x.dtype, 0)


@op("data_norm_grad", inputs="X Y@GRAD scale_w? bias? Means Scales",
    outputs="X@GRAD? BatchSize@GRAD? BatchSum@GRAD? BatchSquareSum@GRAD? scale_w@GRAD? bias@GRAD? "
            "BatchSize? BatchSum? BatchSquareSum?",
    attrs=_DN_ATTRS, infer_shape=_data_norm_grad_shape, grad=None)
def data_norm_grad(ctx):
    """Paddle's CPU kernel: X@GRAD = Y@GRAD · Scales (· scale_w); scale_w@GRAD = Σ Y@GRAD · (X −
    Means) · Scales, bias@GRAD = Σ Y@GRAD; the summaries' gradients are the batch's statistics
    (N, Σx, Σ(x − Means)² + N·ε, or with ``slot_dim`` per channel over the instances whose slot has
    a show: 1, their mean, their mean square deviation + count·ε; zeros where none has)."""
    x, mask = _rows(ctx.input("X"))
    dy, _ = _rows(ctx.input("Y@GRAD"))
    dy = dy[: x.shape[0]]
    means, scales = ctx.input("Means"), ctx.input("Scales")
    eps = jnp.asarray(ctx.attr("epsilon"), x.dtype)
    slot_dim = int(ctx.attr("slot_dim") or -1)
    rows = jnp.ones(x.shape, bool) if mask is None else jnp.broadcast_to(mask[:, None], x.shape)
    shown = rows & _shows(x, slot_dim) if slot_dim > 0 else rows
    zero = jnp.zeros((), x.dtype)
    out = {}
    if ctx.attr("enable_scale_and_shift"):
        w = ctx.input("scale_w")
        keep = shown if slot_dim > 0 else rows
        out["X@GRAD"] = jnp.where(keep, dy * scales * w, zero) if slot_dim > 0 else dy * scales * w
        out["bias@GRAD"] = jnp.sum(jnp.where(keep, dy, zero), axis=0)
        out["scale_w@GRAD"] = jnp.sum(jnp.where(keep, (x - means) * scales * dy, zero), axis=0)
    else:
        out["X@GRAD"] = dy * scales
    dev2 = jnp.square(x - means)
    if slot_dim > 0:
        count = jnp.sum(shown, axis=0).astype(x.dtype)
        total = jnp.sum(jnp.where(shown, x, zero), axis=0)
        square = jnp.sum(jnp.where(shown, dev2, zero), axis=0)
        seen = count >= 1
        safe = jnp.where(seen, count, 1)
        out["BatchSize@GRAD"] = jnp.where(seen, jnp.ones_like(count), zero)
        out["BatchSum@GRAD"] = jnp.where(seen, total / safe, zero)
        out["BatchSquareSum@GRAD"] = jnp.where(seen, square / safe + count * eps, zero)
    else:
        n = jnp.sum(rows[:, 0]).astype(x.dtype) if x.shape[1] else jnp.asarray(x.shape[0], x.dtype)
        out["BatchSize@GRAD"] = jnp.full((x.shape[1],), n, x.dtype)
        out["BatchSum@GRAD"] = jnp.sum(jnp.where(rows, x, zero), axis=0)
        out["BatchSquareSum@GRAD"] = jnp.sum(jnp.where(rows, dev2, zero), axis=0) + n * eps
    return out


# -- cvm (continuous_value_model) --------------------------------------------------------------------
def _cvm_shape(ctx: InferShapeContext) -> None:
    x, cvm = ctx.input("X"), ctx.input("CVM")
    ctx.check(x.ndim == 2, f"X must be 2-D [rows, width], got {x.shape}")
    ctx.check(x.shape[1] < 0 or x.shape[1] >= 2, f"X's rows must hold at least show and click, got {x.shape}")
    ctx.check(cvm.ndim == 2 and cvm.shape[1] in (2, -1), f"CVM must be [instances, 2], got {cvm.shape}")
    width = x.shape[1] if ctx.attr("use_cvm") or x.shape[1] < 0 else x.shape[1] - 2
    ctx.set_output("Y", (x.shape[0], width), x.dtype, x.lod_level)


@op("cvm", inputs="X CVM", outputs="Y", attrs={"use_cvm": True}, infer_shape=_cvm_shape, grad="custom")
def cvm(ctx):
    """Each row of X begins with (show, click). ``use_cvm``: Y = X with those replaced by
    log(show + 1) and log(click + 1) − log(show + 1); otherwise Y = X without them."""
    x, _ = _rows(ctx.input("X"))
    if not ctx.attr("use_cvm"):
        return {"Y": x[:, 2:]}
    show = jnp.log(x[:, :1] + 1)
    click = jnp.log(x[:, 1:2] + 1) - show
    return {"Y": jnp.concatenate([show, click, x[:, 2:]], axis=1)}


def _cvm_grad_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("X@GRAD", x.shape, x.dtype, x.lod_level)


@op("cvm_grad", inputs="X CVM Y@GRAD", outputs="X@GRAD", attrs={"use_cvm": True}, infer_shape=_cvm_grad_shape,
    grad=None)
def cvm_grad(ctx):
    """Paddle's kernel, not the derivative: X@GRAD's first two columns are the instance's CVM
    values (each row of X, or each sequence of a LoD X, is one instance), the others Y@GRAD's."""
    xv = ctx.input("X")
    x, mask = _rows(xv)
    dy, _ = _rows(ctx.input("Y@GRAD"))
    dy = dy[: x.shape[0]]
    cvm_rows = ctx.input("CVM")
    cvm_rows = cvm_rows.data if cvm_rows.__class__ is LoDValue else cvm_rows
    if xv.__class__ is LoDValue:
        instance = jnp.minimum(xv.segment_ids(), cvm_rows.shape[0] - 1)
    else:
        instance = jnp.minimum(jnp.arange(x.shape[0]), cvm_rows.shape[0] - 1)
    head = cvm_rows[instance, :2].astype(x.dtype)
    tail = dy[:, 2:] if ctx.attr("use_cvm") else dy
    dx = jnp.concatenate([head, tail.astype(x.dtype)], axis=1)
    if mask is not None:
        dx = jnp.where(mask[:, None], dx, jnp.zeros((), x.dtype))
    return {"X@GRAD": dx}


# -- filter_by_instag ----------------------------------------------------------------------------------
def _filter_by_instag_shape(ctx: InferShapeContext) -> None:
    ins, tags, wanted = ctx.input("Ins"), ctx.input("Ins_tag"), ctx.input("Filter_tag")
    ctx.check(ins.ndim == 2, f"Ins must be 2-D [rows, width], got {ins.shape}")
    ctx.check(tags.dtype == "int64" and wanted.dtype == "int64",
              f"Ins_tag and Filter_tag must be int64, got {tags.dtype} and {wanted.dtype}")
    ctx.check(tags.lod_level >= 1, "Ins_tag must be a LoD tensor (lod_level 1): its sequences are the instances' "
                                   f"tag lists, got lod_level {tags.lod_level}")
    ctx.check(tags.ndim == 1 or (tags.ndim == 2 and tags.shape[1] in (1, -1)),
              f"Ins_tag must be [tags] or [tags, 1], got {tags.shape}")
    ctx.check(wanted.ndim in (1, 2), f"Filter_tag must be [tags] or [tags, 1], got {wanted.shape}")
    if ctx.attr("is_lod"):
        ctx.check(ins.lod_level >= 1, "is_lod=True needs Ins to be a LoD tensor (its sequences are the instances)")
    ctx.set_output("Out", (-1, ins.shape[1]), ins.dtype, 1)
    ctx.set_output("LossWeight", (-1, 1), "float32", 1)
    ctx.set_output("IndexMap", (-1, 3), "int64", 1)


lod_aware("filter_by_instag", "data_norm", "cvm")


@op("filter_by_instag", inputs="Ins Ins_tag Filter_tag", outputs="Out LossWeight IndexMap",
    attrs={"is_lod": True, "out_val_if_empty": Attr("long", 0)}, infer_shape=_filter_by_instag_shape,
    no_grad_inputs=["Ins_tag", "Filter_tag"], no_grad_outputs=["LossWeight", "IndexMap"])
def filter_by_instag(ctx):
    """The instances (rows of Ins, or its sequences with ``is_lod``) that have at least one tag of
    Filter_tag among their Ins_tag sequence, in order. LossWeight holds 1 per kept instance;
    IndexMap one row per kept instance: (first row in Out, first row in Ins, row count). When none
    is kept: one row of ``out_val_if_empty``, LossWeight 0, IndexMap (0, 1, 1), as Paddle.
    The kept count depends on the data: see the module docstring for the padded layout."""
    ins_v, tag_v = ctx.input("Ins"), ctx.input("Ins_tag")
    if tag_v.__class__ is not LoDValue:
        _fail(ctx, "Ins_tag must be fed as a LoD tensor: its sequences are the instances' tag lists")
    ins, _ = _rows(ins_v)
    rows = ins.shape[0]
    tag_offsets = tag_v.offsets[0].astype(jnp.int32)
    n_ins = tag_offsets.shape[0] - 1
    if ctx.attr("is_lod"):
        if ins_v.__class__ is not LoDValue:
            _fail(ctx, "is_lod=True needs Ins fed as a LoD tensor")
        ins_offsets = ins_v.offsets[0].astype(jnp.int32)
        if ins_offsets.shape[0] != n_ins + 1:
            _fail(ctx, f"Ins has {ins_offsets.shape[0] - 1} sequences and Ins_tag {n_ins}: one tag list per instance")
    else:
        if n_ins > rows:
            _fail(ctx, f"Ins_tag has {n_ins} tag lists for {rows} rows of Ins")
        ins_offsets = jnp.arange(n_ins + 1, dtype=jnp.int32)
    tags = tag_v.data.reshape(tag_v.data.shape[0], -1)[:, 0]
    wanted = ctx.input("Filter_tag")
    wanted = (wanted.data if wanted.__class__ is LoDValue else wanted)
    wanted = wanted.reshape(-1)[: wanted.shape[0]] if wanted.ndim else wanted.reshape(1)
    hit = jnp.any(tags[:, None] == wanted[None, :].astype(tags.dtype), axis=1) if wanted.size else \
        jnp.zeros(tags.shape, bool)
    hit = hit & (jnp.arange(tags.shape[0]) < tag_offsets[-1])
    owner = jnp.searchsorted(tag_offsets[1:], jnp.arange(tags.shape[0], dtype=jnp.int32), side="right")
    kept = jnp.zeros((n_ins,), jnp.int32).at[owner].max(hit.astype(jnp.int32), mode="drop") > 0
    count = jnp.sum(kept)
    (which,) = jnp.nonzero(kept, size=n_ins, fill_value=0)           # kept instances, in order
    real = jnp.arange(n_ins) < count
    lengths = jnp.where(real, (ins_offsets[1:] - ins_offsets[:-1])[which], 0)
    starts_in = jnp.where(real, ins_offsets[:-1][which], 0)
    out_offsets = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(lengths).astype(jnp.int32)])
    total = out_offsets[-1]
    pos = jnp.arange(rows, dtype=jnp.int32)
    seq = jnp.clip(jnp.searchsorted(out_offsets[1:], pos, side="right"), 0, max(n_ins - 1, 0))
    src = jnp.clip(starts_in[seq] + pos - out_offsets[seq], 0, rows - 1)
    zero = jnp.zeros((), ins.dtype)
    out = jnp.where((pos < total)[:, None], ins[src], zero)
    index_map = jnp.stack([out_offsets[:-1], starts_in, lengths], axis=1).astype(jnp.int64)
    index_map = jnp.where(real[:, None], index_map, 0)
    weight = real.astype(jnp.float32)[:, None]
    # Nothing kept: Paddle's one row of out_val_if_empty, LossWeight 0, IndexMap (0, 1, 1).
    empty = count == 0
    fill = jnp.asarray(ctx.attr("out_val_if_empty"), ins.dtype)
    out = jnp.where(empty & (pos == 0)[:, None], fill, out)
    index_map = jnp.where(empty & (jnp.arange(n_ins) == 0)[:, None], jnp.asarray([0, 1, 1], jnp.int64), index_map)
    step = jnp.where(empty, 1, 0).astype(jnp.int32)
    out_offsets = out_offsets + jnp.where(jnp.arange(n_ins + 1) > 0, step, 0)
    map_offsets = jnp.minimum(jnp.arange(n_ins + 1, dtype=jnp.int32), jnp.maximum(count, 1).astype(jnp.int32))
    return {"Out": LoDValue(out, (out_offsets,)), "LossWeight": LoDValue(weight, (map_offsets,)),
            "IndexMap": LoDValue(index_map, (map_offsets,))}


# -- hash ------------------------------------------------------------------------------------------------
_P1, _P2, _P3 = 11400714785074694791, 14029467366897019727, 1609587929392839161
_P4, _P5 = 9650029242287828579, 2870177450012600261


def _u64(v):
    return jnp.asarray(v, jnp.uint64)


def _rotl(x, r: int):
    return (x << _u64(r)) | (x >> _u64(64 - r))


def _round(acc, lane):
    return _rotl(acc + lane * _u64(_P2), 31) * _u64(_P1)


def _merge(acc, v):
    return (acc ^ _round(_u64(0), v)) * _u64(_P1) + _u64(_P4)


def xxh64_rows(lanes, tail32, nbytes: int, seed):
    """XXH64 of each row's bytes: ``lanes`` [rows, k] the little-endian 8-byte words, ``tail32``
    [rows] the last 4 bytes (or None), ``nbytes`` the row's length, ``seed`` broadcastable [.., 1]."""
    seed = seed.astype(jnp.uint64)
    rows = lanes.shape[0]
    stripes = nbytes // 32
    pos = 0
    if stripes:
        v = [seed + _u64((_P1 + _P2) % 2**64), seed + _u64(_P2), seed, seed - _u64(_P1)]
        v = [jnp.broadcast_to(a, (seed.shape[0], rows)) for a in v]
        block = lanes[:, : stripes * 4].reshape(rows, stripes, 4).transpose(1, 2, 0)   # [stripes, 4, rows]

        def body(acc, stripe):
            return tuple(_round(a, stripe[i][None, :]) for i, a in enumerate(acc)), None

        v, _ = jax.lax.scan(body, tuple(v), block)
        h = _rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)
        for a in v:
            h = _merge(h, a)
        pos = stripes * 4
    else:
        h = jnp.broadcast_to(seed + _u64(_P5), (seed.shape[0], rows))
    h = h + _u64(nbytes)
    for k in range(pos, lanes.shape[1]):
        h = h ^ _round(_u64(0), lanes[None, :, k])
        h = _rotl(h, 27) * _u64(_P1) + _u64(_P4)
    if tail32 is not None:
        h = h ^ (tail32[None, :].astype(jnp.uint64) * _u64(_P1))
        h = _rotl(h, 23) * _u64(_P2) + _u64(_P3)
    h = h ^ (h >> _u64(33))
    h = h * _u64(_P2)
    h = h ^ (h >> _u64(29))
    h = h * _u64(_P3)
    return h ^ (h >> _u64(32))                                    # [seeds, rows]


def _hash_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.check(x.ndim == 2, f"X must be 2-D [rows, ids per row], got {x.shape}")
    ctx.check(x.dtype in ("int32", "int64"), f"X must be int32 or int64, got {x.dtype}")
    num_hash = ctx.attr("num_hash")
    num_hash = 1 if num_hash is None else num_hash
    mod_by = ctx.attr("mod_by")
    ctx.check(num_hash >= 1, f"num_hash must be at least 1, got {num_hash}")
    ctx.check(mod_by is None or mod_by > 0, f"mod_by (the hash size) must be positive, got {mod_by}")
    ctx.set_output("Out", (x.shape[0], num_hash, 1), x.dtype, x.lod_level)


@op("hash", inputs="X", outputs="Out", attrs={"num_hash": 1, "mod_by": Attr("long", 100000)},
    infer_shape=_hash_shape, grad=None)
def hash_op(ctx):
    """Out[i, j, 0] = XXH64(bytes of row i of X, seed j) mod ``mod_by`` for j < ``num_hash``, in X's
    dtype (Paddle's kernel)."""
    x = ctx.input("X")
    rows, width = x.shape
    if x.dtype == jnp.int64:
        lanes, tail, nbytes = jax.lax.bitcast_convert_type(x, jnp.uint64), None, 8 * width
    else:
        u = jax.lax.bitcast_convert_type(x.astype(jnp.int32), jnp.uint32).astype(jnp.uint64)
        pairs = width // 2
        lanes = u[:, 0:2 * pairs:2] | (u[:, 1:2 * pairs:2] << _u64(32))
        tail, nbytes = (u[:, -1] if width % 2 else None), 4 * width
    seeds = jnp.arange(int(ctx.attr("num_hash")), dtype=jnp.uint64)[:, None]
    h = xxh64_rows(lanes, tail, nbytes, seeds) % _u64(int(ctx.attr("mod_by")))
    return {"Out": h.T.astype(x.dtype)[:, :, None]}


# -- SelectedRows helpers ------------------------------------------------------------------------------
@op("merge_selected_rows", inputs="X", outputs="Out", infer_shape=same_as("X"), grad=None)
def merge_selected_rows(ctx):
    """Paddle sums the rows of a SelectedRows that share an index; fluidjax's tensors are dense
    (every row index once), so Out = X."""
    return {"Out": ctx.input("X")}


@op("get_tensor_from_selected_rows", inputs="X", outputs="Out", infer_shape=same_as("X"), grad=None)
def get_tensor_from_selected_rows(ctx):
    """Paddle copies a SelectedRows' value tensor out; fluidjax's tensors are dense already, so
    Out = X."""
    return {"Out": ctx.input("X")}


# -- load ------------------------------------------------------------------------------------------------
_U32, _I32, _U64 = struct.Struct("<I"), struct.Struct("<i"), struct.Struct("<Q")


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("malformed TensorDesc")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def _tensor_desc(buf: bytes) -> tuple[int, list[int]]:
    """(data_type, dims) of a serialized ``VarType.TensorDesc`` (field 1 enum, field 2 int64s)."""
    data_type, dims, i = None, [], 0
    while i < len(buf):
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
            if field == 1:
                data_type = value
            elif field == 2:
                dims.append(value - (1 << 64) if value >= 1 << 63 else value)
        elif wire == 2:
            size, i = _varint(buf, i)
            end = i + size
            if end > len(buf):
                raise ValueError("malformed TensorDesc")
            while field == 2 and i < end:
                value, i = _varint(buf, i)
                dims.append(value - (1 << 64) if value >= 1 << 63 else value)
            i = end
        else:
            raise ValueError(f"malformed TensorDesc (wire type {wire})")
    if data_type is None:
        raise ValueError("TensorDesc without a data type")
    return data_type, dims


def read_tensor_header(path: str):
    """(dtype name, shape, LoD offsets, byte offset of the data) of the tensor stream in ``path``
    (Paddle's layout; see frontend/io/tensor_stream.py). Every size is checked against the file."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        def take(n: int) -> bytes:
            if n < 0 or f.tell() + n > size:
                raise ValueError(f"truncated tensor file (needs {n} more bytes at {f.tell()} of {size})")
            return f.read(n)

        if _U32.unpack(take(4))[0] != 0:
            raise ValueError("not a tensor stream (LoDTensor version is not 0)")
        levels = _U64.unpack(take(8))[0]
        if levels > 64:
            raise ValueError(f"implausible LoD depth {levels}")
        lod = []
        for _ in range(levels):
            nbytes = _U64.unpack(take(8))[0]
            if nbytes % 8:
                raise ValueError("LoD level size is not a multiple of 8")
            lod.append([int(v) for v in np.frombuffer(take(nbytes), "<u8")])
        if _U32.unpack(take(4))[0] != 0:
            raise ValueError("tensor version is not 0")
        desc_size = _I32.unpack(take(4))[0]
        data_type, dims = _tensor_desc(take(desc_size))
        dtype = dtypes.from_enum(data_type)
        if any(d < 0 for d in dims):
            raise ValueError(f"negative dims {dims}")
        start = f.tell()
    nbytes = int(np.prod(dims, dtype=np.int64)) * dtypes.to_numpy(dtype).itemsize
    if start + nbytes > size:
        raise ValueError(f"truncated tensor file: the data needs {nbytes} bytes, {size - start} are left")
    return dtype, tuple(dims), lod, start


def _read_elements(path: str, header, first: int, count: int) -> np.ndarray:
    dtype, _, _, start = header
    np_dtype = dtypes.to_numpy(dtype).newbyteorder("<")
    with open(path, "rb") as f:
        f.seek(start + first * np_dtype.itemsize)
        raw = f.read(count * np_dtype.itemsize)
    if len(raw) != count * np_dtype.itemsize:
        raise ValueError(f"{path}: the file shrank while it was read")
    return np.frombuffer(raw, np_dtype).astype(dtypes.to_numpy(dtype))


def _load_shape(ctx: InferShapeContext) -> None:
    # The file is read when the step is traced; the declared variable stays as the layer made it.
    path = ctx.attr("file_path")
    ctx.check(isinstance(path, str) and bool(path), "load needs a file_path")


@op("load", inputs="", outputs="Out",
    attrs={"file_path": "", "load_as_fp16": False, "seek": Attr("long", -1), "shape": Attr("longs", [])},
    infer_shape=_load_shape, grad=None, effect=True)
def load(ctx):
    """Out = the tensor saved in ``file_path`` (Paddle's ``save`` / ``save_vars`` layout), with its
    LoD; ``load_as_fp16`` casts it to float16; ``seek`` ≥ 0 reads ``shape`` elements from element
    ``seek`` on (Paddle 2.x's partial load). The header is read while tracing (it fixes the shape),
    the data on every run (a host callback), which fails if the header changed meanwhile."""
    path = ctx.attr("file_path")
    try:
        header = read_tensor_header(path)
    except (OSError, ValueError) as exc:
        _fail(ctx, f"cannot read the tensor in {path!r}: {exc}")
    dtype, shape, lod, _ = header
    seek = int(ctx.attr("seek"))
    if seek >= 0:
        shape_attr = tuple(int(d) for d in ctx.attr("shape") or ())
        count = int(np.prod(shape_attr, dtype=np.int64))
        if not shape_attr or seek + count > int(np.prod(shape, dtype=np.int64)):
            _fail(ctx, f"seek={seek} with shape={list(shape_attr)} reaches past the {list(shape)} tensor in {path!r}")
        out_shape, first, lod = shape_attr, seek, []
    else:
        out_shape, first, count = shape, 0, int(np.prod(shape, dtype=np.int64))
    out_dtype = "float16" if ctx.attr("load_as_fp16") else dtype
    var = ctx.out_var("Out")
    if var is not None and var.dtype and dtypes.normalize(var.dtype) != out_dtype:
        _fail(ctx, f"{path!r} holds a {dtype} tensor{' (loaded as float16)' if out_dtype != dtype else ''}; "
                   f"the variable {var.name!r} is {var.dtype}")
    if var is not None and var.shape and (len(var.shape) != len(out_shape) or any(
            d >= 0 and d != s for d, s in zip(var.shape, out_shape))):
        _fail(ctx, f"{path!r} holds a tensor of shape {list(out_shape)}; the variable {var.name!r} is {list(var.shape)}")
    np_dtype = dtypes.to_numpy(dtype)

    def read():
        try:
            now = read_tensor_header(path)
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"op 'load': cannot read the tensor in {path!r}: {exc}") from None
        if now[:3] != header[:3]:
            raise RuntimeError(f"op 'load': {path!r} changed since the step was compiled "
                               f"({now[0]} {list(now[1])} → was {dtype} {list(shape)}); build a new program")
        return _read_elements(path, now, first, count).reshape(out_shape)

    data = jax.pure_callback(read, jax.ShapeDtypeStruct(out_shape, np_dtype))
    if out_dtype != dtype:
        data = data.astype(jnp.float16)
    if not lod:
        return {"Out": data}
    rows = out_shape[0]
    padded = bucket(rows)
    if padded != rows:
        data = jnp.concatenate([data, jnp.zeros((padded - rows,) + tuple(out_shape[1:]), data.dtype)])
    offsets = []
    for level, level_offsets in enumerate(lod):
        arr = np.asarray(level_offsets, np.int32)
        if level > 0 and bucket(len(arr) - 1) != len(arr) - 1:
            arr = np.concatenate([arr, np.full(bucket(len(arr) - 1) - (len(arr) - 1), arr[-1], np.int32)])
        offsets.append(jnp.asarray(arr))
    return {"Out": LoDValue(data, tuple(offsets))}
