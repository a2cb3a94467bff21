"""Lowering: a block's ops, in order, become one pure JAX function.

``run_ops(ops, env, rng_key)`` evaluates the JAX rule of each op on the values in ``env`` (a
dict name → array) and stores its outputs back. Called inside ``jax.jit`` it traces the whole
block into one XLA computation: intermediates live only there.

Also here, because they need JAX: the generic rule of every ``<type>_grad`` op (``jax.vjp`` of
the forward rule) and the shape rule derived by abstract evaluation for ops that declare none.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Iterable, Mapping, MutableMapping

import jax
import jax.numpy as jnp
import numpy as np

from ..ir import dtypes, registry, shape
from ..ir.errors import DataDependentShapeError, OpRuntimeError, ProgramFormatError, ShapeError
from ..ir.names import RECOMPUTE_SEGMENT_ATTR
from ..ir.program import EMPTY_VAR_NAME
from .checks import StepChecks, check_count, count_origin
from . import paddle_grads, remat
from .lod_value import LoDValue
from .context import ComputeContext, make_key

GRAD_SUFFIX = "@GRAD"


def _values(op, env: MutableMapping[str, Any]) -> dict[str, list]:
    out = {}
    for slot, names in op.inputs.items():
        try:
            out[slot] = [None if n == EMPTY_VAR_NAME else env[n] for n in names]
        except KeyError as exc:
            if _unwritten_array(op, exc.args[0]):      # an array nothing wrote yet: empty (None)
                out[slot] = [None if n == EMPTY_VAR_NAME or _unwritten_array(op, n) and n not in env else env[n]
                             for n in names]
                continue
            raise OpRuntimeError(
                f"op {op.type!r} at {op.location}: input {slot}={exc.args[0]!r} has no value "
                "(not fed, not computed by an earlier op, and not in the scope)") from None
    return out


def _unwritten_array(op, name: str) -> bool:
    var = op.block.find_var(name)
    return var is not None and var.type == dtypes.LOD_TENSOR_ARRAY


def run_op(op, env: MutableMapping[str, Any], rng: Callable[[], jax.Array] | None,
           lower_block: Callable | None = None, checks: StepChecks | None = None) -> None:
    """Evaluate one op's JAX rule on ``env`` and write its outputs into ``env``.

    ``checks``, when given, collects the op's run-time checks: its index inputs in range and,
    under ``FLAGS_check_nan_inf``, every floating-point output finite.
    """
    opdef = registry.get(op.type)
    compute = opdef.compute if opdef.forward_type is None else auto_grad_compute
    if compute is None:
        raise OpRuntimeError(f"op {op.type!r} has no JAX rule")
    values = _values(op, env)
    lod_source = _first_lod(values)
    counted = keep = lod_rows = tables = None
    as_counted = {}
    if lod_source is not None and op.type not in LOD_AWARE:
        values, as_counted = _lod_as_counted(opdef, op, values)
        counted, keep, tables = _count_rule(opdef, op, values, env, checks, as_counted)
        lod_rows = max(v.data.shape[0] for vs in values.values() for v in vs if v.__class__ is LoDValue)
    plain_rows = None
    given = values
    if lod_source is not None and op.type not in LOD_AWARE:
        values, plain_rows = _strip_lod(op, values, keep)
    if checks is not None:                # on the padded rows of LoD ids (padding rows hold 0)
        checks.check_indices(op, values)
        if tables and checks.index:
            _check_table_reads(op, given, values, tables, checks, env)
    ctx = ComputeContext(opdef, op, values, op.attrs, rng, lower_block=lower_block or lower_sub_block, env=env,
                         checks=checks)
    if lod_source is not None and op.type in ROW_STATISTICS:
        ctx.real_rows = lod_source.row_count()      # statistics over the real rows only
    try:
        if _foldable(opdef, op, values):
            # Shape arithmetic on concrete values (shape -> slice -> concat -> ...) stays concrete,
            # so the ops whose output shape it sets (reshape2, fill_constant, range, *_interp_v2,
            # linspace) can read it: XLA needs those shapes while tracing.
            with jax.ensure_compile_time_eval():
                outs = compute(ctx)
        else:
            outs = compute(ctx)
    except (OpRuntimeError, ShapeError, ProgramFormatError):
        raise
    except Exception as exc:
        raise OpRuntimeError(f"op {op.type!r} created at {op.location} failed: "
                             f"{type(exc).__name__}: {exc}") from exc
    for slot, value in outs.items():
        names = op.outputs.get(slot) or []
        values = value if isinstance(value, (list, tuple)) else [value]
        for i, (name, v) in enumerate(zip(names, values)):
            if v is not None and name != EMPTY_VAR_NAME:
                if (as_counted and v.__class__ is LoDValue and _declared_lod(op, name)
                        and _lod_back(as_counted, slot, i, v.data.shape[0]) is not None):
                    # a LoD input taken as counted rows, its rows kept: its LoD again
                    v = LoDValue(v.data, _lod_back(as_counted, slot, i, v.data.shape[0]).offsets)
                elif (lod_source is not None and v.__class__ is not LoDValue and getattr(v, "ndim", 0)
                        and v.shape[0] >= lod_source.data.shape[0] and _declared_lod(op, name)):
                    if (lod_rows is not None and v.shape[0] > lod_rows and opdef.forward_type is None
                            and not op.type.endswith("_grad")):
                        raise _grown_refusal(op, slot, name, v.shape[0], lod_rows)
                    v = LoDValue(v, lod_source.offsets)      # the output shares its input's LoD
                elif (counted is not None and v.__class__ is not LoDValue and getattr(v, "ndim", 0)
                        and v.shape[0] in (counted.data.shape[0], lod_rows)
                        and _counted_grad_or_output(opdef, op, given, slot, i)):
                    v = LoDValue(v, counted.offsets)         # row by row: keep the real row count
                elif (plain_rows is not None and v.__class__ is not LoDValue and getattr(v, "ndim", 0)
                        and v.shape[0] == plain_rows[1] and not _declared_lod(op, name)):
                    # a plain result of the padded rows: its real count is the plain input's
                    # (a count known while tracing: kept concrete, so shape() of it folds)
                    with jax.ensure_compile_time_eval():
                        v = LoDValue(v, (jnp.asarray([0, plain_rows[0]], jnp.int32),))
                elif (slot in PLAIN_ROW_OUTPUTS.get(op.type, ()) and lod_source is not None
                        and v.__class__ is not LoDValue and getattr(v, "ndim", 0)
                        and v.shape[0] == lod_source.data.shape[0] and not _declared_lod(op, name)):
                    # Plain rows, one per row of a LoD input (an op that shares no LoD, gru_unit):
                    # their real count is the input's, kept as a counted value of one sequence.
                    v = LoDValue(v, (jnp.stack([jnp.zeros((), jnp.int32),
                                                lod_source.row_count().astype(jnp.int32)]),))
                elif getattr(v, "shape", None) == () and _declared_one(op, name):
                    v = jnp.reshape(v, (1,))     # a Fluid 1.x result declared [1] (shape.one_element_shape)
                env[name] = v
                if checks is not None and checks.nan_inf and _differentiable(v):
                    checks.check_finite(op, slot, name, v)


# The most elements an op's inputs (or, for an op without inputs, its outputs) may have for it to be
# evaluated while tracing: shape tensors and small constants, never real data.
_FOLD_LIMIT = 4096


def _foldable(opdef, op, values) -> bool:
    """Whether ``op`` computes on small concrete values only (see run_op)."""
    if opdef.random or opdef.host or opdef.effect or opdef.forward_type is not None:
        return False
    given = [v for vs in values.values() for v in vs if v is not None]
    if given:
        return all(isinstance(v, (np.ndarray, jax.Array)) and not isinstance(v, jax.core.Tracer)
                   and v.size <= _FOLD_LIMIT for v in given)
    outs = [op.block.find_var(n) for names in op.outputs.values() for n in names]
    return bool(outs) and all(v is not None and all(d >= 0 for d in v.shape) and int(np.prod(v.shape)) <= _FOLD_LIMIT
                              for v in outs)


# Op types whose JAX rules take LoDValue inputs themselves (sequence ops, LoD-aware reductions);
# every other op sees the padded rows of a LoD input as a plain array.
LOD_AWARE: set[str] = set()


# Op type -> its output slots that hold one plain row per row of its inputs (ops that share no LoD,
# such as gru_unit): from a LoD input they keep the real row count (see run_op).
PLAIN_ROW_OUTPUTS: dict[str, frozenset] = {}


def plain_row_outputs(op_type: str, *slots: str) -> None:
    """Declare that ``slots`` of ``op_type`` are plain rows, one per row of its (LoD) inputs."""
    PLAIN_ROW_OUTPUTS[op_type] = frozenset(slots)


# Op types whose statistics run over the rows (batch_norm): on a LoD input their rule sees the padded
# rows and ``ctx.real_rows``, the real row count, and computes its statistics over those rows only.
ROW_STATISTICS: set[str] = set()


def row_statistics(*types: str) -> None:
    """Declare that the rules of ``types`` (and of their ``_grad`` ops) take a LoD input's rows with
    ``ctx.real_rows`` set (masked statistics), instead of refusing it as mixing padding rows."""
    for t in types:
        ROW_STATISTICS.update((t, t + "_grad"))


def lod_aware(*types: str) -> None:
    """Declare that the JAX rules of ``types`` (and of their ``_grad`` ops) take LoDValue inputs."""
    for t in types:
        LOD_AWARE.update((t, t + "_grad"))


# Ops that mix rows: on a LoD input they would let padding rows into their result.
_ROW_MIXING = frozenset({"batch_norm", "sync_batch_norm", "instance_norm", "group_norm", "accuracy"})
# (reduce_sum/mean/max/min/prod reduce the real rows of a LoD value: ops/reduce.py)
_REDUCTIONS = frozenset({"arg_max", "arg_min"})
# Ops that cut or reorder along an axis (attribute, default): along the rows of a padded LoD value
# they would cut through its padding or move it before real rows (a fetch keeps the first rows).
_ALONG_AXIS = {"split": ("axis", 0), "unstack": ("axis", 0), "unbind": ("axis", 0), "flip": ("axis", None),
               "roll": ("axis", None), "reverse": ("axis", None)}


def _first_lod(values: dict) -> LoDValue | None:
    for vals in values.values():
        for v in vals:
            if v.__class__ is LoDValue:
                return v
    return None


def _mixes_rows(op, value) -> bool:
    if op.type in ROW_STATISTICS:
        return False
    if op.type in _ROW_MIXING:
        return True
    if op.type in _ALONG_AXIS:
        attr, default = _ALONG_AXIS[op.type]
        dims = op.attrs.get(attr, default)
        dims = dims if isinstance(dims, (list, tuple)) else [dims]
        ndim = max(len(value.shape), 1)
        return (not dims or None in dims or "AxisTensor" in op.inputs and any(op.inputs["AxisTensor"])
                or any(int(d) % ndim == 0 for d in dims))
    if op.type in _REDUCTIONS:
        ndim = len(value.shape)
        dims = op.attrs.get("dim", op.attrs.get("axis", [0]))
        dims = dims if isinstance(dims, (list, tuple)) else [dims]
        return bool(op.attrs.get("reduce_all") or op.attrs.get("flatten") or not dims
                    or any(int(d) % max(ndim, 1) == 0 for d in dims))
    return False


# Ops whose inputs are rows of the same sequences (a plain input among LoD ones has the real rows
# only, and is padded to theirs), and their gradients: op type -> None (inputs with the LoD
# input's row shape) or the slots that are not rows (weights).
_ROW_ALIGNED: dict[str, frozenset | None] = {
    t + g: None for t in ("sum", "elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div",
                          "elementwise_max", "elementwise_min") for g in ("", "_grad")}
# comparisons take rows as the arithmetic does (TagSpace: less_than(cos_neg, cos_pos)); no gradient
_ROW_ALIGNED.update({t: None for t in ("less_than", "less_equal", "greater_than", "greater_equal", "equal",
                                       "not_equal")})
_ROW_ALIGNED.update({"gru_unit": frozenset({"Weight", "Bias"}), "lstm_unit": frozenset(),
                     "gru_unit_grad": frozenset({"Weight", "Bias", "Weight@GRAD", "Bias@GRAD"}),
                     "lstm_unit_grad": frozenset()})


def _strip_lod(op, values: dict, keep: frozenset | None = None) -> tuple[dict, tuple[int, int] | None]:
    """The op's inputs with LoD values replaced by their padded rows, and, when plain inputs of a
    row-aligned op were padded to match, (their row count, the padded row count) — so a plain
    output keeps the plain input's real row count (a counted value of one sequence).

    LoD inputs padded to different row counts (a LoD value made by an op, say, next to a fed one
    with the same LoD) are padded to the longest: rows past the real ones are padding in all. A
    plain input of ``sum`` / ``elementwise_*`` with the same rows as a LoD one (``fc`` of a list
    mixing a sequence and a dense value with one row per element) holds only the real rows: it
    is zero-padded to the LoD rows. Counted values at the positions ``keep`` (slot, index) stay
    LoDValues: the op's rule honours their count (see :func:`_count_rule`).
    """
    lods = [v for vals in values.values() for v in vals if v.__class__ is LoDValue]
    rows = max(v.data.shape[0] for v in lods)
    if any(v.data.shape[0] != rows for v in lods):
        values = {slot: [_pad_rows(v, rows) if v.__class__ is LoDValue else v for v in vals]
                  for slot, vals in values.items()}
    plain_rows = None
    if op.type in _ROW_ALIGNED:
        not_rows, tail = _ROW_ALIGNED[op.type], tuple(lods[0].data.shape[1:])

        def rows_of(slot, v):          # a plain input holding rows, shorter than the padded ones
            if v is None or v.__class__ is LoDValue or getattr(v, "ndim", 0) < 1 or not 1 < v.shape[0] < rows:
                return False
            if not_rows is None:
                return v.ndim == len(tail) + 1 and tuple(v.shape[1:]) == tail
            return slot not in not_rows and v.ndim >= 2

        short = {v.shape[0] for slot, vals in values.items() for v in vals if rows_of(slot, v)}
        if len(short) == 1:
            plain_rows = (short.pop(), rows)
            values = {slot: [_pad_rows(LoDValue(v, ()), rows).data if rows_of(slot, v) else v for v in vals]
                      for slot, vals in values.items()}
    out = dict(values)
    for slot, vals in values.items():
        if any(v.__class__ is LoDValue for v in vals):
            if any(v.__class__ is LoDValue and _mixes_rows(op, v) for v in vals):
                raise OpRuntimeError(
                    f"op {op.type!r} at {op.location}: input {slot} is a LoD (variable-length) value, and "
                    f"{op.type!r} would mix its padding rows into the result; pool the sequences first "
                    "(layer.sequence_pool) or reduce along other dimensions")
            out[slot] = [v.data if v.__class__ is LoDValue and not (keep and (slot, i) in keep) else v
                         for i, v in enumerate(vals)]
    return out, plain_rows


def _pad_rows(value: LoDValue, rows: int) -> LoDValue:
    extra = rows - value.data.shape[0]
    if extra == 0:
        return value
    pad = jnp.zeros((extra,) + tuple(value.data.shape[1:]), value.data.dtype)
    return LoDValue(jnp.concatenate([value.data, pad]), value.offsets)


# Ops that take a LoD value as it is rather than as counted rows (lower._lod_as_counted): those
# passing a whole value on (paddle.static.nn.cond's select_input/select_output); shape and size,
# which give the padded rows, static, so that shape arithmetic on them folds (fill_constant(
# [shape(x)[0], 1]) pairs with x's padded rows; a fetched shape() of a LoD value shows its bucket).
_PASSES_WHOLE = frozenset({"select_input", "select_output", "shape", "size"})
# Ops whose shape rules declare an output with X's LoD only when it keeps X's rows (reshape's
# ShareLoD rule): such an output takes the LoD as it is, never as counted rows.
_LOD_WHEN_ROWS_KEPT = frozenset({"reshape", "reshape2", "flatten_contiguous_range", "flatten2"})


def _lod_as_counted(opdef, op, values: dict) -> tuple[dict, dict]:
    """The LoD inputs that ``op`` (not LoD-aware) takes as *counted rows* — the real rows of all
    their sequences, padded to the bucket, carrying their real count (a LoDValue of one level
    ``[0, rows]``, the representation of ``docs/ops_data_dependent.md``) — and their positions.

    - An op none of whose outputs the program declares with LoD drops its inputs' LoD (Paddle's
      ShareLoD does not apply: a reshape or flatten that changes the row count, a transpose, a
      stack...): all its LoD inputs are counted rows — unless a plain input taken row by row pins
      the rows (``elementwise_add(plain, lod)``: as before) —, so the op's count roles decide
      (``registry.declare_counts``): ``"rows"`` outputs keep the real row count, ``"count"`` rules
      compute it (a reshape to more rows: ``rows * in_row_size / out_row_size``), and a slot with
      no role refuses the value (``_count_rule``) rather than let its padding rows reach a result.
    - An op that shares the LoD takes a LoD input as counted rows in a slot whose role is
      ``"count"`` only (concat along the rows, expand; not reshape, whose declared LoD already
      means the rows are kept): a result of as many padded rows as the
      input takes its LoD back (run_op); one of another row count stays counted rows (Paddle's
      ShareLoD would give it offsets that no longer cover its rows).

    ``shape``/``size`` and ops passing whole values (``_PASSES_WHOLE``) and ``plain_row_outputs``
    ops take LoD values as before. Grad ops follow their forward op: their LoD inputs in the forward's ``"count"`` slots are
    counted rows too (the same rule, recomputed), and the gradient of such an input takes its LoD
    back. Returns (the values, {(slot, index): the LoD value taken as counted rows})."""
    forward = opdef.forward_type is None and not op.type.endswith("_grad")
    if not forward and opdef.forward_type is None:
        return values, {}
    base = opdef.forward_type or op.type
    if op.type in ROW_STATISTICS or base in _PASSES_WHOLE or base in PLAIN_ROW_OUTPUTS:
        return values, {}
    lod_at = [(slot, i) for slot, vals in values.items()
              for i, (name, v) in enumerate(zip(op.inputs.get(slot, ()), vals))
              if v.__class__ is LoDValue and _declared_lod(op, name)]
    if not lod_at:
        return values, {}
    roles = registry.count_roles(opdef, op, values)
    if forward:
        outs = [n for names in op.outputs.values() for n in names if n != EMPTY_VAR_NAME]
        drops = bool(outs) and not any(_declared_lod(op, n) for n in outs)
        # a plain input taken row by row pins the output's rows to its own (lower._strip_lod), as before
        pinned = any(roles.get(slot) == "rows" and v is not None and v.__class__ is not LoDValue
                     and getattr(v, "ndim", 0) >= 1 for slot, vals in values.items() for v in vals)
        chosen = [(s, i) for s, i in lod_at
                  if drops and not pinned or roles.get(s) == "count" and base not in _LOD_WHEN_ROWS_KEPT]
    else:                                  # as the forward op did: its outputs' gradients tell their LoD
        fwd = registry.get(base)
        outs = [n for o in fwd.outputs for n in op.inputs.get(o.name + GRAD_SUFFIX, ()) if n != EMPTY_VAR_NAME]
        drops = bool(outs) and not any(_declared_lod(op, n) for n in outs)
        chosen = [(s, i) for s, i in lod_at
                  if roles.get(s) == "count" and (drops or base not in _LOD_WHEN_ROWS_KEPT)]
    if not chosen:
        return values, {}
    out = {slot: list(vals) for slot, vals in values.items()}
    originals = {}
    for slot, i in chosen:
        v = out[slot][i]
        originals[(slot, i)] = v
        out[slot][i] = LoDValue(v.data, (jnp.stack([jnp.zeros((), jnp.int32), v.row_count().astype(jnp.int32)]),))
    return out, originals


def _lod_back(as_counted: dict, slot: str, index: int, rows: int):
    """The LoD value whose LoD an output (``slot``[``index``], ``rows`` padded rows) of an op that took
    LoD inputs as counted rows takes back: for a gradient ``S@GRAD``, input ``S``'s; else the first
    such input with as many rows; None when none has."""
    if slot.endswith(GRAD_SUFFIX):
        v = as_counted.get((slot[:-len(GRAD_SUFFIX)], index))
        if v is not None:
            return v if v.data.shape[0] == rows else None
    return next((v for v in as_counted.values() if v.data.shape[0] == rows), None)


def _count_rule(opdef, op, values: dict, env, checks: StepChecks | None = None,
                as_counted: dict | None = None) -> tuple[LoDValue | None, frozenset]:
    """How ``op`` takes its *counted* inputs (LoDValues of variables declared without LoD: rows
    padded to a static capacity whose real count is data; docs/ops_data_dependent.md), by its
    registry roles (``registry.declare_counts``): returns (the counted input whose count its
    row-wise outputs keep, or None; the (slot, index) positions whose rule takes the LoDValue).

    A forward op given a counted value in a slot it declares no role for refuses it with a
    :class:`DataDependentShapeError` naming both ops: it would read the capacity, or mix the
    padding rows into its result. Grad ops never refuse (their forward op did or did not); one
    without roles keeps the count on outputs of the counted input's rows, as before."""
    found = [(slot, i, v) for slot, vals in values.items()
             for i, (name, v) in enumerate(zip(op.inputs.get(slot, ()), vals))
             if v.__class__ is LoDValue and ((slot, i) in (as_counted or ()) or not _declared_lod(op, name))]
    if not found:
        return None, frozenset(), ()
    grad = opdef.forward_type is not None or op.type.endswith("_grad")
    if grad and opdef.counts is None:
        return found[0][2], frozenset(), ()
    roles = registry.count_roles(opdef, op, values)
    if not grad:
        for slot, i, v in found:
            if roles.get(slot) not in registry.COUNT_ROLES:
                raise _count_refusal(op, slot, op.inputs[slot][i], v, env, (slot, i) in (as_counted or ()))
    rows = [v for slot, i, v in found if roles.get(slot) == "rows"]
    checked = [(slot, i, v) for slot, i, v in found if roles.get(slot) == "rows" and (slot, i) not in (as_counted or ())]
    if not grad and len(checked) > 1:      # (LoD values taken as counted rows pair their rows as before)
        _check_same_counts(op, checked, checks, env)
    if len({id(v.offsets[-1]) for v in rows}) > 1:
        # Rows of several counted values (a + b of two masked_selects): Paddle needs their counts
        # equal; the smaller is kept, so no padding row of either is ever a result row.
        count = rows[0].row_count().astype(jnp.int32)
        for v in rows[1:]:
            count = jnp.minimum(count, v.row_count().astype(jnp.int32))
        rows = [LoDValue(rows[0].data, (jnp.stack([jnp.zeros((), jnp.int32), count]),))]
    tables = tuple((slot, i, v) for slot, i, v in found if roles.get(slot) == "table" and not grad)
    return ((rows[0] if rows else None), frozenset((slot, i) for slot, i, v in found if roles.get(slot) == "count"),
            tables)


