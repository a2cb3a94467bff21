"""Feeding a program from Python generators: Fluid 1.6–1.8's ``fluid.io.DataLoader.from_generator``
and ``fluid.io.PyReader``.

A loader is made for a ``feed_list`` of data variables and given one of three kinds of
generator (each a callable returning an iterator):

- ``set_sample_generator(reader, batch_size, drop_last=True, places=None)``: ``reader`` yields
  samples, each a tuple/list with one field per variable; the loader batches them;
- ``set_sample_list_generator(reader, places=None)``: ``reader`` yields minibatches (lists of
  samples), converted as :class:`~fluidjax.DataFeeder` converts them (LoD fields of
  ``lod_level > 0`` variables become :class:`~fluidjax.LoDTensor` s);
- ``set_batch_generator(reader, places=None)``: ``reader`` yields whole batches, one array (or
  ``LoDTensor``) per variable, in ``feed_list`` order.

**Iterable** (the default): ``for data in loader(): exe.run(prog, feed=data, ...)``. As in
Fluid, each item is a list with one feed dict per place (``places`` given to the ``set_*``
method; a single place or None gives one), each place's dict from the next batch of the
generator; ``drop_last`` (of ``from_generator``) drops a last group of batches smaller than the
number of places. With ``return_list=True`` each place's batch is a list of values in
``feed_list`` order instead of a dict. Every ``loader()`` starts the generator afresh.

**Non-iterable** (``iterable=False``): ``loader.start()``, then ``exe.run(prog)`` without a feed
until it raises :class:`~fluidjax.ir.errors.EOFException` (``fluid.core.EOFException``), then
``loader.reset()``. ``start()`` puts the loader on its program as the program's feed source
(``Program._fluidjax_feed_source``, a callable returning the next feed dict or raising
``EOFException``), which an Executor run without a feed reads; ``reset()`` takes it off.

Batches are prepared ahead in a background thread into a queue of ``capacity`` batches (the
``use_double_buffer`` overlap; an exception of the generator is raised in the consumer).
Deviations: dense values come as NumPy arrays, not ``LoDTensor`` s (the Executor takes either;
``np.array(v)`` works on both); ``use_multiprocess`` uses the thread too; ``places`` only sets how
many feed dicts an item holds (the Executor places the data). A non-iterable loader's run takes
a whole group: the places' batches joined (:func:`join_feeds`), none dropped.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..ir import feed_sources
from ..ir.errors import EOFException, FeedError
from ..ir.variable import Variable
from ..lowering.lod_tensor import LoDTensor
from .data_feeder import DataFeeder
from .reader import batch as batch_reader
from .reader import _positive, buffered

__all__ = ["DataLoader", "PyReader"]

_DEFAULT_CAPACITY = 4


def _place_count(places) -> int:
    if places is None:
        return 1
    if isinstance(places, (list, tuple)):
        if not places:
            raise ValueError("DataLoader: places is an empty list")
        return len(places)
    return 1


class GeneratorLoader:
    """The loader ``DataLoader.from_generator`` returns (Fluid's ``GeneratorLoader``); see the
    module's docstring."""

    def __init__(self, feed_list: Sequence[Variable] | None = None, capacity: int | None = None,
                 use_double_buffer: bool = True, iterable: bool = True, return_list: bool = False,
                 use_multiprocess: bool = False, drop_last: bool = True) -> None:
        if feed_list is None or isinstance(feed_list, (str, Variable)) or not len(feed_list):
            raise ValueError("DataLoader.from_generator: feed_list must be a non-empty list of the data variables "
                             "to feed (in static-graph programs it is required)")
        self._feeder = DataFeeder(list(feed_list), program=_program_of(feed_list))
        self._feed_list = list(feed_list)
        self._names = self._feeder.feed_names
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, numbers.Integral)
                                     or capacity <= 0):
            raise ValueError(f"DataLoader.from_generator: capacity must be a positive int, got {capacity!r}")
        self._capacity = int(capacity) if capacity is not None else _DEFAULT_CAPACITY
        self._use_double_buffer = bool(use_double_buffer)
        self._iterable = bool(iterable)
        self._return_list = bool(return_list)
        self._use_multiprocess = bool(use_multiprocess)
        self._drop_last = bool(drop_last)
        self._batches: Callable[[], Iterator[dict]] | None = None
        self._places = 1
        self._pending: Iterator | None = None

    @property
    def iterable(self) -> bool:
        """Whether the loader is iterated (``for data in loader()``) or started (``start()``)."""
        return self._iterable

    # -- the generators ---------------------------------------------------------------------------
    def set_sample_generator(self, reader, batch_size: int, drop_last: bool = True, places=None):
        """``reader`` yields samples (one field per variable); batched by ``batch_size`` (the
        last, short batch dropped when ``drop_last``). Returns the loader."""
        batch_size = _positive("batch_size", batch_size, "set_sample_generator")   # 8.0 as Fluid's int()
        return self.set_sample_list_generator(batch_reader(reader, int(batch_size), drop_last=drop_last), places)

    def set_sample_list_generator(self, reader, places=None):
        """``reader`` yields minibatches (lists of samples), converted like ``DataFeeder``.
        Returns the loader."""
        _check_reader(reader, "set_sample_list_generator")
        feeder = self._feeder

        def feeds():
            for minibatch in reader():
                yield feeder.feed(minibatch)

        return self._set(feeds, places)

    def set_batch_generator(self, reader, places=None):
        """``reader`` yields batches: one array (or LoDTensor) per variable, in ``feed_list``
        order. Returns the loader."""
        _check_reader(reader, "set_batch_generator")
        names = self._names

        def feeds():
            for index, item in enumerate(reader()):
                if isinstance(item, dict) or not isinstance(item, (list, tuple)):
                    raise FeedError(f"DataLoader: the batch generator's item {index} is a {type(item).__name__}; "
                                    f"it must be a list or tuple with one value per variable of feed_list {names}")
                if len(item) != len(names):
                    raise FeedError(f"DataLoader: the batch generator's item {index} has {len(item)} value(s), but "
                                    f"feed_list has {len(names)} variable(s) {names}")
                yield {name: _as_feed_value(value) for name, value in zip(names, item)}

        return self._set(feeds, places)

    def _set(self, feeds: Callable[[], Iterator[dict]], places):
        self._batches = feeds
        self._places = _place_count(places)
        return self

    # -- iteration --------------------------------------------------------------------------------
    def _items(self) -> Iterator:
        """The loader's items: lists of one feed (dict, or list with ``return_list``) per place."""
        if self._batches is None:
            raise RuntimeError("DataLoader: no data source; call set_sample_generator, set_sample_list_generator "
                               "or set_batch_generator first")
        counts = self._counts = [0, 0]   # batches made (by the reading thread), batches taken
        batches = self._batches

        def counted():
            for feed in batches():
                counts[0] += 1
                yield feed

        source = buffered(counted, self._capacity)()
        group: list = []
        try:
            for feed in source:
                counts[1] += 1
                group.append([feed[n] for n in self._names] if self._return_list else feed)
                if len(group) == self._places:
                    yield group
                    group = []
            if group and not self._drop_last:
                yield group
        finally:
            source.close()

    def __call__(self):
        """The loader itself, as Fluid 1.8's ``loader()``: ``for data in loader():`` iterates it, and
        a model's ``self.dataloader()`` gets the loader to ``set_sample_list_generator`` on
        (PaddleCV/video: the attribute shadows the method of the same name)."""
        return self

    def __next__(self):
        """The next item of the current pass (one starts when none is running), as Fluid's
        ``next(loader())``; StopIteration ends the pass."""
        if getattr(self, "_pass", None) is None:
            self._pass = iter(self)
        try:
            return next(self._pass)
        except StopIteration:
            self._pass = None
            raise

    def __iter__(self):
        if not self._iterable:
            raise RuntimeError("DataLoader: this loader is not iterable (iterable=False): call start(), run the "
                               "program until it raises EOFException, then reset()")
        return self._items()

    # -- non-iterable -----------------------------------------------------------------------------
    def start(self) -> None:
        """Begin a pass (non-iterable loaders): runs of the program without a feed take the next
        batch, until ``EOFException``."""
        if self._iterable:
            raise RuntimeError("DataLoader: start() is for loaders made with iterable=False; iterate this one "
                               "(for data in loader(): ...)")
        if self._pending is not None:
            raise RuntimeError("DataLoader: start() called twice; call reset() after the pass (after EOFException)")
        self._pending = self._items()
        self._program._fluidjax_feed_source = self.next_feed
        feed_sources.register(self._names, self.next_feed)   # clones / compiled forms of the program too

    def reset(self) -> None:
        """End the pass (after ``EOFException``, or to stop early): the generator is closed."""
        if self._pending is not None:
            self._pending.close()
            self._pending = None
        feed_sources.unregister(self.next_feed)
        if getattr(self._program, "_fluidjax_feed_source", None) == self.next_feed:
            self._program._fluidjax_feed_source = None

    def next_feed(self) -> dict:
        """The feed of the next run (non-iterable loaders): the next batch's dict, or
        ``EOFException`` when the generator is exhausted (or not started)."""
        if self._pending is None:
            raise EOFException("DataLoader: not started (call start() before running the program)")
        try:
            item = next(self._pending)
        except StopIteration:
            raise EOFException("DataLoader: the generator has no batch left; call reset() before the next "
                               "start()") from None
        feeds = [dict(zip(self._names, f)) if self._return_list else f for f in item]
        # one batch per place: a run takes the whole group (a data-parallel run splits it again)
        return feeds[0] if len(feeds) == 1 else join_feeds(feeds, "DataLoader")

    @property
    def _program(self):
        return self._feed_list[0].block.program

    @property
    def queue(self) -> "BatchQueue":
        """Fluid's ``queue`` of prepared batches (``size()``, ``capacity()``, ``is_closed()``)."""
        return BatchQueue(self)


