"""Reader decorators, with Paddle's names and semantics (``paddle.batch``, ``paddle.reader.*``).

A *reader* is a callable taking no arguments that returns an iterator (typically a generator
function) of samples. Each decorator here takes readers and returns a new reader; nothing is read
until the returned reader is called and iterated, and every call starts afresh.

>>> def numbers():
...     yield from range(5)
>>> list(batch(numbers, 2)())
[[0, 1], [2, 3], [4]]
>>> list(compose(numbers, map_readers(lambda x: x * 10, numbers))())
[(0, 0), (1, 10), (2, 20), (3, 30), (4, 40)]

Differences from Paddle, all about failing loudly: ``buffered`` re-raises an exception of the
wrapped reader in the consumer (Paddle's worker thread dies and the consumer waits forever) and
stops its worker when the consumer stops early; ``compose`` detects misalignment with a private
sentinel, so readers may yield ``None``; non-positive sizes are a ``ValueError``.
"""

from __future__ import annotations

import itertools
import math
import numbers
import queue
import random
import threading
from typing import Any, Callable, Iterator

__all__ = ["ComposeNotAligned", "Fake", "batch", "buffered", "cache", "chain", "compose", "firstn", "map_readers",
           "multiprocess_reader", "shuffle", "xmap_readers"]

Reader = Callable[[], Iterator[Any]]


class ComposeNotAligned(ValueError):
    """The readers given to :func:`compose` yielded different numbers of samples."""


def _positive(name: str, value: Any, what: str, *, ceil: bool = False) -> int:
    """A size as Paddle 1.x's decorators take it: any real number (``batch_size=8.0`` of a
    computed size), converted with ``int()`` as ``paddle.batch`` does, or rounded up (``ceil``)
    where Paddle compares the count with it (``len(buf) >= buf_size``); positive."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{what}: {name} should be a positive integer, but got {name}={value!r}")
    size = math.ceil(value) if ceil else int(value)
    if size <= 0:
        raise ValueError(f"{what}: {name} should be a positive integer, but got {name}={value!r}")
    return size


def batch(reader: Reader, batch_size: int, drop_last: bool = False) -> Reader:
    """A reader of lists of ``batch_size`` samples of ``reader``; the last, shorter list is
    yielded unless ``drop_last`` (``paddle.batch``).

    >>> list(batch(lambda: iter(range(5)), 2, drop_last=True)())
    [[0, 1], [2, 3]]
    """
    batch_size = _positive("batch_size", batch_size, "batch")

    def batch_reader():
        b = []
        for instance in reader():
            b.append(instance)
            if len(b) == batch_size:
                yield b
                b = []
        if not drop_last and b:
            yield b

    return batch_reader


def shuffle(reader: Reader, buf_size: int) -> Reader:
    """A reader of ``reader``'s samples shuffled within consecutive buffers of ``buf_size``
    samples (Python's ``random``, so ``random.seed`` repeats it; ``paddle.reader.shuffle``).

    >>> sorted(shuffle(lambda: iter(range(5)), 3)())
    [0, 1, 2, 3, 4]
    """
    buf_size = _positive("buf_size", buf_size, "shuffle", ceil=True)

    def data_reader():
        buf = []
        for e in reader():
            buf.append(e)
            if len(buf) >= buf_size:
                random.shuffle(buf)
                yield from buf
                buf = []
        if buf:
            random.shuffle(buf)
            yield from buf

    return data_reader


def chain(*readers: Reader) -> Reader:
    """A reader of the samples of every reader in turn (``paddle.reader.chain``).

    >>> list(chain(lambda: iter([1, 2]), lambda: iter([3]))())
    [1, 2, 3]
    """

    def reader():
        yield from itertools.chain.from_iterable(r() for r in readers)

    return reader


def compose(*readers: Reader, check_alignment: bool = True) -> Reader:
    """A reader of tuples joining one sample of every reader; tuple samples are flattened into
    the result (``(1, 2)``, ``3``, ``(4, 5)`` give ``(1, 2, 3, 4, 5)``; ``paddle.reader.compose``).

    With ``check_alignment`` (the default), readers of different lengths raise
    :class:`ComposeNotAligned` (a ``ValueError``) when the shortest one ends; without it, the
    output stops at the shortest reader.

    >>> list(compose(lambda: iter([(1, 2)]), lambda: iter([3]))())
    [(1, 2, 3)]
    """
    missing = object()

    def as_tuple(x):
        return x if isinstance(x, tuple) else (x,)

    def reader():
        its = [r() for r in readers]
        if not check_alignment:
            for outputs in zip(*its):
                yield sum(map(as_tuple, outputs), ())
            return
        for index, outputs in enumerate(itertools.zip_longest(*its, fillvalue=missing)):
            ended = [i for i, o in enumerate(outputs) if o is missing]
            if ended:
                raise ComposeNotAligned(f"outputs of readers are not aligned: reader(s) {ended} of {len(its)} ended "
                                        f"after {index} samples, the others have more")
            yield sum(map(as_tuple, outputs), ())

    return reader


def map_readers(func: Callable[..., Any], *readers: Reader) -> Reader:
    """A reader of ``func(a, b, ...)`` over one sample of each reader at a time; it stops at the
    shortest reader (``paddle.reader.map_readers``).

    >>> list(map_readers(lambda a, b: a * b, lambda: iter([1, 2]), lambda: iter([3, 4]))())
    [3, 8]
    """

    def reader():
        yield from map(func, *[r() for r in readers])

    return reader


def firstn(reader: Reader, n: int) -> Reader:
    """A reader of at most the first ``n`` samples of ``reader`` (``paddle.reader.firstn``).

    >>> list(firstn(lambda: iter(range(10)), 3)())
    [0, 1, 2]
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Real) or n < 0:
        raise ValueError(f"firstn: n should be a non-negative integer, but got n={n!r}")
    n = math.ceil(n)                 # Paddle stops at the first index i >= n

    def firstn_reader():
        yield from itertools.islice(reader(), n)

    return firstn_reader