def _check_same_counts(op, rows, checks: StepChecks | None, env) -> None:
    """Counted inputs taken row by row (``"rows"``: elementwise ops) must have one real count:
    Paddle refuses shapes that differ, and the padded rows here would pair real rows with padding.
    Checked inside the step (the counts are data): a ``BoundExceededError`` naming the op, the
    producers and the differing count (checks.check_count)."""
    slot0, i0, first = rows[0]
    name0 = op.inputs[slot0][i0]
    origin = count_origin(op, name0, env)
    made = f"{origin.type!r} at {origin.location}" if origin is not None else "an earlier op"
    for slot, i, v in rows[1:]:
        check_count(checks, op, env, op.inputs[slot][i], v.row_count() == first.row_count(), v.row_count(),
                    f"{op.type} takes {slot0}={name0!r} and {slot}={op.inputs[slot][i]!r} row by row and needs "
                    f"their real row counts equal ({name0!r} was made by {made})")


def _check_table_reads(op, given: dict, values: dict, tables, checks: StepChecks, env) -> None:
    """A counted value read as a table (gather's X): inside the step, its index inputs whose range
    is the table's padded rows (``checks.index_inputs``) must stay below its real count — a read
    past it would return a padding row as data. A failed check is a ``BoundExceededError`` naming
    both ops; the run is not applied."""
    from .checks import specs_of
    for slot, i, table in tables:
        rows = table.data.shape[0]
        name = op.inputs[slot][i]
        for spec in specs_of(op, lambda s: getattr((values.get(s) or [None])[0], "shape", None)):
            index = (given.get(spec.slot) or [None])[0]
            if spec.size != rows or spec.component is not None or index is None or np.size(index) == 0:
                continue
            real = None
            if index.__class__ is LoDValue:
                real, index = index.row_mask(), index.data
            index = jnp.asarray(index)
            ok = index < table.row_count()
            if real is not None and ok.ndim >= 1:
                ok = ok | ~real.reshape(real.shape + (1,) * (ok.ndim - 1))
            flat = ok.reshape(-1)
            producer = _count_origin(op, name, env)
            made = f"{producer.type!r} at {producer.location}" if producer is not None else "an earlier op"
            checks.check_bound(op, jnp.all(flat), index.reshape(-1)[jnp.argmin(flat)], {
                "kind": "bound", "bound": rows,
                "message": (f"input {spec.slot} reads a row of {slot}={name!r} past its real rows, whose number "
                            f"is data (made by {made}; padded to {rows} rows inside the step): Paddle has no "
                            "such row. Index only the rows shape() reports")})


