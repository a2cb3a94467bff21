"""Neural-network ops: matrix products (mul, matmul, matmul_v2), softmax and log_softmax,
cross_entropy, dropout, embeddings (lookup_table), prelu, cos_sim."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext, same_as
from ..checks import IndexInput, bound_checked, check_count, index_inputs
from ..lower import row_statistics
from ..context import make_key
from ._shapes import dims_equal, prod


def _mul_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    xn, yn = ctx.attr("x_num_col_dims"), ctx.attr("y_num_col_dims")
    ctx.check(0 < xn < x.ndim + 1 and 0 < yn < y.ndim + 1,
              f"x_num_col_dims={xn} / y_num_col_dims={yn} do not fit ranks {x.ndim} and {y.ndim}")
    k_x, k_y = prod(x.shape[xn:]), prod(y.shape[:yn])
    ctx.check(dims_equal(k_x, k_y), f"X flattens to [*, {k_x}] but Y to [{k_y}, *]: inner sizes differ")
    ctx.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}")
    ctx.set_output("Out", x.shape[:xn] + y.shape[yn:], x.dtype, x.lod_level)


@op("mul", inputs="X Y", outputs="Out", attrs={"x_num_col_dims": 1, "y_num_col_dims": 1},
    infer_shape=_mul_shape)
def mul(ctx):
    """Out = X·Y with X flattened to 2-D at ``x_num_col_dims`` and Y at ``y_num_col_dims``."""
    x, y = ctx.input("X"), ctx.input("Y")
    xn, yn = ctx.attr("x_num_col_dims"), ctx.attr("y_num_col_dims")
    x2 = x.reshape(_flat(x.shape, xn))
    y2 = y.reshape(_flat(y.shape, yn))
    return {"Out": (x2 @ y2).reshape(tuple(x.shape[:xn]) + tuple(y.shape[yn:]))}


def _flat(shape, n):
    rows, cols = 1, 1
    for d in shape[:n]:
        rows = rows * d
    for d in shape[n:]:
        cols = cols * d
    return (rows, cols)


@op("softmax", inputs="X", outputs="Out", attrs={"axis": -1}, infer_shape=same_as("X"))
def softmax(ctx):
    """exp(X) / sum(exp(X)) along ``axis``."""
    return {"Out": jax.nn.softmax(ctx.input("X"), axis=ctx.attr("axis"))}


def _cross_entropy_shape(ctx: InferShapeContext) -> None:
    x, label = ctx.input("X"), ctx.input("Label")
    soft = ctx.attr("soft_label")
    # Hard labels may also come without the trailing 1 (Label rank = X rank - 1, as Paddle takes
    # them: Y then has Label's shape).
    squeezed = not soft and label.ndim == x.ndim - 1
    ctx.check(x.ndim == label.ndim or squeezed, f"X has rank {x.ndim} but Label rank {label.ndim}")
    for a, b in zip(x.shape[:-1], label.shape[:-1]):
        ctx.check(dims_equal(a, b), f"X {x.shape} and Label {label.shape} differ before the last dim")
    if soft:
        ctx.check(dims_equal(x.shape[-1], label.shape[-1]),
                  f"soft_label=True needs Label's last dim ({label.shape[-1]}) to equal the number of "
                  f"classes, X's last dim ({x.shape[-1]})")
        ctx.check(label.dtype == x.dtype, f"a soft Label must have X's dtype {x.dtype}, got {label.dtype}")
    else:
        ctx.check(squeezed or dims_equal(label.shape[-1], 1),
                  f"hard labels (soft_label=False) need Label's last dim to be 1, got {label.shape}")
        ctx.check(label.dtype in ("int64", "int32"), f"hard labels must be int64 or int32, got {label.dtype}")
    ctx.set_output("Y", x.shape[:-1] + (() if squeezed else (1,)), x.dtype, x.lod_level)


@op("cross_entropy", inputs="X Label", outputs="Y", attrs={"soft_label": False, "ignore_index": -100},
    infer_shape=_cross_entropy_shape, no_grad_inputs=["Label"])
def cross_entropy(ctx):
    """-log(X[label]) for hard labels, -sum(label * log(X)) for soft ones; X holds probabilities."""
    x, label = ctx.input("X"), ctx.input("Label")
    if ctx.attr("soft_label"):
        return {"Y": -jnp.sum(label * jnp.log(x), axis=-1, keepdims=True)}
    squeezed = label.ndim == x.ndim - 1
    index = label[..., None] if squeezed else label
    picked = jnp.take_along_axis(x, jnp.clip(index, 0, x.shape[-1] - 1).astype(jnp.int32), axis=-1)
    loss = -jnp.log(picked)
    loss = loss[..., 0] if squeezed else loss
    return {"Y": jnp.where(label == ctx.attr("ignore_index"), jnp.zeros_like(loss), loss)}


@index_inputs("cross_entropy")
def _cross_entropy_indices(attr, shape):
    return [] if attr("soft_label") else [IndexInput("Label", shape("X")[-1], attr("ignore_index"))]


# -- matrix products ------------------------------------------------------------------------------
def _matmul_dims(ctx: InferShapeContext, x, y, tx: bool, ty: bool, strict_batch: bool):
    """Output shape of a NumPy-style matmul with optional transposes of the last two dims."""
    xs, ys = list(x.shape), list(y.shape)
    ctx.check(x.ndim >= 1 and y.ndim >= 1, f"X {x.shape} and Y {y.shape} must have rank >= 1")
    ctx.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}")
    if x.ndim >= 2 and tx:
        xs[-1], xs[-2] = xs[-2], xs[-1]
    if y.ndim >= 2 and ty:
        ys[-1], ys[-2] = ys[-2], ys[-1]
    x_vec, y_vec = x.ndim == 1, y.ndim == 1
    if x_vec:
        xs = [1] + xs
    if y_vec:
        ys = ys + [1]
    ctx.check(dims_equal(xs[-1], ys[-2]),
              f"inner dims differ: X {x.shape} (transposed={tx}) has {xs[-1]} columns but Y {y.shape} "
              f"(transposed={ty}) has {ys[-2]} rows")
    bx, by = xs[:-2], ys[:-2]
    if strict_batch and bx and by:
        ctx.check(len(bx) == len(by) and all(dims_equal(a, b) for a, b in zip(bx, by)),
                  f"batch dims of X {x.shape} and Y {y.shape} must be equal (matmul v1 does not broadcast)")
    n = max(len(bx), len(by))
    bx, by = [1] * (n - len(bx)) + bx, [1] * (n - len(by)) + by
    batch = []
    for a, b in zip(bx, by):
        if a == 1:
            batch.append(b)
        elif b == 1:
            batch.append(a)
        else:
            ctx.check(dims_equal(a, b), f"batch dims of X {x.shape} and Y {y.shape} do not broadcast")
            batch.append(a if a >= 0 else b)
    out = batch + ([] if x_vec else [xs[-2]]) + ([] if y_vec else [ys[-1]])
    return tuple(out)


def _matmul(x, y, tx: bool, ty: bool):
    if x.ndim >= 2 and tx:
        x = jnp.swapaxes(x, -1, -2)
    if y.ndim >= 2 and ty:
        y = jnp.swapaxes(y, -1, -2)
    return jnp.matmul(x, y)


def _matmul_v1_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    ctx.check(ctx.attr("head_number") in (None, 1), "head_number > 1 is not supported")
    out = _matmul_dims(ctx, x, y, ctx.attr("transpose_X"), ctx.attr("transpose_Y"), strict_batch=True)
    ctx.set_output("Out", out, x.dtype, x.lod_level)


@op("matmul", inputs="X Y", outputs="Out",
    attrs={"transpose_X": False, "transpose_Y": False, "alpha": 1.0, "head_number": 1},
    infer_shape=_matmul_v1_shape)
def matmul(ctx):
    """Out = alpha · op(X) · op(Y), op transposing the last two dims when asked; 1-D operands are
    vectors (their dim is dropped from the result), leading dims are batch dims."""
    x, y = ctx.input("X"), ctx.input("Y")
    out = _matmul(x, y, ctx.attr("transpose_X"), ctx.attr("transpose_Y"))
    alpha = ctx.attr("alpha")
    if alpha != 1.0:
        out = out * jnp.asarray(alpha, out.dtype)
    return {"Out": out}


def _matmul_v2_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    out = _matmul_dims(ctx, x, y, ctx.attr("trans_x"), ctx.attr("trans_y"), strict_batch=False)
    ctx.set_output("Out", out, x.dtype, x.lod_level)


@op("matmul_v2", inputs="X Y", outputs="Out", attrs={"trans_x": False, "trans_y": False},
    infer_shape=_matmul_v2_shape)
def matmul_v2(ctx):
    """NumPy's matmul (batch dims broadcast, 1-D operands are vectors), with optional transposes."""
    return {"Out": _matmul(ctx.input("X"), ctx.input("Y"), ctx.attr("trans_x"), ctx.attr("trans_y"))}


