"""Tensor arrays (``LOD_TENSOR_ARRAY`` variables) inside a compiled step: the :class:`TensorArray`
pytree and the ops on it (write_to_array, read_from_array, lod_array_length,
tensor_array_to_tensor), arrays whose elements are LoD tensors, and how the control-flow
gradients treat arrays and LoD values (through their buffers and rows).

The ops that build arrays from LoD tensors by rank (``lod_tensor_to_array``, ...) are in
``lod_array.py``; the loops that carry arrays in ``while_loop.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ...ir.errors import OpRuntimeError
from ...ir.names import OP_ROLE_BACKWARD
from ...ir.registry import op
from ...ir.shape import InferShapeContext
from ..checks import array_read_value, bound_checked, room_of
from ..lod_value import LoDValue
from ..lower import lod_aware
from ._control import _constant, _floating, _strong, _where


# -- tensor arrays ---------------------------------------------------------------------------------
# A LOD_TENSOR_ARRAY inside a step is a TensorArray: a buffer of static capacity plus its length
# (docs/control_flow.md). Outside loops each write grows the capacity by one at trace time; a
# loop grows the arrays its body writes before it starts (the carry keeps one shape).
DEFAULT_LOOP_CAPACITY = 64     # room per write op in a loop without max_iterations


_IN_LOOP = "@fluidjax:loop_array_room@"    # env marker inside a loop body: {array: room} ("*": any other)
_LOOP_OWNER = "@fluidjax:loop_owner@"      # env marker inside a loop body: (its while op, its trips)


@jax.tree_util.register_pytree_node_class
class TensorArray:
    """A tensor array: ``buffer`` [capacity, *element shape] and ``length`` (int32 scalar).

    ``written``: the indices written, when the whole history of the array is known while the step
    is traced (writes at constant indices outside loops), else None. It is no part of the pytree:
    an array carried through a loop or a branch comes out with None (unknown), never a wrong set.
    """

    __slots__ = ("buffer", "length", "written")

    def __init__(self, buffer, length, written: frozenset | None = None) -> None:
        self.buffer = buffer
        self.length = length
        self.written = written

    def full(self) -> bool:
        """Whether every slot of the buffer is known to be written (0 .. capacity - 1)."""
        return self.written is not None and self.written == frozenset(range(self.capacity))

    def tree_flatten(self):
        return (self.buffer, self.length), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)

    @property
    def capacity(self) -> int:
        return int(self.buffer.shape[0])

    def grown(self, extra: int) -> "TensorArray":
        """The same array with room for ``extra`` more elements."""
        if extra <= 0:
            return self

        def pad(a):
            return jnp.concatenate([a, jnp.zeros((extra,) + tuple(a.shape[1:]), a.dtype)])
        if isinstance(self.buffer, LoDValue):       # elements with LoD: unwritten ones are empty
            return TensorArray(LoDValue(pad(self.buffer.data), [pad(o) for o in self.buffer.offsets]), self.length,
                               self.written)
        return TensorArray(pad(self.buffer), self.length, self.written)

    def __add__(self, other: "TensorArray") -> "TensorArray":
        """Element-wise sum (gradient contributions to one array): the shorter one padded."""
        a, b = self.grown(other.capacity - self.capacity), other.grown(self.capacity - other.capacity)
        return TensorArray(a.buffer + b.buffer, jnp.maximum(a.length, b.length))

    def __array__(self, *args, **kwargs):
        raise TypeError("a tensor array cannot be fetched as one array: fetch an element read with "
                        "layer.array_read, or the array stacked by tensor_array_to_tensor")

    def __repr__(self) -> str:
        return f"TensorArray(capacity={self.capacity}, element={tuple(self.buffer.shape[1:])}, {self.buffer.dtype})"


def _index(ctx, slot: str = "I"):
    i = jnp.asarray(ctx.input(slot))
    if i.size != 1:
        raise OpRuntimeError(f"{_where(ctx.op)}: {slot} must hold one integer, got shape {tuple(i.shape)}")
    return i.reshape(()).astype(jnp.int32)


def _array(ctx, value, what: str) -> TensorArray:
    if not isinstance(value, TensorArray):
        raise OpRuntimeError(f"{_where(ctx.op)}: {what} is not a tensor array with elements (was it written?)")
    return value


def _write_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", x.shape, x.dtype, x.lod_level)


def _static_index(ctx) -> int | None:
    """The index input's value when a ``fill_constant`` before the op gives it (the usual case
    outside loops), or when it is known while the step is traced (a constant incremented
    outside loops), else None."""
    names = ctx.op.input("I")
    value = _constant(ctx.op.block, ctx.op, names[0]) if names else None
    if value is None:
        raw = ctx.input("I")
        if raw is not None and not isinstance(raw, jax.core.Tracer) and jnp.size(raw) == 1:
            value = int(jnp.asarray(raw).reshape(()))
    return int(value) if value is not None and value >= 0 else None


def _check_room(ctx, i, capacity: int, name: str, room) -> None:
    """A write at a traced index ``i`` into an array of fixed ``capacity``: the step reports a
    write past it (``checks.grow_rooms`` gives the loop, or this op, more room and the run is
    done again), never drops it silently."""
    if ctx.checks is None:
        return
    owner, trips = ctx.env.get(_LOOP_OWNER) if room else (ctx.op, capacity)
    ctx.checks.check_bound(ctx.op, i < capacity, i + 1,
                           {"kind": "room", "owner": owner, "room": trips, "array": name,
                            "bound": capacity})


def _writes_may_overflow(op_) -> bool:
    """Whether a ``write_to_array`` has a room its data may pass: inside a sub-block (a loop fixes
    the room), or at an index no ``fill_constant`` gives."""
    if op_.block.idx != 0:
        return True
    names = op_.input("I")
    return not names or _constant(op_.block, op_, names[0]) is None


bound_checked("write_to_array", _writes_may_overflow)


def _write_to_array_grad(op, out_grads, in_grads):
    # Paddle's: the gradient of a write reads the array's gradient at the same index.
    return [("read_from_array", {"X": out_grads["Out"], "I": op.input("I")}, {"Out": in_grads["X"]}, {})]


def _read_from_array_grad(op, out_grads, in_grads):
    # Paddle's: the gradient of a read writes the element's gradient into the array's.
    return [("write_to_array", {"X": out_grads["Out"], "I": op.input("I")}, {"Out": in_grads["X"]}, {})]


@op("write_to_array", inputs="X I", outputs="Out", infer_shape=_write_shape, no_grad_inputs=["I"],
    grad_maker=_write_to_array_grad)
def write_to_array(ctx):
    """Out[I] = X; the array grows to I + 1 elements when shorter (Paddle's semantics)."""
    raw = ctx.input("X")
    name = ctx.op.output("Out")[0]
    array = ctx.env.get(name)
    room = ctx.env.get(_IN_LOOP)
    if isinstance(room, dict):
        room = room.get(name) or room.get("*")
    if isinstance(raw, LoDValue) or (isinstance(array, TensorArray) and isinstance(array.buffer, LoDValue)):
        # An element keeps its LoD (or the count of its rows, when that is data)
        if not isinstance(raw, LoDValue) and jnp.ndim(raw) == 0:
            raise OpRuntimeError(f"{_where(ctx.op)}: array {name!r} holds LoD tensors (rows); X is a scalar")
        item = raw if isinstance(raw, LoDValue) else counted(_strong(jnp.asarray(raw)))
        static = None if room else _static_index(ctx)
        out = write_lod_item(ctx, item, _index(ctx), array, static, room)
        if room or static is None:
            _check_room(ctx, _index(ctx), out.buffer.data.shape[0], name, room)
        out.written = _written_after(array, static, room)
        return {"Out": out}
    x = _strong(jnp.asarray(raw))
    i = _index(ctx)
    static = None if room else _static_index(ctx)
    if not isinstance(array, TensorArray):
        capacity = room if room else (static + 1 if static is not None else room_of(ctx.op, 1))
        array = TensorArray(jnp.zeros((capacity,) + x.shape, x.dtype), jnp.zeros((), jnp.int32))
    elif not room:
        needed = static + 1 if static is not None else room_of(ctx.op, array.capacity + 1)
        array = array.grown(needed - array.capacity)
    if tuple(array.buffer.shape[1:]) != x.shape:
        raise OpRuntimeError(f"{_where(ctx.op)}: array {name!r} holds elements of shape "
                             f"{tuple(array.buffer.shape[1:])}, X has shape {x.shape}; under XLA every element "
                             "of an array has one shape")
    if room or static is None:
        _check_room(ctx, i, array.capacity, name, room)
    written = _written_after(ctx.env.get(name), static, room)
    buffer = array.buffer.at[i].set(x.astype(array.buffer.dtype), mode="drop")
    length = jnp.minimum(jnp.maximum(array.length, i + 1), array.capacity)
    return {"Out": TensorArray(buffer, length.astype(jnp.int32), written)}


def _written_after(before, static: int | None, room) -> frozenset | None:
    """The indices known written after a write at ``static`` (None: not known) into ``before``
    (the array as it was, or no array yet); None when any part of the history is unknown."""
    if room or static is None:
        return None
    if not isinstance(before, TensorArray):
        return frozenset({static})
    return None if before.written is None else before.written | {static}


# Sub-blocks see LoD values as they are (a DynamicRNN step pools its LoD static input).
lod_aware("write_to_array")


def _read_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", x.shape, x.dtype, x.lod_level)     # an element keeps the LoD it was written with


def _forward(op_) -> bool:
    return not int(op_.attrs.get("op_role", 0) or 0) & OP_ROLE_BACKWARD


# A forward read checks its index against the elements written (always on, as Paddle refuses such
# a read). A backward read (the gradient of a write) reads the gradient array, whose unwritten
# elements are zero gradients.
bound_checked("read_from_array", _forward)


def _check_written(ctx, i, array: TensorArray, what: str) -> None:
    """The step refuses (an :class:`IndexOutOfRangeError`) when element ``i`` of ``array`` was
    never written: ``i`` outside [0, length), or a slot below the length that no write reached
    (known when the array's writes are known while the step is traced)."""
    if ctx.checks is None or not _forward(ctx.op):
        return
    ok = (i >= 0) & (i < array.length)
    if array.written is not None and not array.full():
        mask = jnp.asarray([k in array.written for k in range(array.capacity)], bool)
        ok = ok & mask[jnp.clip(i, 0, array.capacity - 1)]
    packed = array_read_value(i, array.length)
    ctx.checks.check_bound(ctx.op, ok, packed, {"kind": "bound", "array_read": True, "array": what,
                                                 "bound": array.capacity, "message": ""})


@op("read_from_array", inputs="X I X_W?", outputs="Out", infer_shape=_read_shape, no_grad_inputs=["I", "X_W"],
    grad_maker=_read_from_array_grad)
def read_from_array(ctx):
    """Out = X[I]. Reading an element no write reached (I at or past the array's length, negative,
    or a slot never written) is refused with an :class:`IndexOutOfRangeError`, as Paddle refuses it;
    the gradient pass reads zeros there (a zero gradient)."""
    array = _array(ctx, ctx.input("X"), "X")
    i = _index(ctx)
    _check_written(ctx, i, array, ctx.op.input("X")[0])
    if isinstance(array.buffer, LoDValue):
        return {"Out": read_lod_item(array, i)}
    element = lax.dynamic_index_in_dim(array.buffer, jnp.clip(i, 0, array.capacity - 1), keepdims=False)
    return {"Out": jnp.where((i >= 0) & (i < array.length), element, jnp.zeros_like(element))}


def _length_shape(ctx: InferShapeContext) -> None:
    ctx.set_output("Out", (1,), "int64", 0)


@op("lod_array_length", inputs="X", outputs="Out", infer_shape=_length_shape, grad=None)
def lod_array_length(ctx):
    """The number of elements of array X, int64 of shape [1]."""
    value = ctx.input("X")
    length = value.length if isinstance(value, TensorArray) else jnp.zeros((), jnp.int32)
    return {"Out": length.astype(jnp.int64).reshape(1)}


def _to_tensor_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis = int(ctx.attr("axis") or 0)
    shape = list(x.shape)
    if ctx.attr("use_stack"):
        axis = axis + len(shape) + 1 if axis < 0 else axis
        shape.insert(axis, -1)
    elif shape:
        axis = axis + len(shape) if axis < 0 else axis
        shape[axis] = -1
    ctx.set_output("Out", shape, x.dtype, 0)
    ctx.set_output("OutIndex", (-1,), "int32", 0)


@op("tensor_array_to_tensor", inputs="X", outputs="Out OutIndex", attrs={"axis": 0, "use_stack": False},
    infer_shape=_to_tensor_shape, no_grad_outputs=["OutIndex"], grad=None)
def tensor_array_to_tensor(ctx):
    """The array's elements stacked (``use_stack``) or concatenated along ``axis``; OutIndex gives
    each element's size along ``axis``. Only written elements count: an array known to be full
    (writes at constant indices 0 .. n-1 outside loops) gives plain tensors; otherwise its number
    of elements is data (a loop's array has the loop's room), and along axis 0 the results carry
    their real row count (a counted value: a fetch is cut to it, row-wise ops honour it); along
    another axis the step refuses an array that is not full (a :class:`BoundExceededError`)."""
    array = _array(ctx, ctx.input("X"), "X")
    if isinstance(array.buffer, LoDValue):
        raise OpRuntimeError(f"{_where(ctx.op)}: the array holds LoD tensors; tensor_array_to_tensor takes "
                             "an array of plain tensors")
    elements = [array.buffer[k] for k in range(array.capacity)]
    axis = int(ctx.attr("axis"))
    if ctx.attr("use_stack"):
        out = jnp.stack(elements, axis=axis)
        index = jnp.ones((len(elements),), jnp.int32)
        per_element = 1
        axis = axis + out.ndim if axis < 0 else axis
    else:
        out = jnp.concatenate(elements, axis=axis)
        per_element = int(elements[0].shape[axis]) if elements[0].ndim else 1
        index = jnp.full((len(elements),), per_element, jnp.int32)
        axis = axis + out.ndim if axis < 0 else axis
    if array.full():
        return {"Out": out, "OutIndex": index}
    if axis == 0:
        return {"Out": _counted_rows(out, array.length * per_element),
                "OutIndex": _counted_rows(index, array.length)}
    if ctx.checks is not None:
        name = ctx.op.input("X")[0]
        ctx.checks.check_bound(ctx.op, array.length == array.capacity, array.length, {
            "kind": "bound", "bound": array.capacity,
            "message": f"joins tensor array {name!r} along axis {axis}, but only some of its {array.capacity} "
                       "slots (its room) were written, and along an axis other than 0 the result cannot carry "
                       "a count. Write every slot (a loop's room is its max_iterations), or join along axis 0; "
                       "elements written"})
    return {"Out": out, "OutIndex": index}


def _counted_rows(data, count) -> LoDValue:
    """``data`` whose first ``count`` rows are real (a counted value of one sequence; the rows past
    them zeroed): what a fetch cuts, and what row-wise ops honour."""
    count = jnp.asarray(count, jnp.int32)
    real = (jnp.arange(data.shape[0]) < count).reshape((-1,) + (1,) * (data.ndim - 1))
    return LoDValue(jnp.where(real, data, jnp.zeros((), data.dtype)),
                    (jnp.stack([jnp.zeros((), jnp.int32), count]),))


# A join of an array whose fullness is data checks it (see tensor_array_to_tensor).
bound_checked("tensor_array_to_tensor", lambda op_: int(op_.attrs.get("axis", 0) or 0) != 0)


# -- arrays of LoD elements ---------------------------------------------------------------------------
# An array whose elements are LoD tensors (beam search's per-step ids and scores) holds them as one
# LoDValue buffer: data [capacity, rows, ...] and each level's offsets [capacity, entries]. Elements
# with fewer rows or inner-level entries are padded (zero rows; inner levels repeat their last
# offset, i.e. empty sequences at the end); every element's outermost level has one length. In a
# loop the capacity and the element size are fixed before it starts (while_loop._Loop widens
# them to what the body writes); plain rows whose count is data are stored as one sequence.
def _pad_axis(a, size: int, axis: int, edge: bool = False):
    extra = size - a.shape[axis]
    if extra <= 0:
        return a
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, extra)
    return jnp.pad(a, widths, mode="edge" if edge else "constant")


