"""``LoDTensor``: an array plus its level-of-detail offsets, as held by a scope variable.

The methods follow Paddle's ``core.LoDTensor`` (``set``, ``lod``, ``set_lod``,
``recursive_sequence_lengths``, ``set_recursive_sequence_lengths``,
``has_valid_recursive_sequence_lengths``, ``shape``) and seed 004's Caffe2 tensor: ``resize``
records dims and allocates nothing; memory appears at ``mutable_data``; ``share_data_with``,
``extend`` and ``shrink`` work on the outermost dimension.

**The LoD always fits the data.** Paddle checks a LoD against the data only in ``set_lod``;
``set`` of data of another length leaves a stale LoD behind. Here every method that changes
either the LoD or the data's first dimension checks the two against each other (Paddle's
``CheckLoD`` rules, see :func:`check_lod`) and raises a :class:`~fluidjax.ir.errors.LoDError` (a
``ValueError``) naming the broken rule, changing nothing; a LoD that is not lists of integers is a
:class:`~fluidjax.ir.errors.LoDTypeError` (also a ``TypeError``). To give a tensor new data *and* a new LoD, clear the LoD first
(``t.set_lod([])``), or build a new tensor (:func:`create_lod_tensor`). One deliberate difference:
Paddle skips the last-offset check when the data has 0 rows; here ``[[0, 2]]`` on 0 rows is
refused like on any other row count.

The Executor reads ``value()`` (or ``_value``) and ``lod()``, and may write ``_value`` directly;
the shape is therefore always derived from the held value when there is one.
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

import jax
import numpy as np

from ..ir import dtypes
from ..ir.errors import LoDError, LoDTypeError

__all__ = ["LoDTensor", "check_lod", "lod_problem", "lengths_to_offsets", "offsets_to_lengths", "create_lod_tensor",
           "create_random_int_lodtensor"]


# --------------------------------------------------------------------------------------------
# LoD rules and conversions


def _as_levels(lod: Any, what: str) -> list[list[int]]:
    """``lod`` as a list of lists of Python ints, or a TypeError saying what shape it must have."""
    if isinstance(lod, (str, bytes)) or not hasattr(lod, "__iter__"):
        raise LoDTypeError(f"{what} must be a list of levels, each a list of integers (like [[2, 3]]); "
                        f"got {type(lod).__name__}")
    levels = []
    for i, level in enumerate(lod):
        if isinstance(level, (str, bytes)) or not hasattr(level, "__iter__"):
            raise LoDTypeError(f"{what} must be a list of levels, each a list of integers (like [[2, 3]]); "
                            f"level {i} is {level!r}")
        out = []
        for n in level:
            if isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Integral):
                raise LoDTypeError(f"{what}: level {i} holds {n!r} ({type(n).__name__}); entries must be integers")
            out.append(int(n))
        levels.append(out)
    return levels


def lengths_to_offsets(lengths: Sequence[Sequence[int]]) -> list[list[int]]:
    """Paddle's offset-based LoD from recursive sequence lengths; lengths must be non-negative.

    >>> lengths_to_offsets([[2, 1], [3, 4, 2]])
    [[0, 2, 3], [0, 3, 7, 9]]
    """
    levels = _as_levels(lengths, "recursive_sequence_lengths")
    lod = []
    for i, level in enumerate(levels):
        if any(n < 0 for n in level):
            raise LoDError(f"recursive_sequence_lengths {levels}: level {i} has a negative length "
                             f"({min(level)}); sequence lengths must be non-negative")
        offsets = [0]
        for n in level:
            offsets.append(offsets[-1] + n)
        lod.append(offsets)
    return lod


def offsets_to_lengths(lod: Sequence[Sequence[int]]) -> list[list[int]]:
    """Recursive sequence lengths from an offset-based LoD.

    >>> offsets_to_lengths([[0, 2, 3], [0, 3, 7, 9]])
    [[2, 1], [3, 4, 2]]
    """
    return [[b - a for a, b in zip(level, level[1:])] for level in _as_levels(lod, "LoD")]


def lod_problem(lod: Sequence[Sequence[int]], rows: int | None = None) -> str | None:
    """The first of Paddle's LoD rules that ``lod`` breaks (a sentence), or None if it is valid.

    ``rows`` is the data's first dimension (None: not known, that rule is not checked).

    >>> print(lod_problem([[0, 2, 5]], rows=4))
    the last level ends at offset 5, but the data has 4 rows: the last offset must equal the data's first dimension
    >>> lod_problem([[0, 2, 5]], rows=5) is None
    True
    """
    levels = _as_levels(lod, "LoD")
    for i, offsets in enumerate(levels):
        if len(offsets) < 2:
            return (f"level {i} {offsets} has {len(offsets)} offset(s): a level needs at least 2 "
                    "(0 and the end of its first sequence)")
        if offsets[0] != 0:
            return f"level {i} {offsets} starts at {offsets[0]}: offsets must start at 0"
        for j in range(1, len(offsets)):
            if offsets[j] < offsets[j - 1]:
                return (f"level {i} {offsets} goes from {offsets[j - 1]} down to {offsets[j]} at position {j}: "
                        "offsets must be non-decreasing")
    for i in range(len(levels) - 1):
        entries = len(levels[i + 1]) - 1
        if levels[i][-1] != entries:
            return (f"level {i} ends at offset {levels[i][-1]}, but level {i + 1} has {entries} sequence(s): "
                    "each level's last offset must equal the number of entries of the next level")
    if levels and rows is not None and levels[-1][-1] != rows:
        return (f"the last level ends at offset {levels[-1][-1]}, but the data has {rows} rows: "
                "the last offset must equal the data's first dimension")
    return None


def check_lod(lod: Sequence[Sequence[int]], rows: int | None = None, what: str = "LoD") -> list[list[int]]:
    """``lod`` as lists of ints if it satisfies Paddle's rules, else a :class:`LoDError` (a
    ``ValueError``) naming the rule.

    The rules (Paddle's ``CheckLoD``): every level has at least 2 offsets, starts at 0 and never
    decreases; each level's last offset equals the number of entries (sequences) of the next
    level; the last level's last offset equals ``rows``, the data's first dimension.

    >>> check_lod([[0, 2, 3], [0, 3, 7, 9]], rows=9)
    [[0, 2, 3], [0, 3, 7, 9]]
    >>> check_lod([[1, 2]])
    Traceback (most recent call last):
    fluidjax.ir.errors.LoDError: invalid LoD [[1, 2]]: level 0 [1, 2] starts at 1: offsets must start at 0
    """
    levels = _as_levels(lod, what)
    problem = lod_problem(levels, rows)
    if problem is not None:
        raise LoDError(f"invalid {what} {levels}: {problem}")
    return levels


# --------------------------------------------------------------------------------------------
# The tensor


def _first_dim(shape: tuple[int, ...] | None) -> int | None:
    """The data's first dimension; None when the dims are not known (the rule is not checked)."""
    return None if shape is None else int(shape[0])


def _on_place(value: Any, place) -> Any:
    """``value`` on ``place``'s JAX device (unchanged when ``place`` is None or it is there)."""
    if place is None:
        return value
    device = place.jax_device()
    if isinstance(value, jax.Array) and value.devices() == {device}:
        return value
    return jax.device_put(value if isinstance(value, jax.Array) else np.asarray(value), device)


def _dims(dims: Any) -> tuple[int, ...]:
    """``dims`` as a tuple of non-negative ints (a TypeError / ValueError saying what is wrong)."""
    if isinstance(dims, numbers.Integral):
        dims = (dims,)
    if isinstance(dims, (str, bytes)) or not hasattr(dims, "__iter__"):
        raise TypeError(f"dims must be a list of non-negative integers, got {dims!r}")
    dims = list(dims)
    for d in dims:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, numbers.Integral):
            raise TypeError(f"dims must be a list of non-negative integers, got {dims!r} ({d!r} is not an integer)")
    if any(d < 0 for d in dims):
        raise ValueError(f"dims must be non-negative (a tensor's dims are known sizes), got {dims}")
    return tuple(int(d) for d in dims)