@op("log_softmax", inputs="X", outputs="Out", attrs={"axis": -1}, infer_shape=same_as("X"))
def log_softmax(ctx):
    """log(softmax(X)) along ``axis``, computed stably."""
    return {"Out": jax.nn.log_softmax(ctx.input("X"), axis=ctx.attr("axis"))}


# -- dropout ----------------------------------------------------------------------------------------
def _dropout_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    p = ctx.attr("dropout_prob")
    ctx.check(0.0 <= p <= 1.0, f"dropout_prob must be in [0, 1], got {p}")
    impl = ctx.attr("dropout_implementation")
    ctx.check(impl in ("downgrade_in_infer", "upscale_in_train"),
              f"dropout_implementation must be 'downgrade_in_infer' or 'upscale_in_train', got {impl!r}")
    ctx.set_output("Out", x.shape, x.dtype, x.lod_level)
    ctx.set_output("Mask", x.shape, "uint8", x.lod_level)


# Paddle 2.6 keeps `fix_seed` and `seed` out of dropout's OpProto (they are "extra" attributes);
# programs still carry them when a seed is given, and the rule reads them from there.
_DROPOUT_ATTRS = {"dropout_prob": 0.5, "is_test": False, "dropout_implementation": "downgrade_in_infer"}


@op("dropout", inputs="X Seed?", outputs="Out Mask", attrs=_DROPOUT_ATTRS, infer_shape=_dropout_shape,
    no_grad_inputs=["Seed"], random=True, grad="custom")