_ITEM, _END, _ERROR = "item", "end", "error"


def buffered(reader: Reader, size: int) -> Reader:
    """A reader that reads ``reader`` ahead in a background thread into a buffer of at most
    ``size`` samples (``paddle.reader.buffered``).

    An exception of ``reader`` is raised to the consumer; a consumer that stops early (closes
    the generator) stops the thread.

    >>> list(buffered(lambda: iter(range(3)), 2)())
    [0, 1, 2]
    """
    size = _positive("size", size, "buffered", ceil=True)

    def data_reader():
        source = reader()
        q: queue.Queue = queue.Queue(maxsize=size)
        stop = threading.Event()

        def put(message) -> bool:
            while not stop.is_set():
                try:
                    q.put(message, timeout=0.05)
                    return True
                except queue.Full:
                    continue
            return False

        def worker():
            try:
                for item in source:
                    if not put((_ITEM, item)):
                        return
                put((_END, None))
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer, re-raised there
                put((_ERROR, exc))

        thread = threading.Thread(target=worker, name="fluidjax-buffered-reader", daemon=True)
        thread.start()
        try:
            while True:
                kind, item = q.get()
                if kind == _END:
                    return
                if kind == _ERROR:
                    raise item
                yield item
        finally:
            stop.set()

    return data_reader


def cache(reader: Reader) -> Reader:
    """A reader of ``reader``'s samples read once, now, into memory (``paddle.reader.cache``:
    Paddle reads the whole reader when ``cache`` is called, too).

    >>> list(cache(lambda: iter([1, 2]))())
    [1, 2]
    """
    all_data = tuple(reader())

    def cached_reader():
        yield from all_data

    return cached_reader