class LoDTensor:
    """A tensor value with optional LoD (one list of offsets per level, Paddle's representation).

    Created empty by ``scope.var(name).get_mutable(LoDTensor)``; ``set`` gives it a value, which
    stays a device array until read (``np.asarray(t)``). ``LoDTensor(value, lod)`` sets both
    (``lod`` as offsets; note Paddle's ``LoDTensor(lengths)`` takes lengths instead).

    >>> t = LoDTensor(); t.set(np.zeros((5, 3), "float32")); t.set_lod([[0, 2, 5]])
    >>> t.shape(), t.recursive_sequence_lengths()
    ((5, 3), [[2, 3]])
    >>> u = LoDTensor(); u.resize([4, 2]); u._is_initialized()     # dims recorded, no memory
    False
    >>> u.mutable_data("float32").shape                              # memory appears here
    (4, 2)
    """

    # The state lock of the scope whose holder has this tensor (set by the holder; None when the
    # tensor is in no scope): numpy() reads take turns with runs on it.
    _state_lock = None
    def _join_pack(self, pack, index: int) -> None:
        """Hold the value as member ``index`` of ``pack`` (a ``packed_state.PackedState``): the
        tensor becomes a :func:`_packed_class` of its class until its value is set from outside."""
        if getattr(self, "_pack", None) is not None and self._pack is not pack:
            self._pack.detach()
        self.__dict__.pop("_value", None)
        self._pack, self._pack_index = pack, index
        self.__class__ = _packed_class(self.__class__)

    def __init__(self, value: Any = None, lod: Sequence[Sequence[int]] | None = None) -> None:
        self._value = None if value is None else self._as_array(value)
        self._dims: tuple[int, ...] | None = None  # recorded by resize(); the value's shape wins
        self._lod: list[list[int]] = []
        if lod:
            self.set_lod(lod)

    # --- data ---------------------------------------------------------------------------------

    @staticmethod
    def _as_array(value: Any) -> Any:
        if isinstance(value, (np.ndarray, jax.Array)):
            return value
        if isinstance(value, LoDTensor):
            return value.data()
        return np.asarray(value)

    def _known_shape(self) -> tuple[int, ...] | None:
        if self._value is not None:
            return tuple(np.shape(self._value))
        return self._dims

    def _check_fits(self, lod: list[list[int]], shape: tuple[int, ...] | None, what: str, doing: str) -> None:
        """Raise unless ``lod`` fits data of ``shape`` (the error says what was being done)."""
        if not lod:
            return
        if shape is not None and len(shape) == 0:
            raise LoDError(f"{doing}: the data is a scalar, which has no first dimension for the LoD "
                             f"{lod} to index; a LoD needs data of rank >= 1")
        problem = lod_problem(lod, _first_dim(shape))
        if problem is not None:
            raise LoDError(f"{doing}: invalid {what} {lod}: {problem}")

    def set(self, value: Any, place=None) -> None:
        """Hold ``value`` (a NumPy or JAX array, or anything ``np.asarray`` takes).

        ``place`` puts it on that device (a ``jax.Array``). A LoD already set must fit the new
        data (clear it with ``set_lod([])`` to replace both).

        >>> t = LoDTensor(); t.set(np.ones((3, 2), "float32"), CPUPlace())
        """
        value = _on_place(self._as_array(value), place)
        self._check_fits(self._lod, tuple(np.shape(value)), "LoD",
                         f"set(data of shape {tuple(np.shape(value))}) keeps the LoD already set")
        if self._state_lock is None:
            self._value, self._dims = value, None
            return
        with self._state_lock:          # between two runs on its scope (a run would overwrite it)
            self._value, self._dims = value, None

    def value(self):
        """The held array (a ``jax.Array`` after a run), or None when nothing is held.

        >>> LoDTensor().value() is None, LoDTensor(np.zeros(2)).value()
        (True, array([0., 0.]))
        """
        return self._value

    def data(self, dtype=None):
        """The held array; with ``dtype``, it must hold that element type (Caffe2's ``data<T>()``).

        Reading a tensor that holds no data (empty, or only ``resize``-d) is a ``ValueError``;
        asking for another dtype than the one held is a ``TypeError``.

        >>> LoDTensor(np.ones(2, "int64")).data("int64")
        array([1, 1])
        """
        if self._value is None:
            detail = (f"it has dims {list(self._dims)} but no memory yet: call mutable_data(dtype) to allocate"
                      if self._dims is not None else "call set(array) or resize(dims) and mutable_data(dtype)")
            raise ValueError(f"this LoDTensor holds no data; {detail}")
        if dtype is not None:
            want = dtypes.to_numpy(dtype)
            if np.dtype(self._value.dtype) != want:
                raise TypeError(f"this LoDTensor holds {np.dtype(self._value.dtype).name} data, not {want.name}")
        return self._value

    def _is_initialized(self) -> bool:
        return self._value is not None

    def _get_dims(self) -> list[int]:
        """Paddle's ``_get_dims()``: the dims as a list (``[0]`` when there are none, as Paddle's
        empty tensor). Fluid scripts zero a tensor with ``np.zeros(t._get_dims())``."""
        shape = self._known_shape()
        return [int(d) for d in shape] if shape is not None else [0]

    def shape(self) -> tuple[int, ...]:
        """The dims: the held array's shape, else the dims recorded by ``resize`` (``()`` if none).

        >>> LoDTensor(np.zeros((5, 2))).shape(), LoDTensor().shape()
        ((5, 2), ())
        """
        shape = self._known_shape()
        return shape if shape is not None else ()

    @property
    def dtype(self):
        """The held array's dtype (None when no data is held)."""
        return self._value.dtype if self._value is not None else None

    def numpy(self) -> np.ndarray:
        """The held value as a NumPy array (a ``ValueError`` when it holds none).

        A tensor held by a scope is read between two runs on that scope (under its state lock,
        ``lowering/scope.py``): a run on another thread donates its state's buffers, so the array
        ``value()`` returns may be deleted by the next run, while this NumPy array stays valid.

        >>> LoDTensor(np.arange(3)).numpy()
        array([0, 1, 2])
        """
        lock = self._state_lock
        if lock is None:
            return np.asarray(self.data())
        with lock:
            return np.asarray(self.data())

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        return arr.astype(dtype) if dtype is not None else arr

    # --- seed 004: resize, mutable_data, share_data_with, extend, shrink ----------------------

    def resize(self, dims: Sequence[int]) -> None:
        """Record ``dims`` without allocating; ``mutable_data`` allocates them later.

        Data of other dims is released (as Caffe2's ``Resize`` does when the size changes); data
        of exactly these dims stays. A LoD already set must fit the new first dimension.

        >>> t = LoDTensor(); t.resize([2, 3]); t.shape(), t._is_initialized()
        ((2, 3), False)
        """
        dims = _dims(dims)
        self._check_fits(self._lod, dims, "LoD", f"resize({list(dims)}) keeps the LoD already set")
        if self._value is not None and tuple(np.shape(self._value)) == dims:
            return
        self._value = None
        self._dims = dims

    def mutable_data(self, dtype="float32", place=None):
        """The tensor's memory for ``dtype``, allocated (zeros) now if it does not hold such data.

        Held data of this dtype (and on ``place``, if given) is returned as it is — a NumPy array
        is writable in place, and tensors sharing it see the writes. Otherwise zeros of the
        recorded dims are allocated: a NumPy array, or a ``jax.Array`` on ``place``'s device
        (JAX arrays are immutable: update them with ``set``).

        >>> t = LoDTensor(); t.resize([2]); m = t.mutable_data("int64"); m[:] = 7; t.numpy()
        array([7, 7])
        """
        want = dtypes.to_numpy(dtype)
        shape = self._known_shape()
        if shape is None:
            raise ValueError(f"mutable_data({want.name!r}): this LoDTensor has no dims yet; call resize(dims) first")
        held = self._value
        if held is not None and np.dtype(held.dtype) == want:
            if place is None or (isinstance(held, jax.Array) and held.devices() == {place.jax_device()}):
                return held
            self._value = _on_place(held, place)
            return self._value
        self._value = _on_place(np.zeros(shape, want), place)
        self._dims = None
        return self._value

    def share_data_with(self, other: "LoDTensor") -> None:
        """Hold ``other``'s data itself (the same array object, so in-place writes are seen by
        both) and its dims; this tensor's LoD stays its own and must fit (as in Paddle).

        >>> a = LoDTensor(np.zeros(3)); b = LoDTensor(); b.share_data_with(a)
        >>> b.mutable_data("float64")[0] = 5; a.numpy()
        array([5., 0., 0.])
        """
        if not isinstance(other, LoDTensor):
            raise TypeError(f"share_data_with needs a LoDTensor, got {type(other).__name__}")
        if other._value is None:
            raise ValueError("share_data_with: the other LoDTensor holds no data to share "
                             "(set it, or resize and mutable_data it, first)")
        shape = tuple(np.shape(other._value))
        self._check_fits(self._lod, shape, "LoD", f"share_data_with(a tensor of shape {shape}) keeps the LoD already set")
        self._value = other._value
        self._dims = None

    def _outer(self, op: str) -> tuple[int, ...]:
        shape = self._known_shape()
        if shape is None or len(shape) == 0:
            raise ValueError(f"{op}: the tensor needs at least one dimension (it has "
                             f"{'no dims yet' if shape is None else 'shape ()'})")
        return shape

    def extend(self, num: int) -> None:
        """Grow the outermost dimension by ``num`` (Caffe2's ``Extend``); held data is kept and
        the new rows are zeros. A LoD already set must fit the new size.

        >>> t = LoDTensor(np.ones((2, 2))); t.extend(1); t.numpy()
        array([[1., 1.],
               [1., 1.],
               [0., 0.]])
        """
        if isinstance(num, bool) or not isinstance(num, numbers.Integral) or num < 0:
            raise ValueError(f"extend({num!r}): the number of rows to add must be a non-negative integer")
        shape = self._outer(f"extend({num})")
        new = (shape[0] + int(num), *shape[1:])
        self._check_fits(self._lod, new, "LoD", f"extend({num}) to {new[0]} rows keeps the LoD already set")
        held = self._value
        if held is None:
            self._dims = new
        elif isinstance(held, jax.Array):
            import jax.numpy as jnp

            self._value = jnp.concatenate([held, jnp.zeros((int(num), *shape[1:]), held.dtype)])
        else:
            self._value = np.concatenate([held, np.zeros((int(num), *shape[1:]), held.dtype)])

    def shrink(self, outer_dim: int) -> None:
        """Make the outermost dimension ``outer_dim`` (Caffe2's ``Shrink``: no larger than now),
        keeping the first rows (a view of the same memory). A LoD already set must fit.

        >>> t = LoDTensor(np.arange(6).reshape(3, 2)); t.shrink(1); t.numpy()
        array([[0, 1]])
        """
        shape = self._outer(f"shrink({outer_dim!r})")
        if isinstance(outer_dim, bool) or not isinstance(outer_dim, numbers.Integral) or not 0 <= outer_dim <= shape[0]:
            raise ValueError(f"shrink({outer_dim!r}): the new outer dimension must be an integer from 0 to the "
                             f"current {shape[0]} (shrink never grows; use extend)")
        new = (int(outer_dim), *shape[1:])
        self._check_fits(self._lod, new, "LoD", f"shrink({outer_dim}) keeps the LoD already set")
        if self._value is None:
            self._dims = new
        else:
            self._value = self._value[: int(outer_dim)]

    # --- LoD ------------------------------------------------------------------------------------

    def lod(self) -> list[list[int]]:
        """The offsets, one list per level (``[]`` when there is no LoD).

        >>> LoDTensor(np.zeros((5, 1)), [[0, 2, 5]]).lod()
        [[0, 2, 5]]
        """
        return [list(level) for level in self._lod]

    def set_lod(self, lod: Sequence[Sequence[int]]) -> None:
        """Set the offsets, one list per level (``[[0, 2, 5]]``); ``[]`` clears the LoD.

        The LoD must satisfy :func:`check_lod`'s rules against the data's first dimension (when
        known); a ``ValueError`` names the broken rule and nothing changes.

        >>> t = LoDTensor(np.zeros((5, 1))); t.set_lod([[0, 2, 5]])
        """
        levels = _as_levels(lod, "LoD")
        self._check_fits(levels, self._known_shape(), "LoD", "set_lod")
        self._lod = levels

    def recursive_sequence_lengths(self) -> list[list[int]]:
        """The sequence lengths of every level.

        >>> LoDTensor(np.zeros((5, 1)), [[0, 2, 5]]).recursive_sequence_lengths()
        [[2, 3]]
        """
        return offsets_to_lengths(self._lod)

    def set_recursive_sequence_lengths(self, lengths: Sequence[Sequence[int]]) -> None:
        """Set the LoD from sequence lengths (``[[2, 3]]`` is the LoD ``[[0, 2, 5]]``).

        Lengths must be non-negative and, as offsets, satisfy :func:`check_lod`'s rules.

        >>> t = LoDTensor(np.zeros((5, 1))); t.set_recursive_sequence_lengths([[2, 3]]); t.lod()
        [[0, 2, 5]]
        """
        lod = lengths_to_offsets(lengths)
        self._check_fits(lod, self._known_shape(), "LoD (from recursive_sequence_lengths "
                         f"{offsets_to_lengths(lod)})", "set_recursive_sequence_lengths")
        self._lod = lod

    def has_valid_recursive_sequence_lengths(self) -> bool:
        """Whether the LoD satisfies :func:`check_lod`'s rules against the data (True without LoD).

        >>> LoDTensor(np.zeros((5, 1)), [[0, 2, 5]]).has_valid_recursive_sequence_lengths()
        True
        """
        if not self._lod:
            return True
        shape = self._known_shape()
        if shape is not None and len(shape) == 0:
            return False
        return lod_problem(self._lod, _first_dim(shape)) is None

    def __repr__(self) -> str:
        """Shape, dtype, LoD and device on the first line, then a short preview of the values."""
        from .display import tensor_text  # display only

        if self._state_lock is None:
            return tensor_text(self)
        with self._state_lock:      # between two runs on its scope (a run donates its buffer)
            return tensor_text(self)

    def _repr_html_(self) -> str:
        """The notebook view: a table of shape, dtype, device and LoD, a preview of the values,
        and (with a valid LoD) an SVG drawing of which rows belong to which sequence."""
        from .display import tensor_html
        from .lod_drawing import with_lod_drawing

        def view():
            page = tensor_html(self)
            shape = self._known_shape()
            rows = _first_dim(shape) if shape else (self._lod[-1][-1] if self._lod and self._lod[-1] else None)
            if self._lod and rows is not None and lod_problem(self._lod, rows) is None:
                page = with_lod_drawing(page, self._lod, rows)
            return page

        if self._state_lock is None:
            return view()
        with self._state_lock:
            return view()


