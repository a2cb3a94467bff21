"""Fluid 1.x's old reader API: ``fluid.layers.py_reader``, ``create_py_reader_by_data``,
``read_file`` and ``double_buffer``.

In Fluid these made a READER variable, a ``create_py_reader`` op in the startup program and a
``read`` op in the main program, fed by a C++ blocking queue. Here a reader is a Python object
over a non-iterable :class:`~.data_loader.GeneratorLoader` (the loader behind
``fluid.io.DataLoader`` / ``PyReader``): ``py_reader`` declares one data variable per slot
(``<name>_slot_<i>``, shape as given, batch dim ``-1``), ``read_file`` returns them, and
``start()`` makes the loader the program's feed source, so ``exe.run(program)`` without a feed
takes the next batch and raises ``fluid.core.EOFException`` when the generator is exhausted. The
program holds plain data variables (no reader ops): saved for inference, it is fed by name.

>>> reader = fluid.layers.py_reader(capacity=64, shapes=[(-1, 784), (-1, 1)], dtypes=["float32", "int64"])  # doctest: +SKIP
>>> image, label = fluid.layers.read_file(reader)        # doctest: +SKIP
>>> reader.decorate_paddle_reader(paddle.batch(train_reader, 32))   # doctest: +SKIP
>>> for epoch in range(2):                               # doctest: +SKIP
...     reader.start()
...     try:
...         while True:
...             exe.run(fetch_list=[loss])
...     except fluid.core.EOFException:
...         reader.reset()
"""

from __future__ import annotations

from typing import Sequence

from ..ir import unique_name
from ..ir.variable import Variable
from .data_layers import reader_slot
from .data_loader import GeneratorLoader

__all__ = ["py_reader", "create_py_reader_by_data", "read_file", "double_buffer"]


class PyReaderHandle:
    """What ``py_reader`` / ``create_py_reader_by_data`` return (Fluid's reader variable with its
    monkey-patched methods): ``decorate_*`` give it a generator, ``start()`` / ``reset()`` begin
    and end a pass, and ``read_file`` gives its data variables."""

    def __init__(self, name: str, feed_list: Sequence[Variable], capacity: int, use_double_buffer: bool) -> None:
        self.name = name
        self._feed_list = list(feed_list)
        self._loader = GeneratorLoader(self._feed_list, capacity, use_double_buffer, iterable=False)

    @property
    def feed_list(self) -> list[Variable]:
        """The data variables ``read_file`` returns, in slot order."""
        return list(self._feed_list)

    def decorate_paddle_reader(self, reader, places=None) -> None:
        """``reader`` yields minibatches (lists of samples, ``paddle.batch``'s); converted as
        ``DataFeeder`` converts them."""
        self._loader.set_sample_list_generator(reader, places)

    decorate_sample_list_generator = decorate_paddle_reader

    def decorate_tensor_provider(self, reader, places=None) -> None:
        """``reader`` yields batches: one array (or LoDTensor) per slot."""
        self._loader.set_batch_generator(reader, places)

    decorate_batch_generator = decorate_tensor_provider

    def decorate_sample_generator(self, sample_generator, batch_size: int, drop_last: bool = True,
                                  places=None) -> None:
        """``sample_generator`` yields samples, batched here by ``batch_size``."""
        self._loader.set_sample_generator(sample_generator, batch_size, drop_last, places)

    def start(self) -> None:
        """Begin a pass: runs of the program without a feed take the next batch until
        ``fluid.core.EOFException``."""
        self._loader.start()

    def reset(self) -> None:
        """End the pass (after ``EOFException``, or to stop early)."""
        self._loader.reset()

    def __repr__(self) -> str:
        return f"<py_reader {self.name!r} of {[v.name for v in self._feed_list]}>"


def py_reader(capacity: int, shapes: Sequence[Sequence[int]], dtypes: Sequence, lod_levels: Sequence[int] | None = None,
              name: str | None = None, use_double_buffer: bool = True) -> PyReaderHandle:
    """A reader of batches with one slot per entry of ``shapes`` / ``dtypes`` (``lod_levels``
    default 0): Fluid 1.x's ``fluid.layers.py_reader``. ``capacity`` batches are made ahead in a
    thread; ``use_double_buffer`` is accepted (that thread already overlaps reading with runs)."""
    if len(shapes) != len(dtypes):
        raise ValueError(f"py_reader: shapes ({len(shapes)}) and dtypes ({len(dtypes)}) must have one entry per slot")
    lod_levels = [0] * len(shapes) if lod_levels is None else list(lod_levels)
    if len(lod_levels) != len(shapes):
        raise ValueError(f"py_reader: lod_levels ({len(lod_levels)}) must have one entry per slot ({len(shapes)})")
    name = name or unique_name.generate("create_py_reader")
    feed_list = [reader_slot(f"{name}_slot_{i}", list(shape), dtype, int(lod))
                 for i, (shape, dtype, lod) in enumerate(zip(shapes, dtypes, lod_levels))]
    return PyReaderHandle(name, feed_list, capacity, use_double_buffer)


def create_py_reader_by_data(capacity: int, feed_list: Sequence[Variable], name: str | None = None,
                             use_double_buffer: bool = True) -> PyReaderHandle:
    """A reader feeding the data variables ``feed_list`` (made by ``fluid.data`` /
    ``layers.data``); ``read_file`` returns them."""
    if not feed_list or not all(isinstance(v, Variable) for v in feed_list):
        raise TypeError("create_py_reader_by_data: feed_list must be a non-empty list of data Variables")
    return PyReaderHandle(name or unique_name.generate("create_py_reader"), feed_list, capacity, use_double_buffer)


def read_file(reader: PyReaderHandle):
    """The reader's data variables: one Variable for a one-slot reader, else a list."""
    if not isinstance(reader, PyReaderHandle):
        raise TypeError(f"read_file: expected a reader made by py_reader or create_py_reader_by_data, got "
                        f"{type(reader).__name__}")
    out = reader.feed_list
    return out[0] if len(out) == 1 else out


def double_buffer(reader: PyReaderHandle, place=None, name: str | None = None) -> PyReaderHandle:
    """The reader itself: its batches are already prepared ahead in a thread (Fluid's
    ``double_buffer`` copied them to the device ahead; JAX places each batch at the run)."""
    if not isinstance(reader, PyReaderHandle):
        raise TypeError(f"double_buffer: expected a reader made by py_reader, got {type(reader).__name__}")
    return reader
