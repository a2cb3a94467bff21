"""Checking and converting one feed value against its data variable (before anything compiles).

Paddle's feed rule decides how strict the check is. A variable declared with ``need_check_feed``
(``fluid.data``, ``paddle.static.data``, a parsed Paddle 2.x program's data variables) takes
only arrays of its declared dtype, rank and known dims. For every other data variable (Fluid
1.x's ``layers.data``, ``py_reader`` slots) the declaration is advice, as in Fluid's executor:
the fed array's dtype and shape decide, the step compiles per feed signature, and
:func:`reinfer` re-runs the shape rules on what was fed, refusing (a :class:`ShapeError` naming
the op and the user's line) only what an op cannot take.

Every feed error is a :class:`~fluidjax.FeedError` naming the variable. NumPy and JAX arrays fed
to a checked variable must have the declared dtype (a silent cast would hide a bug in the
user's pipeline). Python data —
lists, tuples, scalars — is converted to the declared dtype, as Paddle does, when the
conversion keeps the values: floats round to a narrower float type, integers convert to a float
type that holds them exactly, and to an integer type only when every value is integral and in
range. String and object data is refused.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from ..ir import dtypes
from ..ir import shape as shape_rules
from ..ir.errors import FeedError, ShapeError
from . import flags
from .lod_tensor import LoDTensor, lod_problem
from .lod_value import LoDValue, Offsets, bucket, from_host
from .lower import block_refs


def _declared(var) -> str:
    return f"declared {var.dtype} with shape {var.shape}"


def _from_python(name: str, value: Any, want: np.dtype, var) -> np.ndarray:
    """Python data as an array of the declared dtype (for every data variable: Python data has no
    dtype of its own to decide), or a FeedError when the conversion would change a value."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists, objects NumPy cannot make an array of
        raise FeedError(f"feed {name!r}: cannot make an array of the {type(value).__name__} given "
                        f"({type(exc).__name__}: {exc}); the variable is {_declared(var)}") from None
    if arr.dtype == want:
        return arr
    _refuse_kind(name, arr, var)
    if want.kind == "f":
        if arr.dtype.kind in "biu":
            out = arr.astype(want)
            if not np.array_equal(out.astype(arr.dtype), arr):
                raise FeedError(f"feed {name!r}: the integers given do not all fit {want} exactly; the "
                                f"variable is {_declared(var)}")
            return out
        with np.errstate(over="ignore"):
            out = arr.astype(want)
        if not np.array_equal(np.isfinite(out), np.isfinite(arr)):
            raise FeedError(f"feed {name!r}: values overflow {want}; the variable is {_declared(var)}")
        return out
    if want.kind in "iu":
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.round(arr))):
            raise FeedError(f"feed {name!r}: the values given are not all integers, and the variable is "
                            f"{_declared(var)}")
        info = np.iinfo(want)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise FeedError(f"feed {name!r}: values outside the range of {want}; the variable is "
                            f"{_declared(var)}")
        return arr.astype(want)
    if want.kind == "b":
        if arr.dtype.kind in "iuf" and np.isin(arr, (0, 1)).all():
            return arr.astype(bool)
    raise FeedError(f"feed {name!r}: cannot convert {arr.dtype} data exactly to {want}; the variable is "
                    f"{_declared(var)}")


def _refuse_kind(name: str, arr, var) -> None:
    kind = np.dtype(arr.dtype).kind
    if kind in "OUSV":
        what = {"O": "Python objects", "U": "strings", "S": "bytes", "V": "structured records"}[kind]
        raise FeedError(f"feed {name!r} holds {what} (dtype {arr.dtype}); the variable is {_declared(var)}: "
                        "feed numbers")
    if kind == "c":
        raise FeedError(f"feed {name!r} holds complex numbers; the variable is {_declared(var)}")