def _counted_grad_or_output(opdef, op, given: dict, slot: str, index: int) -> bool:
    """Whether output ``slot``[``index``] of ``op`` may keep a counted input's count: any output of a
    forward op (its rows follow the counted input's: ``_count_rule``); of a grad op only the
    gradient ``S@GRAD`` of a counted input ``S`` (a plain input's gradient stays plain, even
    when it has as many rows as the counted one's capacity)."""
    if opdef.forward_type is None and not op.type.endswith("_grad"):
        return True
    if not slot.endswith(GRAD_SUFFIX):
        return True
    vals = given.get(slot[:-len(GRAD_SUFFIX)]) or ()
    names = op.inputs.get(slot[:-len(GRAD_SUFFIX)]) or ()
    return (index < len(vals) and vals[index].__class__ is LoDValue and index < len(names)
            and not _declared_lod(op, names[index]))


def _count_refusal(op, slot: str, name: str, value: LoDValue, env, lod: bool = False) -> DataDependentShapeError:
    """The error for ``op`` given the counted value ``name`` in a slot it does not honour (``lod``:
    a LoD value that ``op`` takes as counted rows, see :func:`_lod_as_counted`)."""
    if lod:
        return DataDependentShapeError(
            f"op {op.type!r} at {op.location}: input {slot}={name!r} is a LoD (variable-length) value, "
            f"padded inside the compiled step to a bucket of {value.data.shape[0]} rows, and {op.type!r} "
            "with these attributes neither keeps its LoD (no output is declared with LoD) nor honours "
            "its real row count: its result would hold the padding rows, or their number, as data. "
            "Keep the rows as the first dimension (reshape to [-1, ...] or [0, ...], transpose with "
            "axis[0] == 0, stack/unsqueeze/split along a later axis), pool the sequences first "
            "(layers.sequence_pool), or fetch the value and continue on the host",
            op_type=op.type, location=str(op.location))
    producer = _count_origin(op, name, env)
    made = (f"made by op {producer.type!r} at {producer.location}" if producer is not None
            else "made by an op whose output size depends on the data")
    return DataDependentShapeError(
        f"op {op.type!r} at {op.location}: input {slot}={name!r} holds rows whose number is data ({made}; "
        f"inside the compiled step they are padded to a capacity of {value.data.shape[0]} rows and carry "
        f"their real count), and {op.type!r} with these attributes does not honour that count: it would "
        "read the capacity or mix the padding rows into its result. Use an op that honours the count "
        "(docs/ops_data_dependent.md lists them), or fetch the value and continue on the host",
        op_type=op.type, location=str(op.location),
        producer_type=producer.type if producer is not None else None,
        producer_location=str(producer.location) if producer is not None else None)


