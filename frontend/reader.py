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
import numbers
import queue
import random
import threading
from typing import Any, Callable, Iterator

__all__ = ["ComposeNotAligned", "batch", "buffered", "chain", "compose", "firstn", "map_readers", "shuffle"]

Reader = Callable[[], Iterator[Any]]


class ComposeNotAligned(ValueError):
    """The readers given to :func:`compose` yielded different numbers of samples."""


def _positive(name: str, value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{what}: {name} should be a positive integer, but got {name}={value!r}")
    return int(value)


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
    buf_size = _positive("buf_size", buf_size, "shuffle")

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
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise ValueError(f"firstn: n should be a non-negative integer, but got n={n!r}")

    def firstn_reader():
        yield from itertools.islice(reader(), int(n))

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
    size = _positive("size", size, "buffered")

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