def check_feed(name: str, value: Any, want: np.dtype, declared: tuple[int, ...], var) -> Any:
    """``value`` as the array to feed variable ``var`` (named ``name``), or a FeedError.

    A ``need_check_feed`` variable takes its declared dtype, rank and known dims only; any other
    data variable takes any numeric array (its declaration is advice: see the module doc)."""
    if isinstance(value, LoDTensor):
        value = value.value()
        if value is None:
            raise FeedError(f"feed {name!r} is an empty LoDTensor (it holds no value); the variable is "
                            f"{_declared(var)}")
    if isinstance(value, (np.ndarray, jax.Array)):
        if value.dtype != want:  # a NumPy dtype compare: cheap on the hot path
            _refuse_kind(name, value, var)
            if not var.need_check_feed:
                return value      # an array's dtype decides (and its shape: see reinfer)
            raise FeedError(f"feed {name!r} has dtype {value.dtype}, but the variable is {_declared(var)}; "
                            f"convert it (x.astype({var.dtype!r}))")
    else:
        value = _from_python(name, value, want, var)
    shape = value.shape
    if not var.need_check_feed:
        return value
    if len(shape) != len(declared) or any(d >= 0 and d != s for d, s in zip(declared, shape)):
        raise FeedError(f"feed {name!r} has shape {tuple(shape)}, but the variable is declared "
                        f"{declared} (-1 takes any size)")
    return value


def _check_offsets(name: str, lod, rows: int) -> None:
    """Paddle's LoD rules (``lod_tensor.lod_problem``), the broken one named."""
    problem = lod_problem(lod, rows)
    if problem is not None:
        raise FeedError(f"feed {name!r}: invalid LoD {lod}: {problem}")


def _fluid_trailing_one(data: np.ndarray, declared: tuple[int, ...]) -> np.ndarray:
    """LoD data whose shape is the declared one with a trailing 1 added or dropped, reshaped to the
    declared rank: Fluid 1.x's ``create_lod_tensor`` of Python lists always makes ``[N, 1]`` rows,
    scripts feed them to ids declared ``[None]`` (``fluid.data``), and Fluid took both spellings."""
    if data.ndim == len(declared) + 1 and data.shape[-1] == 1:
        return data.reshape(data.shape[:-1])
    if data.ndim + 1 == len(declared) and declared[-1] == 1:
        return data.reshape(data.shape + (1,))
    return data


def check_lod_feed(name: str, value: Any, want: np.dtype, declared: tuple[int, ...], var,
                   bucket_sequences: bool | None = None) -> LoDValue:
    """A feed of a ``lod_level > 0`` variable: a LoDTensor with that many levels, as a padded
    :class:`LoDValue` (see ``lod_value.py``); its sequence count padded to a bucket when
    ``bucket_sequences`` (default: ``FLAGS_bucket_sequences``; the JAX-function bridge passes
    False: its results are arrays of the exact sequence count, which cannot be cut inside jit)."""
    if not isinstance(value, LoDTensor):
        # Fluid's rule: a dense array fed to a lod_level > 0 variable (a feed dict, or a py_reader
        # slot declared with lod_levels) is a tensor with no LoD, as Fluid's executor made it
        # (_as_lodtensor); ops that only read its rows run, an op that needs its sequences refuses.
        return check_feed(name, value, want, declared, var)
    lod = value.lod()
    if len(lod) != var.lod_level:
        raise FeedError(f"feed {name!r}: the variable has lod_level {var.lod_level}, but the LoDTensor has "
                        f"{len(lod)} LoD level(s)")
    data = np.asarray(value.value()) if value.value() is not None else value
    if isinstance(data, np.ndarray) and data.ndim >= 1:
        data = _fluid_trailing_one(data, declared)
    data = check_feed(name, data, want, declared, var)
    _check_offsets(name, lod, data.shape[0])
    return from_host(np.asarray(data), lod, flags.bucket_sequences if bucket_sequences is None else bucket_sequences)


# LoD-aware ops (``lower.lod_aware``) whose rules take a *counted* value (one row per sequence or a
# varying dense batch, docs/ops_data_dependent.md) as counted rows rather than as one sequence:
# reductions over its real rows, accuracy over its real rows, the DynamicRNN array path (one row per
# running sequence), tensor arrays, loops and branches (their bodies are checked op by op), print.
COUNTED_READERS = frozenset({
    "mean", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
    "accuracy", "auc", "reorder_lod_tensor_by_rank", "shrink_rnn_memory", "write_to_array", "array_to_lod_tensor",
    "read_from_array", "while", "conditional_block", "print"})
# What a dense feed carried as counted rows may reach among the LoD-aware ops (no arrays or loops:
# a fed value written to an array beside plain or LoD elements keeps its own form).
DENSE_COUNTED_READERS = frozenset({
    "mean", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
    "accuracy", "auc", "print"})
# Ops not adapted to padding sequences: a step holding one keeps every LoD feed's exact sequence
# count (beam_search_decode lays out ``beam_size`` sentences per source, padding sources included,
# and inside a while loop the real count is not carried).
SEQUENCE_COUNT_UNADAPTED = frozenset({"beam_search_decode"})