def _grown_refusal(op, slot: str, name: str, rows: int, lod_rows: int) -> DataDependentShapeError:
    """The error for ``op`` whose output ``name``, declared with its LoD input's LoD, has more rows
    (``rows``) than that input's padded ``lod_rows``: which of them are real is not known."""
    return DataDependentShapeError(
        f"op {op.type!r} at {op.location}: output {slot}={name!r} is declared with its LoD input's LoD "
        f"but has {rows} rows from a LoD input padded inside the compiled step to {lod_rows}: which "
        "of them are real is not known, and the LoD would cut it to the input's rows. Grow the rows "
        "on the host, or with an op that honours a row count (concat along the rows, expand)",
        op_type=op.type, location=str(op.location))


def _count_origin(op, name: str, env):
    """The op that made the counted value ``name`` reaches ``op`` with (``checks.count_origin``)."""
    return count_origin(op, name, env)


def _declared_one(op, name: str) -> bool:
    """Whether the program declares ``name`` with shape [1] (Fluid 1.x's one-element results)."""
    var = op.block.find_var(name)
    return var is not None and var.shape == (1,)


def _declared_lod(op, name: str) -> bool:
    var = op.block.find_var(name)
    return bool(var is not None and var.lod_level)


def op_rng(base_key: jax.Array, index: int) -> Callable[[], jax.Array]:
    """The key of the op at position ``index``: the run's key folded with the position."""
    return lambda: jax.random.fold_in(base_key, index)