def dropout(ctx):
    """Zero each element with probability ``dropout_prob``; ``Mask`` (uint8) marks the kept ones.

    ``downgrade_in_infer``: training keeps X·mask, inference scales by (1 - p).
    ``upscale_in_train``: training keeps X·mask / (1 - p), inference passes X through.
    A ``Seed`` input, or the (extra) attributes ``fix_seed`` with a non-zero ``seed``, make the mask
    reproducible; otherwise it comes from the Executor's key (the program's ``random_seed``).
    """
    x = ctx.input("X")
    p = float(ctx.attr("dropout_prob"))
    upscale = ctx.attr("dropout_implementation") == "upscale_in_train"
    if ctx.attr("is_test"):
        out = x if upscale else x * jnp.asarray(1.0 - p, x.dtype)
        return {"Out": out, "Mask": jnp.ones(x.shape, jnp.uint8)}
    seed_tensor = ctx.input("Seed")
    if seed_tensor is not None:
        key = make_key(seed_tensor.reshape(-1)[0])
    elif ctx.attr("fix_seed", False) and ctx.attr("seed", 0):
        key = make_key(int(ctx.attr("seed", 0)))
    else:
        key = ctx.rng()
    keep = jax.random.uniform(key, x.shape) >= p
    mask = keep.astype(jnp.uint8)
    return {"Out": _dropout_apply(x, mask, p, upscale), "Mask": mask}


def _dropout_apply(x, mask, p: float, upscale: bool):
    kept = x * mask.astype(x.dtype)
    if upscale:
        return kept * jnp.asarray(1.0 / (1.0 - p), x.dtype) if p < 1.0 else jnp.zeros_like(x)
    return kept


def _dropout_grad_shape(ctx: InferShapeContext) -> None:
    g = ctx.input("Out@GRAD")
    ctx.set_output("X@GRAD", g.shape, g.dtype, g.lod_level)


@op("dropout_grad", inputs="Mask Out@GRAD", outputs="X@GRAD", attrs=_DROPOUT_ATTRS,
    infer_shape=_dropout_grad_shape, grad=None)
def dropout_grad(ctx):
    """X@GRAD from the forward pass's saved Mask (the same elements are dropped and scaled)."""
    g = ctx.input("Out@GRAD")
    p = float(ctx.attr("dropout_prob"))
    upscale = ctx.attr("dropout_implementation") == "upscale_in_train"
    if ctx.attr("is_test"):
        return {"X@GRAD": g if upscale else g * jnp.asarray(1.0 - p, g.dtype)}
    return {"X@GRAD": _dropout_apply(g, ctx.input("Mask"), p, upscale)}


# -- embeddings ---------------------------------------------------------------------------------------
def _lookup(w, ids, padding_idx: int):
    ids = ids.astype(jnp.int32) if ids.dtype != jnp.int32 else ids
    out = jnp.take(w, ids, axis=0, mode="clip")
    if padding_idx != -1:
        pad = padding_idx if padding_idx >= 0 else padding_idx + w.shape[0]
        out = jnp.where((ids == pad)[..., None], jnp.zeros((), w.dtype), out)
    return out