class _Rows:
    """What bucketing may do to the feeds of one step (``ops``), worked out once per op list."""

    __slots__ = ("ops", "lod_safe", "dense_safe", "seen")

    def __init__(self, ops) -> None:
        self.ops = ops
        self.lod_safe = None          # whether padding sequences may be added to LoD feeds
        self.dense_safe = {}          # feed name -> whether it may be carried as counted rows
        self.seen = {}                # feed name -> the first dims fed so far (dense feeds)


class OpList(list):
    """A plan's op list that carries what bucketing worked out for it (:class:`_Rows`), so the
    facts live and die with the plan (a module-level cache keyed by the list kept every dropped
    program alive)."""

    rows = None


def _plan_rows(ops) -> _Rows:
    """The bucketing facts of ``ops``: cached on an :class:`OpList`, fresh for a plain list."""
    hit = getattr(ops, "rows", None)
    if hit is None:
        hit = _Rows(ops)
        if isinstance(ops, OpList):
            ops.rows = hit
    return hit


def _shape_structs(op) -> dict:
    values = {}
    for slot, vs in op.inputs.items():
        vars_ = [op.block.find_var(n) for n in vs]
        values[slot] = [None if v is None or v.shape is None else jax.ShapeDtypeStruct(
            tuple(max(int(d), 1) for d in v.shape), dtypes.to_numpy(v.dtype)) for v in vars_]
    return values


def _maybe_rows(var) -> bool:
    """Whether ``var`` may hold counted rows at run time: declared without LoD, rows not fixed."""
    shape = tuple(var.shape or ()) if var is not None else ()
    return var is not None and not var.lod_level and len(shape) >= 1 and int(shape[0]) < 0


def counted_reach(ops, start: set, from_lod: bool = False) -> str | None:
    """Whether counted rows starting at the variables ``start`` (and, with ``from_lod``, at every
    row-per-sequence output of a LoD-aware op reading a LoD value) reach only ops that honour a
    count (registry roles, :data:`COUNTED_READERS`): None when they do, else the first op that
    would refuse or misread them (a line for the docs' fallback). Walks ``ops`` and their
    sub-blocks in order; over-approximates what is counted (an output with unknown rows of an op
    reading a counted value), so a None is safe to act on."""
    from ..ir import registry
    from .lower import LOD_AWARE, ops_with_sub_blocks
    counted = set(start)
    for op in ops_with_sub_blocks(ops):
        if op.type.endswith("_grad") or int(op.attrs.get("op_role", 0) or 0) & 1:
            continue                         # grad ops take what their forward op took
        if from_lod and op.type in SEQUENCE_COUNT_UNADAPTED:
            return op.type
        names = [n for n in op.input_arg_names if n in counted]
        reads_lod = from_lod and op.type in LOD_AWARE and any(
            (v := op.block.find_var(n)) is not None and v.lod_level for n in op.input_arg_names)
        if names:
            if op.type in (COUNTED_READERS if from_lod else DENSE_COUNTED_READERS):
                ok = True
            elif op.type in LOD_AWARE and registry.get(op.type).counts is None:
                ok = False                   # (a LoD-aware op with count roles is judged by them)
            elif block_refs(op) or not registry.has(op.type):
                ok = False
            else:
                try:
                    roles = registry.count_roles(registry.get(op.type), op, _shape_structs(op))
                except Exception:    # a role rule that needs the values themselves
                    roles = {}
                ok = all(roles.get(slot) in registry.COUNT_ROLES
                         for slot, vs in op.inputs.items() for n in vs if n in counted)
            if not ok:
                return op.type
        if names or reads_lod:
            for n in op.output_arg_names:
                if _maybe_rows(op.block.find_var(n)):
                    counted.add(n)
    return None


def _read_as_rows(ops) -> frozenset:
    """The step's inputs (variables ``ops`` read and none writes, declared without LoD, rows not
    fixed) that may be carried as counted rows: every op their rows reach honours a count
    (:func:`counted_reach`). Cached per op list; ``parallel.py`` splits these by sequence shares."""
    info = _plan_rows(ops)
    written = {n for op in ops for n in op.output_arg_names}
    result = set()
    for op in ops:
        for n in op.input_arg_names:
            var = op.block.find_var(n)
            if n in written or var is None or var.persistable or not _maybe_rows(var):
                continue
            if n not in info.dense_safe:
                info.dense_safe[n] = counted_reach(ops, {n}) is None
            if info.dense_safe[n]:
                result.add(n)
    return frozenset(result)