def run_ops(ops: Iterable, env: MutableMapping[str, Any], rng_key: jax.Array | None = None,
            checks: StepChecks | None = None, op_keys: Callable[[int], jax.Array | None] | None = None) -> None:
    """Evaluate ``ops`` in order on ``env``; each op gets a key folded from ``rng_key`` (or the
    base key ``op_keys(index)`` chooses for it); ``checks`` collects run-time checks."""
    ops = ops if isinstance(ops, list) else list(ops)
    index = 0
    while index < len(ops):
        op = ops[index]
        if RECOMPUTE_SEGMENT_ATTR in op.attrs:      # a recomputed segment (see remat.py)
            end = remat.group_end(ops, index)

            keyed = remat.key_positions(ops, index, end)   # a random copy draws its forward op's key

            def run_segment(local, start=index, stop=end):
                for i in range(start, stop):
                    k = keyed.get(i, i)
                    base = op_keys(k) if op_keys is not None else rng_key
                    run_op(ops[i], local, op_rng(base, k) if base is not None else None)

            remat.run_group(ops[index:end], env, ops[index - 1] if index else None, run_segment)
            index = end
            continue
        base = op_keys(index) if op_keys is not None else rng_key
        rng = op_rng(base, index) if base is not None else None
        run_op(op, env, rng, checks=checks)
        index += 1