def _declared_lod(ctx, name: str) -> int:
    var = ctx.op.block.find_var(name)
    return int(var.lod_level) if var is not None else 0


def counted(x) -> LoDValue:
    """A plain tensor as a one-sequence LoD value: its rows, all real (how an array that also holds
    counted rows, whose number is data, stores it)."""
    return LoDValue(x, (jnp.stack([jnp.zeros((), jnp.int32), jnp.asarray(x.shape[0], jnp.int32)]),))


def counted_array(array: TensorArray) -> TensorArray:
    """An array of plain elements as an array of one-sequence LoD elements (see :func:`counted`);
    its unwritten elements are empty."""
    data = array.buffer
    capacity, rows = data.shape[0], data.shape[1] if data.ndim > 1 else 1
    written = jnp.arange(capacity) < array.length
    ends = jnp.where(written, rows, 0).astype(jnp.int32)
    offsets = jnp.stack([jnp.zeros_like(ends), ends], axis=1)
    return TensorArray(LoDValue(data, (offsets,)), array.length)


def widened(array: TensorArray, like: TensorArray) -> TensorArray:
    """``array`` with elements as wide as ``like``'s (a shape structure: what a loop body writes):
    plain elements become counted ones, rows and inner-level entries are padded. ``array`` itself
    when nothing changes."""
    if not isinstance(like.buffer, LoDValue):
        return array
    if not isinstance(array.buffer, LoDValue):
        if len(like.buffer.offsets) != 1:
            return array
        array = counted_array(array)
    buffer = array.buffer
    if len(buffer.offsets) != len(like.buffer.offsets) or buffer.data.ndim != like.buffer.data.ndim:
        return array
    rows = max(buffer.data.shape[1], like.buffer.data.shape[1])
    entries = [max(o.shape[1], w.shape[1]) for o, w in zip(buffer.offsets, like.buffer.offsets)]
    if rows == buffer.data.shape[1] and all(e == o.shape[1] for e, o in zip(entries, buffer.offsets)):
        return array
    return TensorArray(LoDValue(_pad_axis(buffer.data, rows, 1),
                                [_pad_axis(o, e, 1, edge=True) for o, e in zip(buffer.offsets, entries)]),
                       array.length)