# --------------------------------------------------------------------------------------------
# Paddle's create_lod_tensor / create_random_int_lodtensor


_PACKED_CLASSES: dict[type, type] = {}


def _packed_class(cls: type) -> type:
    """The class a tensor of ``cls`` has while its value is held in a pack (one-element state a
    step packs with others: lowering/packed_state.py): ``_value`` read out of the pack, and setting
    it puts the tensor back to ``cls`` holding the value, the pack stale. A class of its own, so the
    tensors of every other value keep ``_value`` a plain attribute (the Executor reads and writes
    it for every state variable on every run)."""
    if getattr(cls, "_unpacked_class", None) is not None:
        return cls
    packed = _PACKED_CLASSES.get(cls)
    if packed is None:
        def get(self):
            return self._pack.member_value(self._pack_index)

        def set_(self, value):
            # The pack first (the plans bound to it let go): an exception (a Ctrl-C) between the
            # two steps leaves the tensor in the stale pack with its old value, as if not set.
            self._pack.detach()
            self.__class__ = cls
            self._pack = None
            self._value = value

        def is_initialized(self) -> bool:      # without cutting the value out of the pack
            return self._pack._value is not None

        packed = _PACKED_CLASSES[cls] = type(cls.__name__, (cls,), {
            "_value": property(get, set_), "_unpacked_class": cls, "_is_initialized": is_initialized,
            "__module__": cls.__module__, "__doc__": cls.__doc__})
        if cls is LoDTensor:                   # a pytree as a LoDTensor is (fj.to_jax takes them)
            jax.tree_util.register_pytree_node(packed, _flatten_lod_tensor, _unflatten_lod_tensor)
    return packed