# -- the generic gradient rule -------------------------------------------------------------------
def _differentiable(value) -> bool:
    # Values without a dtype (a tensor array, a control-flow op's saved scope) are containers.
    return value is not None and hasattr(value, "dtype") and jnp.issubdtype(jnp.result_type(value), jnp.inexact)


def auto_grad_compute(ctx: ComputeContext) -> dict[str, list]:
    """``<type>_grad``: the vjp of the forward rule w.r.t. every input whose ``@GRAD`` is asked.

    Inside one ``jax.jit`` XLA shares the recomputed forward with the real one, so this costs no
    more than a hand-written backward (``tests/test_backward.py`` counts the dots).
    """
    fwd = registry.get(ctx.opdef.forward_type)
    direct = paddle_grads.direct_rule(fwd, ctx.op)
    if direct is not None:
        return direct(ctx)                      # a grad op Paddle wrote, e.g. Out or XShape, not X
    primal = {s.name: ctx.inputs(s.name) for s in fwd.inputs}
    primal.update(paddle_grads.rebuilt_inputs(ctx, fwd))
    # LoD inputs (of LoD-aware ops): differentiate with respect to their rows, offsets fixed.
    lods = {(s, i): v for s, vs in primal.items() for i, v in enumerate(vs) if v.__class__ is LoDValue}
    primal = {s: [v.data if v.__class__ is LoDValue else v for v in vs] for s, vs in primal.items()}
    grad_names = ctx._out_names
    wanted = [(s.name, i) for s in fwd.inputs if s.name not in fwd.no_grad_inputs
              for i in range(len(primal[s.name]))
              if i < len(grad_names.get(s.name + GRAD_SUFFIX, ()))
              and grad_names[s.name + GRAD_SUFFIX][i] != EMPTY_VAR_NAME
              and _differentiable(primal[s.name][i])]
    out_slots = [s.name for s in fwd.outputs if s.name not in fwd.no_grad_outputs]
    fwd_out_names = {s.name: ctx.op.inputs.get(s.name, []) for s in fwd.outputs}

    def forward(diff_values):
        values = {k: list(v) for k, v in primal.items()}
        for (slot, i), v in zip(wanted, diff_values):
            values[slot][i] = v
        for (slot, i), lod in lods.items():
            values[slot][i] = LoDValue(values[slot][i], lod.offsets)
        fctx = ComputeContext(fwd, ctx.op, values, ctx._attrs, None, out_names=fwd_out_names,
                              lower_block=lower_sub_block)
        fctx.real_rows = ctx.real_rows
        outs = fwd.compute(fctx)
        return [[o.data if o.__class__ is LoDValue else o
                 for o in (outs[s] if isinstance(outs[s], (list, tuple)) else [outs[s]])] for s in out_slots]

    diff_values = [primal[s][i] for s, i in wanted]
    outs, vjp = jax.vjp(forward, diff_values)
    cotangents = []
    for slot, values in zip(out_slots, outs):
        given = ctx.inputs(slot + GRAD_SUFFIX)
        cts = []
        for j, v in enumerate(values):
            g = given[j] if j < len(given) else None
            if g.__class__ is LoDValue:
                g = g.data
            if g is None or not _differentiable(v):
                g = jnp.zeros_like(v) if _differentiable(v) else np.zeros(v.shape, jax.dtypes.float0)
            else:
                g = jnp.asarray(g, v.dtype)
                if g.ndim == v.ndim and g.ndim and g.shape[1:] == v.shape[1:] and g.shape[0] != v.shape[0]:
                    g = _fit_rows(g, v.shape[0])       # LoD values padded to different row counts
                g = g.reshape(v.shape)
            cts.append(g)
        cotangents.append(cts)
    (grads,) = vjp(cotangents)
    result: dict[str, list] = {}
    for (slot, i), g in zip(wanted, grads):
        if (slot, i) in lods:                    # the gradient of a LoD input has its LoD
            g = LoDValue(g, lods[(slot, i)].offsets)
        result.setdefault(slot + GRAD_SUFFIX, [None] * len(primal[slot]))[i] = g
    return result


