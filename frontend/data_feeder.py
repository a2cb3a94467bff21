"""``DataFeeder``: a minibatch of samples (Python lists, NumPy arrays) → the feed dict of a run.

As Paddle's ``paddle.base.DataFeeder``: a minibatch is a list of samples, each a tuple with one
field per feed variable, in ``feed_list`` order. A field of a ``lod_level > 0`` variable is a
nested list (``lod_level`` deep) of entries, and the minibatch's fields become one
:class:`~fluidjax.LoDTensor` whose recursive sequence lengths record the nesting. Fields of a
dense variable are stacked into one array. Every sample (every entry, for LoD fields) is
converted to the variable's dtype and reshaped to its shape without the batch dimension, as
Paddle reshapes to the declared shape.

Two deliberate differences from Paddle: dense fields come back as arrays (NumPy, or ``jax.Array``
on ``place``) rather than LoDTensors — the Executor takes either; and a conversion that would
change values (``1.5`` to an integer variable, ``300`` to ``uint8``, strings that are not numbers)
is a :class:`~fluidjax.FeedError` naming the variable and the sample, where Paddle casts silently.
Numeric strings (``"197"``) convert as Fluid's ``np.array(data, dtype)`` converted them.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from ..ir import dtypes
from ..ir.errors import FeedError
from ..ir.program import Program, default_main_program
from ..ir.variable import Variable
from ..lowering.lod_tensor import LoDTensor

__all__ = ["DataFeeder"]

_KIND_NAMES = {"O": "Python objects", "U": "strings", "S": "bytes", "V": "structured records", "c": "complex numbers"}


def _convert(arr: np.ndarray, want: np.dtype) -> np.ndarray | str:
    """``arr`` as ``want`` when the conversion keeps every value; else why not (a phrase)."""
    have = arr.dtype
    if have == want:
        return arr
    if have.kind in "US" and want.kind in "iuf":
        # Fluid's DataFeeder converted with np.array(data, dtype): numeric strings parse ("197" -> 197,
        # SSR's reader yields the ids of its text as strings); "1.5" to an integer, "x", or a value
        # out of range does not
        try:
            return arr.astype(want)
        except (ValueError, OverflowError) as exc:
            return f"holds strings that do not parse as {want} ({exc})"
    if have.kind in _KIND_NAMES:
        return f"holds {_KIND_NAMES[have.kind]} (dtype {have})"
    if want.kind == "f":
        with np.errstate(over="ignore", invalid="ignore"):
            out = arr.astype(want)
        if have.kind in "biu" and not np.array_equal(out.astype(have), arr):
            return f"holds integers that {want} cannot hold exactly"
        if have.kind == "f" and not np.array_equal(np.isfinite(out), np.isfinite(arr)):
            return f"holds values that overflow {want}"
        return out
    if want.kind in "iu":
        if have.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.round(arr))):
            return f"holds non-integral values, and the variable is {want}"
        if have.kind in "iuf" and arr.size:
            info = np.iinfo(want)
            if arr.min() < info.min or arr.max() > info.max:
                return f"holds values outside the range of {want} [{info.min}, {info.max}]"
        return arr.astype(want)
    if want.kind == "b" and (have.kind == "b" or np.isin(arr, (0, 1)).all()):
        return arr.astype(bool)
    return f"cannot be converted exactly from {have} to {want}"


class _Slot:
    """One feed variable: converts the fields of a minibatch to its feed value."""

    def __init__(self, var: Variable) -> None:
        self.name = var.name
        self.lod_level = int(var.lod_level)
        self.shape = tuple(var.shape)
        self.dtype = dtypes.to_numpy(var.dtype)
        # The shape of one sample (dense) or one innermost entry (LoD): the declared shape
        # without its first dim. With more than one unknown dim, no reshape is possible (Paddle
        # skips its reshape then too).
        self.item_shape = self.shape[1:]
        self.reshapable = sum(d < 0 for d in self.item_shape) <= 1
        # a reader slot (data_layers.reader_slot) takes samples of its rank at any size
        self.any_size = bool(getattr(var, "samples_any_size", False))

    def _where(self, sample: int) -> str:
        return (f"DataFeeder: variable {self.name!r} (declared {self.dtype.name}, shape {list(self.shape)}"
                f"{f', lod_level {self.lod_level}' if self.lod_level else ''}), sample {sample}")

    def item(self, value: Any, sample: int, what: str = "the field") -> np.ndarray:
        """One sample's field (or one LoD entry) as an array of the variable's dtype and item shape."""
        try:
            arr = np.asarray(value)
        except Exception as exc:  # ragged lists and the like
            raise FeedError(f"{self._where(sample)}: {what} is not a regular array ({exc})") from None
        out = _convert(arr, self.dtype)
        if isinstance(out, str):
            raise FeedError(f"{self._where(sample)}: {what} {out}")
        shape = out.shape
        fits = len(shape) == len(self.item_shape) and (
            self.any_size or all(d < 0 or d == s for d, s in zip(self.item_shape, shape)))
        if fits:
            return out
        if len(shape) != len(self.item_shape) and self.reshapable:
            try:
                return out.reshape(self.item_shape)
            except ValueError:
                pass
        raise FeedError(f"{self._where(sample)}: {what} has shape {list(shape)} ({out.size} values), but each "
                        f"{'entry' if self.lod_level else 'sample'} of the variable has shape "
                        f"{list(self.item_shape)} (the declared shape without its first dim; -1 takes any size)")

    def stack(self, items: list[np.ndarray], first_sample: list[int]) -> np.ndarray:
        """Stack per-sample (or per-entry) arrays; unequal shapes are an error naming a sample."""
        if not items:
            known = [d if d >= 0 else 0 for d in self.item_shape] if self.reshapable else []
            return np.zeros((0, *known), self.dtype)
        base = items[0].shape
        for arr, sample in zip(items, first_sample):
            if arr.shape != base:
                raise FeedError(f"{self._where(sample)}: shape {list(arr.shape)} differs from the first "
                                f"sample's {list(base)}; the samples of a minibatch must have one shape")
        return np.stack(items)

    def lod_entries(self, field: Any, sample: int, lengths: list[list[int]], entries: list, owners: list) -> None:
        """Walk one LoD field ``lod_level`` deep: append its lengths and innermost entries."""

        def walk(item, depth, path):
            if depth == self.lod_level:
                where = "the entry " + "".join(f"[{i}]" for i in path)
                entries.append(self.item(item, sample, where))
                owners.append(sample)
                return
            if (isinstance(item, (str, bytes, numbers.Number)) or not hasattr(item, "__len__")
                    or (isinstance(item, np.ndarray) and item.ndim == 0)):
                where = "".join(f"[{i}]" for i in path) or " itself"
                raise FeedError(f"{self._where(sample)}: the field{where} is {type(item).__name__} {item!r}, but a "
                                f"lod_level {self.lod_level} field is a list of sequences {self.lod_level} level(s) "
                                "deep (for lod_level 1: a list of entries, one per time step)")
            lengths[depth].append(len(item))
            for i, sub in enumerate(item):
                walk(sub, depth + 1, path + (i,))

        walk(field, 0, ())


class DataFeeder:
    """Converts a minibatch of samples into the feed dict of :meth:`Executor.run`.

    ``feed_list`` holds the data variables to feed (Variables, or names looked up in
    ``program``, by default the default main program). ``place`` puts the arrays on that device.

    >>> x = layer.data("x", dims=2)                                  # [-1, 2] float32
    >>> words = layer.data("words", dims=1, dtype="int64", lod_level=1)
    >>> feeder = DataFeeder([x, "words"])
    >>> feed = feeder.feed([([1.0, 2.0], [4, 5, 6]), ([3.0, 4.0], [7])])
    >>> feed["x"].shape, feed["words"].shape(), feed["words"].recursive_sequence_lengths()
    ((2, 2), (4, 1), [[3, 1]])
    """

    def __init__(self, feed_list: Sequence[Variable | str], place=None, program: Program | None = None) -> None:
        if isinstance(feed_list, (str, Variable)) or not isinstance(feed_list, Iterable):
            raise TypeError("DataFeeder: feed_list must be a list of Variables or variable names")
        program = default_main_program() if program is None else program
        if not isinstance(program, Program):
            raise TypeError(f"DataFeeder: program must be a fluidjax Program, got {type(program).__name__}")
        self._slots: list[_Slot] = []
        for item in feed_list:
            if isinstance(item, str):
                var = program.global_block().find_var(item)
                if var is None:
                    raise FeedError(f"DataFeeder: no variable named {item!r} in the program's global block")
                item = var
            if not isinstance(item, Variable):
                raise TypeError(f"DataFeeder: feed_list holds a {type(item).__name__}; it must hold Variables or "
                                "variable names")
            if item.dtype is None:
                raise FeedError(f"DataFeeder: variable {item.name!r} has no dtype yet")
            self._slots.append(_Slot(item))
        names = [s.name for s in self._slots]
        if len(set(names)) != len(names):
            raise FeedError(f"DataFeeder: feed_list names a variable twice: {names}")
        self.place = place

    @property
    def feed_names(self) -> list[str]:
        """The names of the fed variables, in ``feed_list`` order (as Paddle's ``feed_names``).

        >>> DataFeeder([layer.data("x", dims=2)]).feed_names
        ['x']
        """
        return [s.name for s in self._slots]

    def feed(self, iterable: Iterable[Sequence[Any]]) -> dict[str, Any]:
        """The feed dict (name → array, or :class:`LoDTensor` for ``lod_level > 0``) of a
        minibatch: a list of samples, each a tuple with one field per fed variable.

        >>> feeder = DataFeeder([layer.data("x", dims=2), layer.data("y", dims=1, dtype="int64")])
        >>> sorted((k, v.shape) for k, v in feeder.feed([([1, 2], 0), ([3, 4], 1)]).items())
        [('x', (2, 2)), ('y', (2, 1))]
        """
        slots = self._slots
        columns: list[list[Any]] = [[] for _ in slots]
        count = 0
        for index, sample in enumerate(iterable):
            if not isinstance(sample, (tuple, list)):
                raise FeedError(f"DataFeeder: sample {index} is a {type(sample).__name__}; a sample is a tuple "
                                f"with one field per variable of feed_list {self.feed_names}")
            if len(sample) != len(slots):
                raise FeedError(f"DataFeeder: sample {index} has {len(sample)} field(s), but feed_list has "
                                f"{len(slots)} variable(s) {self.feed_names}")
            for column, field in zip(columns, sample):
                column.append(field)
            count += 1
        if count == 0:
            raise FeedError(f"DataFeeder: the minibatch has no samples (feed_list {self.feed_names})")
        return {slot.name: self._convert(slot, column) for slot, column in zip(slots, columns)}

    def feed_parallel(self, iterable: Iterable, num_places: int | None = None) -> Iterator[dict[str, Any]]:
        """Fluid's per-place feeding: ``iterable`` holds one minibatch per place; yields one feed
        dict per minibatch (the list of them is what ``exe.run(feed=...)`` of a data-parallel
        program takes). ``num_places``, when given, must be the number of minibatches.

        >>> feeder = DataFeeder([layer.data("x", dims=2)])
        >>> [d["x"].shape for d in feeder.feed_parallel([[([1, 2],)], [([3, 4],), ([5, 6],)]])]
        [(1, 2), (2, 2)]
        """
        minibatches = list(iterable)
        if num_places is not None and len(minibatches) != num_places:
            raise FeedError(f"DataFeeder.feed_parallel: {len(minibatches)} minibatches for {num_places} places; "
                            "give one minibatch per place")
        for minibatch in minibatches:
            yield self.feed(minibatch)

    def decorate_reader(self, reader: Callable, multi_devices: bool, num_places: int | None = None,
                        drop_last: bool = True) -> Callable:
        """A reader of feed dicts from ``reader``, a reader of minibatches (Fluid's
        ``decorate_reader``): one dict per minibatch, or with ``multi_devices`` a list of
        ``num_places`` dicts (default: the number of JAX devices) per item, a short last group
        dropped when ``drop_last`` (else an error, as in Fluid)."""

        def single():
            for minibatch in reader():
                yield self.feed(minibatch)

        def grouped():
            import jax

            places = num_places or len(jax.devices())
            group = []
            for minibatch in reader():
                group.append(minibatch)
                if len(group) == places:
                    yield list(self.feed_parallel(group, places))
                    group = []
            if group and not drop_last:
                raise FeedError(f"DataFeeder.decorate_reader: the reader ended with {len(group)} minibatch(es), "
                                f"fewer than the {places} places; pass drop_last=True to drop them")

        return grouped if multi_devices else single

    def _convert(self, slot: _Slot, column: list[Any]) -> Any:
        if slot.lod_level == 0:
            data = slot.stack([slot.item(f, i) for i, f in enumerate(column)], list(range(len(column))))
            if self.place is not None:
                import jax

                return jax.device_put(data, self.place.jax_device())
            return data
        lengths: list[list[int]] = [[] for _ in range(slot.lod_level)]
        entries: list[np.ndarray] = []
        owners: list[int] = []
        for index, field in enumerate(column):
            slot.lod_entries(field, index, lengths, entries, owners)
        tensor = LoDTensor()
        tensor.set(slot.stack(entries, owners), self.place)
        try:
            tensor.set_recursive_sequence_lengths(lengths)
        except ValueError as exc:  # e.g. a lod_level 2 minibatch whose sequences are all empty
            raise FeedError(f"DataFeeder: variable {slot.name!r}: the minibatch's sequence lengths {lengths} "
                            f"do not form a valid LoD ({exc})") from None
        return tensor

    def __repr__(self) -> str:
        return f"DataFeeder({self.feed_names}, place={self.place!r})"