def _nested_lengths(data: list, levels: int) -> tuple[list[list[int]], list]:
    """Per-level lengths of a nested list ``levels`` deep, and its innermost entries in order."""
    lengths: list[list[int]] = [[] for _ in range(levels)]
    entries: list = []

    def walk(item, depth, path):
        if depth == levels:
            entries.append(item)
            return
        if isinstance(item, (str, bytes)) or not hasattr(item, "__len__"):
            where = "".join(f"[{i}]" for i in path)
            raise LoDTypeError(f"create_lod_tensor: data{where} is {item!r}, but a LoD of {levels} level(s) needs "
                            f"lists {levels} deep")
        lengths[depth].append(len(item))
        for i, sub in enumerate(item):
            walk(sub, depth + 1, path + (i,))

    for i, seq in enumerate(data):
        walk(seq, 0, (i,))
    return lengths, entries


def create_lod_tensor(data: Any, recursive_seq_lens: Sequence[Sequence[int]], place=None) -> LoDTensor:
    """A :class:`LoDTensor` of ``data`` with the LoD given as sequence lengths (Paddle's
    ``paddle.base.create_lod_tensor``).

    ``data`` is a NumPy (or JAX) array whose first dimension is the total length, a
    :class:`LoDTensor` (its data is copied, the new lengths replace its LoD), or a list of
    sequences — each a list of ids (or, for a LoD of k levels, lists k deep) — whose entries
    become one column, ``[N, 1]``, of NumPy's dtype for them (int64 for Python ints), as Paddle
    does. The lengths must match the data (a ``ValueError`` names the broken rule or level).
    ``place`` puts the data on that device.

    >>> t = create_lod_tensor([[1, 2], [3, 4, 5]], [[2, 3]])
    >>> t.shape(), t.dtype, t.lod()
    ((5, 1), dtype('int64'), [[0, 2, 5]])
    >>> create_lod_tensor(np.zeros((5, 30), "float32"), [[2, 3]]).shape()
    (5, 30)
    """
    if isinstance(data, LoDTensor):
        return create_lod_tensor(np.array(data.data()), recursive_seq_lens, place)
    lengths = _as_levels(recursive_seq_lens, "recursive_seq_lens")
    if isinstance(data, list):
        if not lengths:
            raise LoDError("create_lod_tensor: list data needs at least one level of recursive_seq_lens "
                             "(each inner list is a sequence)")
        found, entries = _nested_lengths(data, len(lengths))
        for level, (want, got) in enumerate(zip(lengths, found)):
            if want != got:
                raise LoDError(f"create_lod_tensor: data and recursive_seq_lens do not match: level {level} of "
                                 f"the lists has lengths {got}, but recursive_seq_lens gives {want}")
        try:
            arr = np.array(entries)
        except ValueError as exc:
            raise ValueError(f"create_lod_tensor: the sequences' entries do not form an array ({exc})") from None
        if arr.dtype.kind in "OUSV":
            raise TypeError(f"create_lod_tensor: the sequences hold {arr.dtype} entries; they must be numbers")
        arr = arr.reshape(arr.shape + (1,))  # Paddle's [N] -> [N, 1] column
        tensor = LoDTensor()
        tensor.set(arr, place)
        tensor.set_recursive_sequence_lengths(lengths)
        return tensor
    if isinstance(data, (np.ndarray, jax.Array)):
        tensor = LoDTensor()
        tensor.set(data, place)
        tensor.set_recursive_sequence_lengths(lengths)
        return tensor
    raise TypeError(f"create_lod_tensor: data should be a LoDTensor, a NumPy array or a list, got "
                    f"{type(data).__name__}")