def _unpad_sequences(value: LoDValue) -> LoDValue:
    """A LoD feed whose outermost level was padded with empty sequences, back to its real count."""
    offsets = value.offsets
    count = int(offsets.count)
    return LoDValue(value.data, Offsets((offsets[0][:count + 1], *offsets[1:]), offsets.longest))


def _as_counted_rows(host: np.ndarray, n: int) -> LoDValue:
    """``host`` (n rows) padded with zero rows to ``bucket(n)``, carrying ``n`` as its real count."""
    if bucket(n) != n:
        host = np.concatenate([host, np.zeros((bucket(n) - n,) + host.shape[1:], host.dtype)])
    return LoDValue(host, Offsets((np.asarray([0, n], np.int32),), (bucket(n),)))


# A dense feed is carried as counted rows once it has been fed this many distinct first dims.
DENSE_ROWS_AFTER = 3


def bucket_sequence_rows(values: list, specs, ops) -> list:
    """Under ``FLAGS_bucket_sequences`` (``docs/lod.md``, "Bucketing the sequence count"):

    - a LoD feed keeps the empty padding sequences ``from_host`` gave it only when every
      row-per-sequence value of the step reaches ops that honour a count (:func:`counted_reach`)
      and no op of :data:`SEQUENCE_COUNT_UNADAPTED` is in it; else its exact count (the fallback);
    - a dense feed whose declared first dim is unknown becomes counted rows padded to a bucket of
      its first dim (``docs/ops_data_dependent.md``) when that dim is a padded LoD feed's real
      sequence count (a label with one row per sequence) or when this step has been fed
      :data:`DENSE_ROWS_AFTER` distinct first dims for it (BERT's masked positions), and every op
      its rows reach honours the count. Dense feeds sharing a first dim are bucketed together or
      not at all (and a LoD feed whose count equals that dim is then unpadded), so no op pairs
      padded rows with exact ones.

    ``values`` and ``specs`` (``(name, var, declared)`` per feed) are in feed order."""
    info = _plan_rows(ops)
    out = list(values)
    padded = [i for i, v in enumerate(values)
              if v.__class__ is LoDValue and v.offsets.__class__ is Offsets and v.offsets.count is not None]
    if padded:
        if info.lod_safe is None:
            info.lod_safe = counted_reach(ops, set(), from_lod=True) is None
        if not info.lod_safe:
            for i in padded:
                out[i] = _unpad_sequences(values[i])
            padded = []
    counts = {int(values[i].offsets.count) for i in padded}
    # first dims a dense feed must keep exact: a LoD feed's exact sequence count (its per-sequence
    # rows are not padded) and every LoD feed's real row count (per-row values pair with its rows)
    exact = set()
    for i, v in enumerate(out):
        if v.__class__ is LoDValue and v.offsets:
            exact.add(int(np.asarray(v.offsets[-1])[-1]))
            if i not in padded:
                exact.add(len(v.offsets[0]) - 1)
    groups: dict = {}
    for i, (value, (name, var, declared)) in enumerate(zip(values, specs)):
        if (value.__class__ is LoDValue or var.lod_level or getattr(value, "ndim", 0) < 1
                or (declared and declared[0] >= 0)):
            continue
        n = int(value.shape[0])
        seen = info.seen.setdefault(name, set())
        if len(seen) < 64:
            seen.add(n)
        groups.setdefault(n, []).append((i, name))
    for n, members in groups.items():
        # one row (it may broadcast against other rows) and no row stay exact: as counted rows they
        # would need equal counts (lower._check_same_counts) or give a mean of nothing
        wanted = n in counts or (n > 1 and any(len(info.seen[name]) >= DENSE_ROWS_AFTER for _, name in members))
        if not wanted or (n in exact and n not in counts):
            continue
        safe = True
        for _, name in members:
            if name not in info.dense_safe:
                info.dense_safe[name] = counted_reach(ops, {name}) is None
            safe = safe and info.dense_safe[name]
        if safe:
            for i, _ in members:
                out[i] = _as_counted_rows(np.asarray(values[i]), n)
        elif n in counts:                   # the label cannot be padded: nor can its sequences
            for i in padded:
                if int(values[i].offsets.count) == n:
                    out[i] = _unpad_sequences(values[i])
    return out