def _fit_rows(g, rows: int):
    """``g`` cut or zero-padded to ``rows`` rows (the rows past the real ones are padding)."""
    if g.shape[0] > rows:
        return g[:rows]
    return jnp.concatenate([g, jnp.zeros((rows - g.shape[0],) + tuple(g.shape[1:]), g.dtype)])


# -- the derived shape rule ----------------------------------------------------------------------
def derived_shape_rule(ictx: shape.InferShapeContext) -> None:
    """Infer output shapes by ``jax.eval_shape`` of the JAX rule, one symbolic dim per UNK."""
    op, opdef = ictx.op, ictx.opdef
    infos = {slot: ictx.inputs(slot) for slot in op.inputs}
    n_unknown = sum(d < 0 for vs in infos.values() for v in vs for d in v.shape)
    symbols = iter(jax.export.symbolic_shape(",".join(f"_unk{i}" for i in range(n_unknown)))
                   if n_unknown else ())
    structs = {slot: [jax.ShapeDtypeStruct(tuple(next(symbols) if d < 0 else d for d in v.shape),
                                           dtypes.to_numpy(v.dtype or "float32")) for v in vs]
               for slot, vs in infos.items()}

    def apply(values, key):
        ctx = ComputeContext(opdef, op, values, op.attrs, (lambda: key), lower_block=lower_sub_block)
        return opdef.compute(ctx)

    key = jax.eval_shape(lambda: make_key(0))
    outs = jax.eval_shape(apply, structs, key)
    for slot, value in outs.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        for i, v in enumerate(values):
            if v is None:
                continue
            dims = tuple(d if isinstance(d, (int, np.integer)) else -1 for d in v.shape)
            ictx.set_output(slot, dims, dtypes.normalize(v.dtype), index=i)


shape.derived_rule = derived_shape_rule


# -- sub-blocks ----------------------------------------------------------------------------------
# A control-flow op (conditional_block, while) asks its context for its sub-block
# (``ctx.sub_block()``) and gets a SubBlock: a pure function of the values the block reads, run
# by the same run_ops, which the op's rule hands to lax.cond / lax.while_loop / lax.scan.
_BLOCK_KINDS = frozenset({registry.ATTR_TYPES["block"], registry.ATTR_TYPES["blocks"]})
_active = threading.local()     # the (program, block) pairs being lowered on this thread


def _block_index(ref) -> Any:
    return ref.idx if hasattr(ref, "ops") and hasattr(ref, "idx") else ref


def block_refs(op) -> list[int]:
    """The block indices ``op``'s BLOCK / BLOCKS attributes name (unchecked): those its op
    definition declares as blocks (the sub-blocks its rule runs; another op's stray BLOCK
    attribute runs nothing)."""
    if not registry.has(op.type):
        return []
    declared = registry.get(op.type).attrs
    out = []
    for name, value in op.attrs.items():
        spec = declared.get(name)
        if spec is not None and spec.type_id in _BLOCK_KINDS and op.attr_types.get(name) in _BLOCK_KINDS:
            out.extend(_block_index(v) for v in (value if isinstance(value, (list, tuple)) else [value]))
    return out


def resolve_sub_block(op, ref):
    """The block ``ref`` (a Block or an index) that ``op`` runs as its sub-block, checked.

    A reference out of range, or to the op's own block or one of its ancestors (running it
    would run the op again, without end), is a :class:`ProgramFormatError` naming the op.
    """
    program = op.block.program
    blocks = program.blocks
    idx = _block_index(ref)
    where = f"op {op.type!r} of block {op.block.idx} (created at {op.location})"
    if isinstance(idx, bool) or not isinstance(idx, (int, np.integer)) or not 0 <= idx < len(blocks):
        raise ProgramFormatError(f"{where}: its sub-block is {idx!r}, but the program has {len(blocks)} "
                                 f"block(s) (a sub-block is 1..{len(blocks) - 1})")
    block = blocks[int(idx)]
    ancestor = op.block
    for _ in range(len(blocks) + 1):     # Block.parent itself refuses a parent chain that loops
        if ancestor is block:
            raise ProgramFormatError(
                f"{where}: its sub-block {block.idx} is the op's own block or an ancestor of it, so "
                "running the sub-block would run the op again, without end")
        ancestor = ancestor.parent
        if ancestor is None:
            return block
    raise ProgramFormatError(f"the parents of block {op.block.idx} form a cycle")