def create_random_int_lodtensor(recursive_seq_lens: Sequence[Sequence[int]], base_shape: Sequence[int], place=None,
                                low: int = 0, high: int = 1) -> LoDTensor:
    """A :class:`LoDTensor` of random int64 values in ``[low, high]`` (both included), of shape
    ``[sum of the last level's lengths] + base_shape`` (Paddle's ``create_random_int_lodtensor``;
    draws from NumPy's global generator, so ``np.random.seed`` repeats it).

    >>> t = create_random_int_lodtensor([[2, 3]], base_shape=[30], place=None, low=0, high=10)
    >>> t.shape(), t.lod()
    ((5, 30), [[0, 2, 5]])
    """
    if isinstance(base_shape, (str, bytes)) or not isinstance(base_shape, (list, tuple)):
        raise TypeError(f"base_shape should be a list of ints, got {type(base_shape).__name__}")
    lengths = _as_levels(recursive_seq_lens, "recursive_seq_lens")
    if not lengths:
        raise LoDError("create_random_int_lodtensor needs at least one level of recursive_seq_lens")
    if high < low:
        raise ValueError(f"create_random_int_lodtensor: high ({high}) must be >= low ({low})")
    overall = [sum(lengths[-1]), *_dims(base_shape)]
    data = np.random.randint(low, int(high) + 1, overall).astype("int64")
    return create_lod_tensor(data, lengths, place)