class Fake:
    """``paddle.reader.Fake``: ``Fake()(reader, data_num)`` is a reader yielding the first sample
    of ``reader`` ``data_num`` times (the sample is read once and kept), for speed tests.

    >>> list(Fake()(lambda: iter([7, 8]), 3)())
    [7, 7, 7]
    """

    def __init__(self):
        self.data = None
        self.yield_num = 0

    def __call__(self, reader: Reader, data_num: int) -> Reader:
        def fake_reader():
            if self.data is None:
                self.data = next(reader())
            while self.yield_num < data_num:
                yield self.data
                self.yield_num += 1
            self.yield_num = 0

        return fake_reader


def _threaded(sources: list[Callable[[Callable[[Any], bool]], None]], size: int, name: str) -> Iterator[Any]:
    """Run each ``source(put)`` in a daemon thread, yielding what they put (through a queue of at
    most ``size`` items) until all have finished; an exception of a source is raised here, and a
    consumer that stops early stops the threads (at their next ``put``)."""
    q: queue.Queue = queue.Queue(maxsize=size)
    stop = threading.Event()

    def put(message) -> bool:
        while not stop.is_set():
            try:
                q.put(message, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run(source):
        try:
            source(lambda item: put((_ITEM, item)))
            put((_END, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, re-raised there
            put((_ERROR, exc))

    threads = [threading.Thread(target=run, args=(s,), name=name, daemon=True) for s in sources]
    for t in threads:
        t.start()
    try:
        running = len(threads)
        while running:
            kind, item = q.get()
            if kind == _END:
                running -= 1
            elif kind == _ERROR:
                raise item
            else:
                yield item
    finally:
        stop.set()


def xmap_readers(mapper: Callable[[Any], Any], reader: Reader, process_num: int, buffer_size: int,
                 order: bool = False) -> Reader:
    """A reader of ``mapper(sample)`` over ``reader``'s samples, mapped by ``process_num``
    threads through buffers of ``buffer_size`` (``paddle.reader.xmap_readers``); ``order`` keeps
    the input order, otherwise results come as they are ready. A mapper's exception is raised
    to the consumer (Paddle's worker thread would die and leave the consumer waiting).

    >>> sorted(xmap_readers(lambda x: x * 2, lambda: iter(range(4)), 2, 4)())
    [0, 2, 4, 6]
    """
    workers = _positive("process_num", process_num, "xmap_readers")
    size = _positive("buffer_size", buffer_size, "xmap_readers", ceil=True)

    def xreader():
        lock = threading.Lock()
        source = enumerate(reader())

        def work(put):
            while True:
                with lock:
                    try:
                        index, sample = next(source)
                    except StopIteration:
                        return
                if not put((index, mapper(sample))):
                    return

        results = _threaded([work] * workers, size, "fluidjax-xmap-reader")
        if not order:
            for _, mapped in results:
                yield mapped
            return
        pending, want = {}, 0
        for index, mapped in results:
            pending[index] = mapped
            while want in pending:
                yield pending.pop(want)
                want += 1

    return xreader


def multiprocess_reader(readers: list[Reader], use_pipe: bool = True, queue_size: int = 1000) -> Reader:
    """A reader of the samples of all ``readers``, read concurrently and interleaved as they come
    (``paddle.reader.multiprocess_reader``). fluidjax reads them in threads, not forked
    processes (a fork of a process running JAX is unsafe, and samples cross no pickle);
    ``use_pipe`` is accepted and changes nothing. A ``None`` sample is an error, as in Paddle.

    >>> sorted(multiprocess_reader([lambda: iter([1, 2]), lambda: iter([3])])())
    [1, 2, 3]
    """
    if not isinstance(readers, (list, tuple)) or not readers:
        raise ValueError(f"multiprocess_reader: readers should be a non-empty list of readers, got {readers!r}")
    size = _positive("queue_size", queue_size, "multiprocess_reader", ceil=True)

    def source(r):
        def read(put):
            for sample in r():
                if sample is None:
                    raise ValueError("multiprocess_reader: a reader yielded None (Paddle refuses None samples)")
                if not put(sample):
                    return
        return read

    def reader():
        yield from _threaded([source(r) for r in readers], size, "fluidjax-multiprocess-reader")

    return reader