class BatchQueue:
    """A view of a loader's read-ahead buffer, as Fluid's ``LoDTensorBlockingQueue`` answered it:
    ``size()`` batches are ready (made by the reading thread, not yet taken), of ``capacity()``."""

    def __init__(self, loader: GeneratorLoader) -> None:
        self._loader = loader

    def size(self) -> int:
        """Batches made and not yet taken (0 before a pass)."""
        made, taken = getattr(self._loader, "_counts", (0, 0))
        return max(0, min(made - taken, self._loader._capacity))

    def capacity(self) -> int:
        """How many batches the buffer holds at most."""
        return self._loader._capacity

    def is_closed(self) -> bool:
        """Whether no pass is running (a non-iterable loader between reset() and start())."""
        return getattr(self._loader, "_pending", None) is None

    def close(self) -> None:
        """End the pass (Fluid closed the queue): the same as the loader's ``reset()``."""
        self._loader.reset()


def join_feeds(feeds: Sequence[dict], what: str) -> dict:
    """Feed dicts (one per place) as one: each variable's values concatenated along the batch
    dim; LoD values' sequences one after another (their lengths joined level by level)."""
    names = list(feeds[0])
    if any(sorted(f) != sorted(names) for f in feeds):
        raise FeedError(f"{what}: every place's feed dict must name the same variables")
    out = {}
    for name in names:
        values = [f[name] for f in feeds]
        lods = [v.recursive_sequence_lengths() if isinstance(v, LoDTensor) else [] for v in values]
        arrays = [np.asarray(v) for v in values]
        if len({a.shape[1:] for a in arrays}) != 1 or len({len(lod) for lod in lods}) != 1:
            raise FeedError(f"{what}: the per-place feeds of {name!r} differ in shape or LoD levels "
                            f"({[a.shape for a in arrays]}); they are joined along the batch dim")
        data = np.concatenate(arrays, axis=0)
        if lods[0]:
            joined = LoDTensor()
            joined.set(data)
            joined.set_recursive_sequence_lengths([sum((lod[level] for lod in lods), [])
                                                   for level in range(len(lods[0]))])
            out[name] = joined
        else:
            out[name] = data
    return out