def write_lod_item(ctx, x: LoDValue, i, array, static_index, room: int | None = None):
    """``array`` (a TensorArray with a LoDValue buffer, or None) with ``x`` written at ``i``.
    Outside loops (``room`` None) the array grows to hold index ``i``; inside a loop its capacity
    is fixed (a new array gets ``room`` elements) and an element only widens to the larger rows."""
    data = jnp.asarray(x.data)
    offsets = [jnp.asarray(o, jnp.int32) for o in x.offsets]
    if isinstance(array, TensorArray) and not isinstance(array.buffer, LoDValue):
        if len(offsets) != 1 or _declared_lod(ctx, ctx.op.input("X")[0]):
            raise OpRuntimeError(f"{_where(ctx.op)}: the array holds plain tensors; X is a LoD tensor")
        array = counted_array(array)            # plain rows whose count is data, next to plain ones
    if not isinstance(array, TensorArray):
        capacity = room if room else (static_index + 1 if static_index is not None else room_of(ctx.op, 1))
        buffer = LoDValue(jnp.zeros((capacity,) + data.shape, data.dtype),
                          [jnp.zeros((capacity,) + o.shape, jnp.int32) for o in offsets])
        length = jnp.zeros((), jnp.int32)
    else:
        buffer, length = array.buffer, array.length
        if len(buffer.offsets) != len(offsets):
            raise OpRuntimeError(f"{_where(ctx.op)}: the array's elements have {len(buffer.offsets)} LoD levels, "
                                 f"X has {len(offsets)}")
        if buffer.offsets[0].shape[1] != offsets[0].shape[0]:
            raise OpRuntimeError(f"{_where(ctx.op)}: the array's elements have {buffer.offsets[0].shape[1] - 1} "
                                 f"top-level sequences, X has {offsets[0].shape[0] - 1}; under XLA they must agree")
        capacity = buffer.data.shape[0]
        needed = static_index + 1 if static_index is not None else room_of(ctx.op, capacity + 1)
        if needed > capacity and not room:
            grow = needed - capacity
            buffer = LoDValue(_pad_axis(buffer.data, needed, 0),
                              [jnp.concatenate([o, jnp.zeros((grow,) + o.shape[1:], o.dtype)]) for o in buffer.offsets])
            capacity = needed
    # one row count and one length per level for every element: pad the smaller side
    rows = max(buffer.data.shape[1], data.shape[0])
    stored = _pad_axis(buffer.data, rows, 1)
    data = _pad_axis(data, rows, 0)
    levels_old, levels_new = [], []
    for old, new in zip(buffer.offsets, offsets):
        n = max(old.shape[1], new.shape[0])
        levels_old.append(_pad_axis(old, n, 1, edge=True))
        levels_new.append(_pad_axis(new, n, 0, edge=True))
    stored = stored.at[i].set(data.astype(stored.dtype), mode="drop")
    levels = [o.at[i].set(n, mode="drop") for o, n in zip(levels_old, levels_new)]
    length = jnp.minimum(jnp.maximum(length, i + 1), capacity).astype(jnp.int32)
    return TensorArray(LoDValue(stored, levels), length)