def off_declaration(value, want: np.dtype, declared: tuple[int, ...]) -> bool:
    """Whether a fed value (array or LoDValue) differs from its variable's declared dtype, rank or
    known dims (possible only for a variable without ``need_check_feed``)."""
    data = value.data if value.__class__ is LoDValue else value
    shape = data.shape
    return (data.dtype != want or len(shape) != len(declared)
            or any(d >= 0 and d != s for d, s in zip(declared, shape)))


def _fed_info(name: str, value, var) -> shape_rules.VarInfo:
    data = value.data if value.__class__ is LoDValue else value
    rows = None
    if value.__class__ is LoDValue:
        rows = -1                          # padded to a bucket: the real row count is data
    dims = tuple(int(d) for d in data.shape)
    if rows is not None and dims:
        dims = (rows,) + dims[1:]
    return shape_rules.VarInfo(name, dims, dtypes.normalize(data.dtype), var.lod_level)


def reinfer(block, ops, fed: dict) -> None:
    """Re-run the shape rules of ``ops`` (of ``block``) on what was fed to data variables whose
    declaration is advice (``fed``: name -> (value, variable)): Fluid's executor ran a program on
    the fed arrays, whatever ``layers.data`` declared. An op that cannot take what reaches it
    raises its rule's :class:`ShapeError` (naming the op, its inputs and the user's line), before
    anything compiles; so does a state variable (a parameter, an accumulator) whose shape or dtype
    would change, and an op that would mix a fed float dtype with another float dtype (Fluid's
    kernels take one: "feed x.astype(...)"). Ops none of whose inputs changed keep their declared
    shapes (they are not re-run); ops with sub-blocks are not re-run either (their rules read the
    sub-block's declarations; the step's own checks see their values).
    """
    env: dict[str, shape_rules.VarInfo] = {n: _fed_info(n, v, var) for n, (v, var) in fed.items()}
    changed = set(env)
    base = shape_rules._block_lookup(block)
    fed_dtype = {n: info.dtype for n, info in env.items()
                 if info.dtype != fed[n][1].dtype and dtypes.is_float(info.dtype)}

    def lookup(name: str) -> shape_rules.VarInfo:
        return env.get(name) or base(name)

    for index, op in enumerate(ops):
        names = [n for n in op.input_arg_names if n in changed]
        if not names:
            continue
        if block_refs(op):
            continue
        where = f"block {block.idx}, op {index}"
        _check_float_mix(op, lookup, fed_dtype, where)
        results = shape_rules.run_rule(op, lookup, where)
        for name, info in results.items():
            var = block.find_var(name)
            if var is None:
                continue
            info = info._replace(shape=shape_rules.one_element_shape(info.shape, var.shape))
            if var.persistable and (info.dtype != var.dtype or len(info.shape) != len(var.shape) or any(
                    d >= 0 and s >= 0 and d != s for d, s in zip(var.shape, info.shape))):
                raise ShapeError(
                    f"op {op.type!r} ({where}) at {op.location}: with the fed {', '.join(sorted(fed))} its output "
                    f"{name!r} (a state variable, declared {var.shape} {var.dtype}) would become {info.shape} "
                    f"{info.dtype}; feed arrays the program's parameters fit")
            if (info.shape, info.dtype) != (var.shape, var.dtype):
                changed.add(name)
                env[name] = info
                if name not in fed_dtype and any(n in fed_dtype for n in names) and dtypes.is_float(info.dtype):
                    fed_dtype[name] = info.dtype


def _check_float_mix(op, lookup, fed_dtype: dict, where: str) -> None:
    """An op reading a float value whose dtype came from a feed next to a float input of another
    dtype: Fluid's kernel refused it (one dtype per kernel); so does this, before compiling."""
    tainted = [(n, fed_dtype[n]) for n in op.input_arg_names if n in fed_dtype]
    if not tainted:
        return
    for n in op.input_arg_names:
        info = lookup(n)
        if n not in fed_dtype and info.dtype is not None and dtypes.is_float(info.dtype) \
                and info.dtype != tainted[0][1]:
            raise ShapeError(
                f"op {op.type!r} ({where}) at {op.location}: input {tainted[0][0]!r} is {tainted[0][1]} (from a "
                f"feed) but input {n!r} is {info.dtype}; the op takes one float dtype: feed the data as "
                f"{info.dtype} (x.astype({info.dtype!r}))")