def block_io(block, _visiting: tuple = ()) -> tuple[list[str], list[str]]:
    """(reads, writes) of a sub-block, nested sub-blocks included, in program order.

    ``reads``: the names its ops read before any of its ops writes them (values from outside);
    ``writes``: the names it writes that an enclosing block declares (what it can hand back).
    A block that (through its ops' sub-blocks) contains itself is a :class:`ProgramFormatError`.
    """
    if block.idx in _visiting:
        chain = " -> ".join(str(i) for i in _visiting + (block.idx,))
        raise ProgramFormatError(f"block {block.idx} runs itself through its ops' sub-blocks: {chain}")
    visiting = _visiting + (block.idx,)
    defined: set[str] = set()
    reads: list[str] = []
    writes: list[str] = []
    for op in block.ops:
        names = list(op.input_arg_names)
        for idx in block_refs(op):
            if isinstance(idx, (int, np.integer)) and 0 <= idx < len(block.program.blocks):
                inner_reads, _ = block_io(block.program.blocks[int(idx)], visiting)
                names.extend(inner_reads)
        for name in names:
            if name not in defined and name not in reads:
                reads.append(name)
        for name in op.output_arg_names:
            defined.add(name)
            if name not in block.vars and name not in writes:
                writes.append(name)
    return reads, writes


class SubBlock:
    """A sub-block as a pure function: ``sub(values, key) -> {name: value it wrote}``.

    ``values`` (name -> value) are what the caller passes explicitly (the values it
    differentiates or carries through a loop); any other name the block reads comes from the
    enclosing environment, as Paddle's scoping has it. The block's ops run in order with
    :func:`run_ops` (so nested control flow works the same way); their results stay local,
    and the caller picks from the returned dict what the owning op writes back.

    Run-time checks (index, NaN/Inf, bounds): when the owning op runs with a collector
    (``checks``), the block's ops collect theirs into a child one and the returned dict holds
    them packed under :data:`CHECKS` (``check_infos`` describes them); the owning op carries that
    entry out of its ``lax.cond`` / ``lax.while_loop`` / ``lax.scan`` (merging iterations with
    ``checks.merge_packed``) and hands it to its collector with :meth:`report`. Grad ops run
    their forward sub-blocks without: the forward op checks the same values.

    ``reads`` / ``writes``: see :func:`block_io`.
    """

    def __init__(self, op, ref, env: Mapping[str, Any] | None = None,
                 rng: Callable[[], jax.Array] | None = None, checks: StepChecks | None = None) -> None:
        self.op = op
        self.checks = checks
        self.check_infos: list[dict] | None = None     # the static side of the packed checks
        self.block = resolve_sub_block(op, ref)
        if self.block.forward_block_idx not in (-1, None) and op.type.endswith("_grad"):
            # Paddle's grad ops name their grad block, whose forward_block_idx is the forward
            # block: fluidjax differentiates the forward block instead (docs/control_flow.md).
            self.block = op.block.program.block(self.block.forward_block_idx)
        self.reads, self.writes = block_io(self.block)
        self._env = env if env is not None else {}
        self._rng = rng

    def base_key(self) -> jax.Array | None:
        """The owning op's key (None outside a seeded run): fold an iteration into it for loops."""
        return self._rng() if self._rng is not None else None

    def __call__(self, values: Mapping[str, Any] | None = None, key: jax.Array | None = None) -> dict[str, Any]:
        marker = (self.block.program._uid, self.block.idx)
        active = getattr(_active, "blocks", None)
        if active is None:
            active = _active.blocks = set()
        if marker in active:
            raise ProgramFormatError(f"block {self.block.idx} is run by an op inside itself (op "
                                     f"{self.op.type!r} at {self.op.location})")
        local: dict[str, Any] = {}
        env = collections.ChainMap(local, dict(values or {}), self._env)
        active.add(marker)
        child = self.checks.child() if self.checks is not None else None
        try:
            run_ops(self.block.ops, env, key, checks=child)
        finally:
            active.discard(marker)
        if child is not None:
            infos = child.infos()
            if self.check_infos is not None and len(self.check_infos) != len(infos):
                raise OpRuntimeError(f"op {self.op.type!r} at {self.op.location}: its sub-block {self.block.idx} "
                                     f"collected {len(infos)} run-time checks in one trace and "
                                     f"{len(self.check_infos)} in another")
            self.check_infos = infos
            if infos:
                local[CHECKS] = child.packed()
        return local

    def report(self, packed) -> None:
        """Hand the packed checks the block's runs collected (carried out of the owning op's loop or
        branch) to the collector of the block the owning op runs in."""
        if packed is not None and self.checks is not None and self.check_infos:
            self.checks.add_packed(packed, self.check_infos)


# The entry of a sub-block's result that holds its packed run-time checks (see SubBlock).
CHECKS = "@fluidjax:checks@"


def lower_sub_block(ctx: ComputeContext, ref) -> SubBlock:
    """``ctx.sub_block()`` of an op this module runs: the block ``ref`` (a Block or its index) as a
    :class:`SubBlock` reading the op's environment, with the op's key (and, for a forward op run
    with checks, a collector for its block's checks)."""
    checks = None if ctx.op.type.endswith("_grad") else getattr(ctx, "checks", None)
    return SubBlock(ctx.op, ref, ctx.env, ctx._rng, checks)


def ops_with_sub_blocks(ops: Iterable) -> Iterable:
    """``ops`` and the ops of every sub-block they run, nested ones included (each block once;
    references that name no block are skipped here and refused when the op lowers)."""
    seen: set = set()
    stack = list(reversed(list(ops)))
    while stack:
        op = stack.pop()
        yield op
        blocks = op.block.program.blocks
        for idx in block_refs(op):
            if isinstance(idx, (int, np.integer)) and 0 <= idx < len(blocks) and idx not in seen:
                seen.add(idx)
                stack.extend(reversed(list(blocks[int(idx)].ops)))