def read_lod_item(array, i) -> LoDValue:
    """Element ``i`` of an array of LoD elements."""
    buffer = array.buffer
    k = jnp.clip(i, 0, buffer.data.shape[0] - 1)
    return LoDValue(buffer.data[k], tuple(o[k] for o in buffer.offsets))


# -- gradients through arrays and LoD values ---------------------------------------------------------
# A tensor array is differentiated through its buffer (its length is an integer).
# A LoD value is differentiated through its rows (its offsets are integers).
def _diffable(value) -> bool:
    return _floating(value) or (isinstance(value, TensorArray) and _floating(value.buffer))


def _leaf(value):
    """The differentiable array of a value: a LoD value's rows, an array's buffer (the rows of an
    array of LoD elements: a DynamicRNN memory initialised from a LoD encoder output)."""
    if isinstance(value, LoDValue):
        return value.data
    if isinstance(value, TensorArray):
        return value.buffer.data if isinstance(value.buffer, LoDValue) else value.buffer
    return value


def _put(template, leaf):
    """``leaf`` in ``template``'s structure (its offsets and length held fixed): undoes _leaf."""
    if isinstance(template, LoDValue):
        return LoDValue(leaf, template.offsets)
    if isinstance(template, TensorArray):
        if isinstance(template.buffer, LoDValue):
            return TensorArray(LoDValue(leaf, template.buffer.offsets), template.length)
        return TensorArray(leaf, template.length)
    return leaf