def _check_table(ctx: InferShapeContext, w, ids) -> None:
    ctx.check(w.ndim == 2, f"W must be a 2-D table [vocabulary, width], got {w.shape}")
    ctx.check(ids.dtype in ("int64", "int32"), f"Ids must be int64 or int32, got {ids.dtype}")


def _lookup_table_shape(ctx: InferShapeContext) -> None:
    w, ids = ctx.input("W"), ctx.input("Ids")
    _check_table(ctx, w, ids)
    ctx.check(ids.ndim >= 1 and dims_equal(ids.shape[-1], 1),
              f"lookup_table needs Ids with a trailing dim of 1, got {ids.shape}")
    ctx.set_output("Out", ids.shape[:-1] + (w.shape[1],), w.dtype, ids.lod_level)


@op("lookup_table", inputs="W Ids", outputs="Out",
    attrs={"is_sparse": False, "is_distributed": False, "padding_idx": Attr("long", -1),
           "remote_prefetch": False, "entry_config": "", "is_test": False, "entry": "none",
           "table_class": "none", "table_names": Attr("strings", []), "trainer_id": 0,
           "grad_inplace": False, "epmap": Attr("strings", []), "height_sections": Attr("longs", [])},
    infer_shape=_lookup_table_shape, no_grad_inputs=["Ids"])
def lookup_table(ctx):
    """Rows of W picked by Ids ([..., 1]); rows for ``padding_idx`` (-1: none) are zeros.

    The gradient of W is dense (``is_sparse`` is accepted but SelectedRows are not produced)."""
    ids = ctx.input("Ids")
    return {"Out": _lookup(ctx.input("W"), ids.reshape(ids.shape[:-1]), ctx.attr("padding_idx"))}


def _lookup_table_v2_shape(ctx: InferShapeContext) -> None:
    w, ids = ctx.input("W"), ctx.input("Ids")
    _check_table(ctx, w, ids)
    ctx.set_output("Out", ids.shape + (w.shape[1],), w.dtype, ids.lod_level)


@op("lookup_table_v2", inputs="Ids W", outputs="Out", attrs={"padding_idx": Attr("long", -1)},
    infer_shape=_lookup_table_v2_shape, no_grad_inputs=["Ids"])
def lookup_table_v2(ctx):
    """Rows of W picked by Ids (any shape; Out is Ids.shape + [width]); ``padding_idx`` rows are zeros."""
    return {"Out": _lookup(ctx.input("W"), ctx.input("Ids"), ctx.attr("padding_idx"))}


@index_inputs("lookup_table")
@index_inputs("lookup_table_v2")
def _lookup_indices(attr, shape):
    return [IndexInput("Ids", shape("W")[0])]


# -- prelu, cos_sim ---------------------------------------------------------------------------------------
def _prelu_shape(ctx: InferShapeContext) -> None:
    x, alpha = ctx.input("X"), ctx.input("Alpha")
    mode, fmt = ctx.attr("mode"), ctx.attr("data_format")
    ctx.check(mode in ("all", "channel", "element"), f"mode must be 'all', 'channel' or 'element', got {mode!r}")
    n = prod(alpha.shape)
    if mode == "all":
        ctx.check(dims_equal(n, 1), f"mode='all' needs a single Alpha, got shape {alpha.shape}")
    elif mode == "channel":
        ctx.check(x.ndim >= 2, f"mode='channel' needs X of rank >= 2, got {x.shape}")
        c = x.shape[-1] if fmt in ("NHWC", "NDHWC", "NLC") else x.shape[1]
        ctx.check(dims_equal(n, c), f"mode='channel' needs one Alpha per channel ({c}), got shape {alpha.shape}")
    else:
        ctx.check(alpha.ndim == x.ndim, f"mode='element' needs Alpha of X's rank {x.ndim}, got {alpha.shape}")
        ctx.check(dims_equal(n, prod(x.shape[1:])),
                  f"mode='element' needs one Alpha per element of an example ({x.shape[1:]}), got {alpha.shape}")
    ctx.set_output("Out", x.shape, x.dtype, x.lod_level)


@op("prelu", inputs="X Alpha", outputs="Out", attrs={"data_format": "NCHW", "mode": "all"},
    infer_shape=_prelu_shape)