def _program_of(feed_list):
    first = feed_list[0]
    return first.block.program if isinstance(first, Variable) else None


def _check_reader(reader, what: str) -> None:
    if not callable(reader):
        raise TypeError(f"{what}: reader must be a callable returning an iterator (a generator function), got "
                        f"{type(reader).__name__}")


def _as_feed_value(value: Any):
    if isinstance(value, (np.ndarray, LoDTensor)):
        return value
    if hasattr(value, "__array__") or isinstance(value, (list, tuple, numbers.Number)):
        return np.asarray(value)
    return value


class DataLoader:
    """Fluid's ``fluid.io.DataLoader``: ``DataLoader.from_generator(...)`` makes a loader fed by
    a Python generator (see the module's docstring)."""

    @staticmethod
    def from_generator(feed_list=None, capacity=None, use_double_buffer: bool = True, iterable: bool = True,
                       return_list: bool = False, use_multiprocess: bool = False,
                       drop_last: bool = True) -> GeneratorLoader:
        """A loader of ``feed_list``'s variables; give it a generator with one of its ``set_*``
        methods, then iterate it (or ``start()`` it when ``iterable=False``).

        >>> loader = DataLoader.from_generator(feed_list=[x, y], capacity=8)       # doctest: +SKIP
        >>> loader.set_sample_list_generator(fluid.io.batch(reader, 32), places=fluid.cpu_places())  # doctest: +SKIP
        >>> for data in loader(): exe.run(main, feed=data, fetch_list=[loss])      # doctest: +SKIP
        """
        return GeneratorLoader(feed_list, capacity, use_double_buffer, iterable, return_list, use_multiprocess,
                               drop_last)

    @staticmethod
    def from_dataset(dataset, places, drop_last: bool = True):
        """Fluid's loader over a ``fluid.DatasetFactory`` dataset: not supported."""
        raise NotImplementedError("DataLoader.from_dataset (Fluid's C++ datasets) is not supported in fluidjax; "
                                  "use DataLoader.from_generator with a Python reader")