# -- LoDTensor as a JAX pytree ----------------------------------------------------------------------
# So that ``jax.jit(fn)(variables, lod_tensor)`` of a ``fj.to_jax`` function takes a LoDTensor as it
# is. A tensor with LoD flattens to the leaves of the padded LoD value the Executor makes (rows padded
# to a bucket, one offsets array per level) and unflattens to that LoDValue: only the buckets are
# static, so every LoD of the same buckets reuses one compilation (a LoD as static aux data would
# compile once per distinct LoD). A tensor without LoD flattens to its array; an empty one to nothing.

def _flatten_lod_tensor(tensor: LoDTensor):
    value = tensor._value
    if value is None:
        return (), ("empty",)
    if not tensor._lod:
        return (value,), ("dense",)
    from .lod_value import from_host
    # the exact sequence count (no padding sequences): a bridge's results are arrays of it
    children, aux = from_host(np.asarray(value), tensor._lod).tree_flatten()
    return children, ("lod", aux)


def _unflatten_lod_tensor(aux, children):
    if aux[0] == "empty":
        return LoDTensor()
    if aux[0] == "dense":
        return children[0]
    from .lod_value import LoDValue
    return LoDValue.tree_unflatten(aux[1], children)


jax.tree_util.register_pytree_node(LoDTensor, _flatten_lod_tensor, _unflatten_lod_tensor)