def prelu(ctx):
    """X where X > 0, Alpha·X elsewhere; Alpha is one value (``all``), one per channel (``channel``)
    or one per element of an example (``element``)."""
    x, alpha = ctx.input("X"), ctx.input("Alpha")
    mode = ctx.attr("mode")
    if mode == "all":
        a = alpha.reshape(())
    elif mode == "channel":
        if ctx.attr("data_format") in ("NHWC", "NDHWC", "NLC"):
            a = alpha.reshape((x.shape[-1],))
        else:
            a = alpha.reshape((1, x.shape[1]) + (1,) * (x.ndim - 2))
    else:
        a = alpha.reshape((1,) + tuple(x.shape[1:]))
    return {"Out": jnp.where(x > 0, x, a.astype(x.dtype) * x)}


row_statistics("cos_sim")   # a sequence input's real rows: ctx.real_rows (see cos_sim)


def _sequence_input(op) -> bool:
    """Whether X or Y of ``op`` is declared a sequence (its rows may be padded: cos_sim checks them)."""
    found = (op.block.find_var(n) for slot in ("X", "Y") for n in op.inputs.get(slot, ()))
    return any(v is not None and v.lod_level for v in found)


bound_checked("cos_sim", _sequence_input)


def _cos_sim_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    ctx.check(x.ndim >= 2 and x.ndim == y.ndim, f"X {x.shape} and Y {y.shape} need the same rank >= 2")
    ctx.check(all(dims_equal(a, b) for a, b in zip(x.shape[1:], y.shape[1:])),
              f"X {x.shape} and Y {y.shape} differ after the first dim")
    ctx.check(dims_equal(y.shape[0], 1) or dims_equal(x.shape[0], y.shape[0]),
              f"Y's first dim must be 1 or X's ({x.shape[0]}), got {y.shape[0]}")
    ctx.set_output("Out", (x.shape[0], 1), x.dtype, x.lod_level)
    ctx.set_output("XNorm", (x.shape[0], 1), x.dtype, x.lod_level)
    ctx.set_output("YNorm", (y.shape[0], 1), y.dtype, y.lod_level)


@op("cos_sim", inputs="X Y", outputs="Out XNorm YNorm", infer_shape=_cos_sim_shape,
    no_grad_outputs=["XNorm", "YNorm"])
def cos_sim(ctx):
    """Cosine similarity of each row of X with the row of Y (or Y's single row): [N, 1].

    X (or Y) may be a sequence's rows, padded to a bucket, next to a plain Y (X) of one row per
    real row (TagSpace: a tag's embedding against the pooled text, one row per sequence): Paddle
    pairs the real rows, so the padded one is cut to the plain one's rows, and the step checks
    that its real row count is that (a BoundExceededError otherwise, where Paddle refuses the
    shapes). Out has the real rows; the cut rows get no gradient."""
    x, y = ctx.input("X"), ctx.input("Y")
    if ctx.real_rows is not None and x.shape[0] != y.shape[0] and min(x.shape[0], y.shape[0]) > 1:
        slot, rows = ("X", y.shape[0]) if x.shape[0] > y.shape[0] else ("Y", x.shape[0])
        if not ctx.op.type.endswith("_grad"):
            check_count(ctx.checks, ctx.op, ctx.env, ctx.op.inputs[slot][0], ctx.real_rows == rows, ctx.real_rows,
                        f"cos_sim pairs the {rows} rows of {'Y' if slot == 'X' else 'X'} with the real rows of "
                        f"the sequence {slot}, which need to be {rows}")
        x, y = (x[:rows], y) if slot == "X" else (x, y[:rows])
    x2 = x.reshape((x.shape[0], -1))
    y2 = y.reshape((y.shape[0], -1))
    xx = jnp.sum(x2 * x2, axis=1, keepdims=True)
    yy = jnp.sum(y2 * y2, axis=1, keepdims=True)
    real = None
    if ctx.real_rows is not None:
        # a sequence's padding rows are zeros: their 0/0 (and sqrt'(0) in the gradient) must not
        # become a NaN that a later masked sum (x * 0) or max carries into real results: padding
        # rows give 0 and no gradient
        real = (jnp.arange(xx.shape[0]) < ctx.real_rows)[:, None]
        one = jnp.ones((), xx.dtype)
        xx = jnp.where(real, xx, one)
        yy = jnp.where(real, yy, one) if yy.shape[0] == xx.shape[0] else yy
    xn, yn = jnp.sqrt(xx), jnp.sqrt(yy)
    out = jnp.sum(x2 * y2, axis=1, keepdims=True) / (xn * yn)
    if real is not None:
        out = jnp.where(real, out, jnp.zeros((), out.dtype))
    return {"Out": out, "XNorm": xn, "YNorm": yn}