class PyReader:
    """Fluid's ``fluid.io.PyReader`` (the older spelling of ``DataLoader.from_generator``):
    ``decorate_sample_generator``, ``decorate_sample_list_generator`` and
    ``decorate_batch_generator`` give it a generator; then iterate it (``for data in reader():``)
    or, with ``iterable=False``, ``start()`` / run until ``EOFException`` / ``reset()``."""

    def __init__(self, feed_list=None, capacity=None, use_double_buffer: bool = True, iterable: bool = True,
                 return_list: bool = False) -> None:
        self._loader = GeneratorLoader(feed_list, capacity, use_double_buffer, iterable, return_list)

    @property
    def iterable(self) -> bool:
        """Whether the reader is iterated or started."""
        return self._loader.iterable

    def decorate_sample_generator(self, sample_generator, batch_size: int, drop_last: bool = True, places=None):
        """``sample_generator`` yields samples, batched by ``batch_size``."""
        self._loader.set_sample_generator(sample_generator, batch_size, drop_last, places)

    def decorate_sample_list_generator(self, reader, places=None):
        """``reader`` yields minibatches (lists of samples)."""
        self._loader.set_sample_list_generator(reader, places)

    def decorate_batch_generator(self, reader, places=None):
        """``reader`` yields batches, one value per variable."""
        self._loader.set_batch_generator(reader, places)

    def __call__(self):
        return self._loader()

    def __iter__(self):
        return iter(self._loader)

    def start(self) -> None:
        """Begin a pass (``iterable=False``)."""
        self._loader.start()

    def reset(self) -> None:
        """End the pass."""
        self._loader.reset()

    @property
    def queue(self) -> BatchQueue:
        """Fluid's ``queue`` of prepared batches (``size()``, ``capacity()``, ``is_closed()``)."""
        return self._loader.queue