def _with_leaves(values: dict, leaves: dict) -> dict:
    return {**values, **{n: _put(values[n], v) for n, v in leaves.items()}}


def _fit_cotangent(ct, like):
    """An output gradient shaped as ``like`` (zeros when absent; an array's buffer cut or padded
    to the loop's capacity)."""
    if ct is None:
        return jnp.zeros_like(like)
    if isinstance(ct, LoDValue):
        ct = ct.data
        if ct.ndim == like.ndim and ct.ndim and ct.shape[0] != like.shape[0]:     # other padding
            rows = like.shape[0]
            ct = ct[:rows] if ct.shape[0] > rows else jnp.concatenate(
                [ct, jnp.zeros((rows - ct.shape[0],) + tuple(ct.shape[1:]), ct.dtype)])
    if isinstance(ct, TensorArray):
        buf = (ct.buffer.data if isinstance(ct.buffer, LoDValue) else ct.buffer).astype(like.dtype)
        rows = like.shape[0]
        if buf.shape[0] < rows:
            buf = jnp.concatenate([buf, jnp.zeros((rows - buf.shape[0],) + tuple(buf.shape[1:]), buf.dtype)])
        return buf[:rows].reshape(like.shape)
    return jnp.asarray(ct, like.dtype).reshape(like.shape)
