"""Run-time checks: indices in range (``FLAGS_check_index``) and NaN/Inf (``FLAGS_check_nan_inf``).

An index-taking op declares its index inputs once, next to its JAX rule::

    @index_inputs("lookup_table_v2")
    def _(attr, shape):
        return [IndexInput("Ids", shape("W")[0])]

Both kinds of check use that declaration:

- **on the host, before the step runs**, for indices fed by the user (directly, or through
  reshapes): a NumPy min/max of the fed array. Nothing runs on the device and nothing is
  changed when it fails. This is the common case (labels, word ids) and costs a few
  microseconds a run.
- **inside the step** for indices the program computes: one ``all`` per index input, returned
  with the step's outputs; every donated state buffer then leaves the step as
  ``where(all_ok, new, old)``, so a failed run hands back the old state.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import jax.numpy as jnp
import numpy as np

from ..ir import registry
from ..ir.errors import BoundExceededError, IndexOutOfRangeError, LoDError
from .lod_value import LoDValue, bucket


@dataclasses.dataclass(frozen=True)
class IndexInput:
    """Input ``slot`` holds indices into ``[0, size)``; ``ignore`` (a label to skip) is allowed too.
    ``component``: only ``values[..., component]`` (gather_nd's per-dimension coordinates)."""

    slot: str
    size: int
    ignore: int | None = None
    component: int | None = None


# op type -> fn(attr, shape) -> [IndexInput]; ``attr(name)`` gives an attribute (or its
# default), ``shape(slot)`` the shape of the slot's first input (-1 for an unknown dim at plan time).
INDEX_SPECS: dict[str, Callable] = {}


def index_inputs(op_type: str):
    """Declare which inputs of ``op_type`` hold indices, and their ranges."""
    def register(fn):
        INDEX_SPECS[op_type] = fn
        return fn
    return register


def specs_of(op, shape: Callable[[str], Sequence[int]]) -> list[IndexInput]:
    """The index inputs of ``op`` (empty for an op that takes none)."""
    fn = INDEX_SPECS.get(op.type)
    if fn is None:
        return []
    opdef = registry.get(op.type)

    def attr(name):
        if name in op.attrs:
            return op.attrs[name]
        spec = opdef.attrs.get(name)
        return spec.default if spec is not None else None

    return [s for s in fn(attr, shape) if op.inputs.get(s.slot)]


def _allowed(spec: IndexInput) -> str:
    return f"[0, {spec.size})" + (f" (or ignore_index {spec.ignore})" if spec.ignore is not None else "")


def index_error(op, spec: IndexInput, variable: str, value: int, before_run: bool) -> IndexOutOfRangeError:
    """The error for an index outside its range, naming the op, the variable and the user's line."""
    where = op.location
    what = f"input {spec.slot}" + (f" (coordinate {spec.component})" if spec.component is not None else "")
    state = ("Nothing ran" if before_run else "The run was not applied") + "; the scope is as before it."
    return IndexOutOfRangeError(
        f"op {op.type!r} created at {where}: {what} (variable {variable!r}) holds an index outside "
        f"{_allowed(spec)}: got {value}. {state} (Turn this check off with "
        "fj.set_flags({'FLAGS_check_index': False}).)",
        op_type=op.type, variable=variable, location=where)


@dataclasses.dataclass
class HostIndexCheck:
    """An index check done on a fed array before the step runs."""

    feed: str
    op: object
    spec: IndexInput
    variable: str

    def __call__(self, value) -> None:
        if value.__class__ is LoDValue:
            value = value.data                                 # a LoD feed: its (zero-padded) rows
        arr = np.asarray(value)
        if self.spec.component is not None:
            arr = arr[..., self.spec.component]
        if arr.size == 0:
            return
        kind = arr.dtype.kind
        # One reduction: seen as unsigned, a negative index is huge, so max < size checks both ends.
        if kind == "i" and arr.view(arr.dtype.str.replace("i", "u")).max() < self.spec.size:
            return
        if kind == "u" and arr.max() < self.spec.size:
            return
        bad = (arr < 0) | (arr >= self.spec.size)
        if self.spec.ignore is not None:
            bad &= arr != self.spec.ignore
        if bad.any():
            raise index_error(self.op, self.spec, self.variable, int(arr[bad].reshape(-1)[0]), before_run=True)


class StepChecks:
    """The checks collected while a step is traced (``run_op`` adds to it).

    A sub-block collects its own (:meth:`child`); the op that owns it carries them out of its
    ``lax.cond`` / ``lax.while_loop`` / ``lax.scan`` as one packed pair of arrays (:meth:`packed`,
    merged across iterations by :func:`merge_packed`) and hands them to its own collector
    (:meth:`add_packed`), so a check inside any sub-block reaches the step's outputs.
    Bound checks (:meth:`check_bound`: an array's room, a ``padded_length``) are always on.
    """

    def __init__(self, index: bool, nan_inf: bool, host_checked: frozenset = frozenset()) -> None:
        self.index = index
        self.nan_inf = nan_inf
        self.host_checked = host_checked      # (id(op), slot, component) checked on the host
        self.items: list[tuple] = []          # (ok, offending value or None, info)

    def child(self) -> "StepChecks":
        """An empty collector for a sub-block's ops, with the same flags."""
        return StepChecks(self.index, self.nan_inf, self.host_checked)

    def infos(self) -> list[dict]:
        return [info for _, _, info in self.items]

    def packed(self):
        """The checks as (oks [k] bool, values [k] int64): what a sub-block hands its owner."""
        oks = jnp.stack([jnp.asarray(ok, bool).reshape(()) for ok, _, _ in self.items])
        values = jnp.stack([jnp.zeros((), jnp.int64) if v is None else jnp.asarray(v).astype(jnp.int64).reshape(())
                            for _, v, _ in self.items])
        return oks, values

    def add_packed(self, packed, infos: Sequence[dict]) -> None:
        """Checks a sub-block collected (``packed`` as :meth:`packed` gives, carried out of its loop
        or branch), with their static descriptions."""
        oks, values = packed
        for k, info in enumerate(infos):
            self.items.append((oks[k], values[k], info))

    def check_bound(self, op, ok, value, info: dict) -> None:
        """A size the step fixes holds (``ok``); ``value`` is what the data needed. ``info``: ``kind``
        ``"room"`` (an array's room; the Executor grows it and runs again, see :func:`grow_rooms`)
        or ``"bound"`` (a fixed size: the run fails), ``bound`` and a ``message``."""
        self.items.append((jnp.asarray(ok, bool).reshape(()), jnp.asarray(value).astype(jnp.int64).reshape(()),
                           {"op": op, "variable": None, **info}))

    def check_indices(self, op, values: dict) -> None:
        """In-step checks of ``op``'s index inputs that the host did not check already."""
        if not self.index or op.type not in INDEX_SPECS:
            return
        for spec in specs_of(op, lambda slot: getattr((values.get(slot) or [None])[0], "shape", None)):
            if (id(op), spec.slot, spec.component) in self.host_checked:
                continue
            index = values[spec.slot][0]
            if index is None or np.size(index) == 0:
                continue
            real_rows = None
            if index.__class__ is LoDValue:                  # computed LoD ids: only real rows count
                real_rows = index.row_mask()
                index = index.data
            index = jnp.asarray(index)
            if spec.component is not None:
                index = index[..., spec.component]
            valid = (index >= 0) & (index < spec.size)
            if spec.ignore is not None:
                valid = valid | (index == spec.ignore)
            if real_rows is not None and valid.ndim >= 1:
                valid = valid | ~real_rows.reshape(real_rows.shape + (1,) * (valid.ndim - 1))
            flat = valid.reshape(-1)
            first_bad = index.reshape(-1)[jnp.argmin(flat)].astype(jnp.int64)
            self.items.append((jnp.all(flat), first_bad, {"kind": "index", "op": op, "spec": spec,
                                                          "variable": op.inputs[spec.slot][0]}))

    def check_finite(self, op, slot: str, name: str, value) -> None:
        """Under ``FLAGS_check_nan_inf``: ``value`` (output ``slot`` of ``op``) holds no NaN or Inf.
        Of a LoD value only the real rows count: padding rows are never part of a result (a ``log``
        of a zero padding row is -inf and harmless)."""
        if value.__class__ is LoDValue:
            real = value.row_mask().reshape((-1,) + (1,) * (value.data.ndim - 1))
            finite = jnp.all(jnp.isfinite(value.data) | ~real)
        else:
            finite = jnp.all(jnp.isfinite(value))
        self.items.append((finite, None, {
            "kind": "nan_inf", "op": op, "variable": name,
            "message": f"output {slot} (variable {name!r}) holds NaN or Inf"}))


# Ops that pass their input's values through unchanged (only the shape or layout changes):
# an index fed through them is still checked on the host.
_VALUE_PRESERVING = frozenset({"reshape2", "reshape", "squeeze2", "squeeze", "unsqueeze2", "unsqueeze",
                               "flatten_contiguous_range", "flatten2", "flatten", "assign", "transpose2"})


def fed_source(name: str, feeds: set, producers: dict) -> str | None:
    """The feed whose values variable ``name`` holds unchanged, if any."""
    for _ in range(64):
        if name in feeds:
            return name
        op = producers.get(name)
        if op is None or op.type not in _VALUE_PRESERVING or len(op.input("X")) != 1:
            return None
        name = op.input("X")[0]
    return None


# -- checks carried through loops, and bounds -------------------------------------------------------
# op type -> when(op): whether the op checks a bound the step fixes (an array's room, a
# padded_length) at run time. Such checks are always on: a step containing one returns check flags.
BOUND_CHECKED: dict[str, Callable] = {}


def bound_checked(op_type: str, when: Callable = lambda op: True) -> None:
    """Declare that ``op_type`` (when ``when(op)``) checks a bound inside the step (``check_bound``)."""
    BOUND_CHECKED[op_type] = when


def has_bound_checks(ops) -> bool:
    """Whether any of ``ops`` (sub-blocks' ops included by the caller) checks a bound at run time."""
    return any(op.type in BOUND_CHECKED and BOUND_CHECKED[op.type](op) for op in ops)


def all_ok(infos: Sequence[dict]):
    """The packed checks of an iteration that failed nothing."""
    return jnp.ones((len(infos),), bool), jnp.zeros((len(infos),), jnp.int64)


def merge_packed(before, now, infos: Sequence[dict]):
    """Checks of the iterations so far and of this one: a check holds if it held in both; its value
    is the first failure's, or for an array's room the largest room needed."""
    (ok_a, val_a), (ok_b, val_b) = before, now
    room = np.array([info.get("kind") == "room" for info in infos], bool)
    value = jnp.where(room, jnp.maximum(val_a, val_b), jnp.where(ok_a, val_b, val_a))
    return ok_a & ok_b, value


def reduce_stacked(packed, infos: Sequence[dict]):
    """Checks stacked over the steps of a scan ([T, k]) as one packed pair."""
    oks, values = packed
    if oks.shape[0] == 0:
        return all_ok(infos)
    room = np.array([info.get("kind") == "room" for info in infos], bool)
    first = jnp.argmin(oks, axis=0)
    picked = jnp.take_along_axis(values, first[None, :], axis=0)[0]
    return jnp.all(oks, axis=0), jnp.where(room, jnp.max(values, axis=0), picked)


# Array rooms that runs found too small: program -> (its version, {room key: elements}). A room
# key is (block index, op index) of the ``while`` op whose loop fixes the room, or of the
# ``write_to_array`` op outside loops whose index is computed. Read when a step is traced.
def room_of(op, default: int, key: tuple = ()) -> int:
    """The room ``op`` (a ``while`` or ``write_to_array``) fixes: ``default`` unless a run needed more.
    ``key`` names another size the op fixes the same way (a loop variable's bound on its longest
    sequence: ``("longest", name, level)``; a check's ``room_key``)."""
    store = getattr(op.block.program, "_array_rooms", None)
    if store is None or store[0] != op.block.program._version:
        return default
    return max(default, store[1].get(_room_key(op) + tuple(key), 0))


def _room_key(op) -> tuple[int, int]:
    return op.block.idx, op.block.ops.index(op)


def grow_rooms(plan_ops_program, oks: np.ndarray, values: np.ndarray, infos: Sequence[dict], cap: int):
    """After a run whose array writes went past their room: the rooms grown (to the next power of
    two of what the run needed, at least doubled), so that the run can be done again; or the
    :class:`BoundExceededError` when a room would pass ``cap`` (``FLAGS_max_array_room``). None
    when no room check failed."""
    failed = [(info, int(v)) for ok, v, info in zip(oks, values, infos) if not ok and info.get("kind") == "room"]
    if not failed:
        return None
    program = plan_ops_program
    store = getattr(program, "_array_rooms", None)
    if store is None or store[0] != program._version:
        store = program._array_rooms = (program._version, {})
    for info, needed in failed:
        owner, room = info["owner"], info["room"]
        # ``needed`` is the capacity the writes asked for; a loop's room is per write op of its body
        # and each write got at least ``room`` elements, so room >= needed makes them fit.
        new = min(bucket(max(needed, 2 * room, 1)), cap)
        if needed > cap and info.get("what"):
            op = info["op"]
            return BoundExceededError(
                f"op {op.type!r} created at {op.location}: {info['what'].replace('{needed}', str(needed)).replace('{cap}', str(cap))} "
                "(FLAGS_max_array_room). The run was not applied; the scope is as before it.",
                op_type=op.type, bound=cap, location=op.location)
        if needed > cap:
            op = info["op"]
            return BoundExceededError(
                f"op {op.type!r} created at {op.location}: writes array {info['array']!r} at index {needed - 1} "
                f"(room for {needed} elements), but an array may have at most FLAGS_max_array_room = {cap} elements (its room is fixed when "
                f"the step compiles: {room} now). The run was not applied; the scope is as before it. Raise the "
                "cap with fj.set_flags({'FLAGS_max_array_room': n}), or bound the loop "
                "(layer.while_loop(..., max_iterations=n)).",
                op_type=op.type, bound=cap, location=op.location)
        key = _room_key(owner) + tuple(info.get("room_key", ()))
        store[1][key] = max(store[1].get(key, 0), new)
    return True


def array_read_value(index, length):
    """What a failed check of a tensor-array read reports: the index and the array's length in one
    int64 (index in the high 32 bits), as :func:`bound_error` reads it back."""
    return jnp.left_shift(jnp.asarray(index).astype(jnp.int64), 32) | jnp.asarray(length).astype(jnp.int64)


def bound_error(info: dict, value: int) -> BoundExceededError | LoDError | IndexOutOfRangeError:
    """The error of a failed ``"bound"`` check: the op, the bound, what the data needed, the user's
    line (a :class:`LoDError` for offsets the data breaks, an :class:`IndexOutOfRangeError` for a
    read of a tensor-array element no write reached, with the same attributes)."""
    op = info["op"]
    if info.get("array_read"):
        index, length = value >> 32, value & 0xFFFFFFFF
        why = (f"the array holds {length} element(s)" if not 0 <= index < length else
               f"element {index} was never written (the array holds {length}, with gaps)")
        return IndexOutOfRangeError(
            f"op {op.type!r} created at {op.location}: reads element {index} of tensor array {info['array']!r}, "
            f"but {why}; Paddle refuses this read too. Read only indices that a write reached (check "
            "array_length first). The run was not applied; the scope is as before it.",
            op_type=op.type, variable=info["array"], location=op.location)
    message = (f"op {op.type!r} created at {op.location}: {info['message']}: got {value}. The run was not "
               "applied; the scope is as before it.")
    if info.get("lod"):
        err = LoDError(message)
        err.op_type, err.bound, err.location = op.type, info.get("bound"), op.location
        return err
    return BoundExceededError(message, op_type=op.type, bound=info.get("bound"), location=op.location)


def count_origin(op, name: str, env):
    """The op that made the counted value ``name`` reaches ``op`` with: walking back through the
    ops of ``op``'s block that carried its count, the first that had no counted input (None when
    it was made outside the block)."""
    ops = list(op.block.ops)
    index = next((k for k, o in enumerate(ops) if o is op), len(ops))
    origin = None
    lookup = getattr(env, "get", lambda _: None)
    for _ in range(len(ops)):
        writer = next((k for k in range(index - 1, -1, -1) if name in ops[k].output_arg_names), None)
        if writer is None:
            return origin
        origin = ops[writer]

        def _counted(n, o=origin):
            var = o.block.find_var(n)
            return lookup(n).__class__ is LoDValue and not (var is not None and var.lod_level)
        nxt = next((n for n in origin.input_arg_names if _counted(n)), None)
        if nxt is None:
            return origin
        name, index = nxt, writer
    return origin


def check_count(checks: StepChecks | None, op, env, name: str, ok, count, requirement: str) -> None:
    """In-step check that the real count of the counted input ``name`` of ``op`` meets what the op
    needs (``ok``, traced; ``count`` the real count). Paddle, which knows the count, refuses such a
    value; here the count is data, known only when the step runs, so a failed check is a
    ``BoundExceededError`` naming ``op``, its line, the op that produced the count and ``count``
    (``requirement`` says what the op needs, e.g. "reshape to rows of 2 needs a count divisible
    by 2"). The run is not applied. Nothing is checked without a collector (``checks`` None)."""
    if checks is None:
        return
    producer = count_origin(op, name, env)
    made = f"{producer.type!r} at {producer.location}" if producer is not None else "an earlier op"
    checks.check_bound(op, ok, count, {
        "kind": "bound", "bound": None,
        "message": (f"{requirement}; {name!r} was made by {made}, its real count is data and Paddle refuses "
                    "this one (make the count meet it, e.g. pad or slice to a fixed size, or drop this op); "
                    f"the count {producer.type if producer is not None else 'it'} produced")})


def may_be_counted(op, slot: str) -> bool:
    """Whether input ``slot`` of ``op`` may reach it as a counted value (for :func:`bound_checked`,
    so a step checks a count only where one can arrive): its declared rows are unknown (-1) and,
    walking back through ``op``'s block, some op makes unknown rows from inputs whose rows are all
    known (masked_select, unique, NMS: rows that are data). Fed values and values made outside
    the block do not count."""
    return any(_from_counted_rows(op, name) for name in op.inputs.get(slot, ()))


def several_counted(op) -> bool:
    """Whether two or more inputs of ``op`` may reach it as counted values (see
    :func:`may_be_counted`): an elementwise op then checks their counts agree."""
    return sum(_from_counted_rows(op, n) for n in dict.fromkeys(op.input_arg_names)) > 1


def _from_counted_rows(op, name: str) -> bool:
    return _counted_names(op.block).get(name, False)


# Ops whose output rows are a data-dependent count whatever their inputs' rows (a masked_select of
# a fed batch of unknown rows): besides those that make unknown rows out of known ones.
COUNT_SOURCES = frozenset("""where_index masked_select unique multiclass_nms multiclass_nms2 multiclass_nms3
matrix_nms locality_aware_nms generate_proposals generate_proposals_v2""".split())

_COUNTED_NAMES: list = [None, None]       # (key of the block last walked, its result)


def _counted_names(block) -> dict:
    """One forward walk of ``block``'s ops: the names whose declared rows are unknown (-1) and come
    from an op that makes unknown rows out of tensors whose rows are all known (a data-dependent
    count), directly or through ops that carry unknown rows. Cached for the block last walked."""
    ops = list(block.ops)
    key = (id(block), len(ops), id(ops[-1]) if ops else None)
    if _COUNTED_NAMES[0] == key:
        return _COUNTED_NAMES[1]

    def rows(name):
        var = block.find_var(name)
        shape = getattr(var, "shape", None) if var is not None else None
        return None if not shape or getattr(var, "lod_level", 0) else shape[0]
    state: dict = {}
    for o in ops:
        ins = [rows(n) for n in o.input_arg_names]
        unknown = [n for n, r in zip(o.input_arg_names, ins) if r == -1]
        flag = (o.type in COUNT_SOURCES or (any(state.get(n, False) for n in unknown) if unknown
                                            else any(r is not None and r >= 0 for r in ins)))
        for n in o.output_arg_names:
            if rows(n) == -1:
                state[n] = flag
    _COUNTED_NAMES[:] = [key, state]
    return state
