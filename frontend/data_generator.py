"""Fluid's ``fluid.incubate.data_generator``: the user side of a dataset's pipe command.

A Fluid dataset (``fluid.DatasetFactory().create_dataset()``, :mod:`.dataset`) runs a *pipe
command* over each of its files — usually ``python my_generator.py``, a script that subclasses
:class:`MultiSlotDataGenerator`, turns each raw line into named slots in ``generate_sample`` and
calls :meth:`DataGenerator.run_from_stdin`. Each sample is written to stdout in Paddle's
MultiSlot text format: for every slot, the number of values then the values, space-separated, one
sample a line::

    3 0.5 0.1 0.2 1 17 1 0        # slot 1: three floats; slot 2: one id; slot 3 (label): one id

The dataset parses these lines back into feeds (:func:`.dataset.parse_multislot_line`). The
rules are Fluid 1.8's: a slot's values must be a non-empty list (pad in ``generate_sample``);
int values are ids (``uint64``), a float makes the slot ``float``; every sample has the same slot
names in the same order; ``generate_batch`` may rework a group of ``set_batch`` samples.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterable

from ..ir.errors import FeedError

__all__ = ["DataGenerator", "MultiSlotDataGenerator", "MultiSlotStringDataGenerator"]


class DataGenerator:
    """The base of Fluid's data generators: subclass it and define ``generate_sample(line)``,
    which returns a function yielding samples (lists of ``(slot_name, values)``)."""

    def __init__(self) -> None:
        self._proto_info = None
        self.batch_size_ = 32
        self._line_limit = None

    def _set_line_limit(self, line_limit: int) -> None:
        if not isinstance(line_limit, int) or line_limit < 1:
            raise ValueError(f"line_limit should be a positive int, got {line_limit!r}")
        self._line_limit = line_limit

    def set_batch(self, batch_size: int) -> None:
        """How many samples ``generate_batch`` receives at once (Fluid's default 32)."""
        self.batch_size_ = batch_size

    def generate_sample(self, line: str) -> Callable[[], Iterable]:
        """Override: return a function that yields the samples of one input ``line``; each sample
        is a list (or zip) of ``(slot_name, list_of_values)``; a ``None`` sample is skipped."""
        raise NotImplementedError("please rewrite generate_sample(line) in your data generator: it returns a "
                                  "function yielding the samples of one line as [(slot_name, values), ...]")

    def generate_batch(self, samples: list) -> Callable[[], Iterable]:
        """Override to rework a group of samples (``set_batch`` of them); the default yields them as they are."""

        def local_iter():
            yield from samples

        return local_iter

    def _emit(self, samples: list, write: Callable[[str], Any]) -> None:
        for sample in self.generate_batch(samples)():
            write(self._gen_str(sample))

    def _run(self, lines: Iterable[str], write: Callable[[str], Any]) -> None:
        batch: list = []
        for count, line in enumerate(lines):
            if self._line_limit is not None and count >= self._line_limit:
                break
            for sample in self.generate_sample(line)():
                if sample is None:
                    continue
                batch.append(sample)
                if len(batch) == self.batch_size_:
                    self._emit(batch, write)
                    batch = []
        if batch:
            self._emit(batch, write)

    def run_from_stdin(self) -> None:
        """Read raw lines from stdin and write one MultiSlot line per sample to stdout (what a
        dataset's pipe command runs)."""
        self._run(sys.stdin, sys.stdout.write)
        sys.stdout.flush()

    def run_from_memory(self) -> None:
        """Generate from ``generate_sample(None)`` (no input lines) and write the samples to stdout."""
        batch: list = []
        for sample in self.generate_sample(None)():
            if sample is None:
                continue
            batch.append(sample)
            if len(batch) == self.batch_size_:
                self._emit(batch, sys.stdout.write)
                batch = []
        if batch:
            self._emit(batch, sys.stdout.write)
        sys.stdout.flush()

    def _gen_str(self, line) -> str:
        raise NotImplementedError("use MultiSlotDataGenerator or MultiSlotStringDataGenerator")


def _fields(line) -> list:
    if isinstance(line, zip):
        line = list(line)
    if not isinstance(line, (list, tuple)):
        raise FeedError(f"the output of generate_sample must be a list or tuple of (slot_name, values), got "
                        f"{type(line).__name__}")
    return list(line)


class MultiSlotDataGenerator(DataGenerator):
    """Writes numeric slots: ids (``int``, Paddle's ``uint64``) or ``float`` values."""

    def _gen_str(self, line) -> str:
        fields = _fields(line)
        first = self._proto_info is None
        if first:
            self._proto_info = []
        elif len(fields) != len(self._proto_info):
            raise FeedError(f"a sample has {len(fields)} slots, the first sample had {len(self._proto_info)}: "
                            "every sample must give the same slots")
        out = []
        for index, item in enumerate(fields):
            name, elements = item
            if not isinstance(name, str):
                raise FeedError(f"slot name {name!r} must be a str")
            if not isinstance(elements, list):
                raise FeedError(f"slot {name!r}: the values must be a list, got {type(elements).__name__}")
            if not elements:
                raise FeedError(f"slot {name!r}: the values of a slot can not be empty, you need to pad them in "
                                "generate_sample")
            if first:
                self._proto_info.append((name, "uint64"))
            elif name != self._proto_info[index][0]:
                raise FeedError(f"the slot names of two samples do not match: expected "
                                f"{self._proto_info[index][0]!r}, got {name!r}")
            out.append(str(len(elements)))
            for elem in elements:
                if isinstance(elem, float):
                    self._proto_info[index] = (name, "float")
                elif not isinstance(elem, int) or isinstance(elem, bool):
                    raise FeedError(f"slot {name!r}: value {elem!r} is {type(elem).__name__}; the values must be "
                                    "int or float")
                out.append(str(elem))
        return " ".join(out) + "\n"


class MultiSlotStringDataGenerator(DataGenerator):
    """Writes slots whose values are already strings (written as they are)."""

    def _gen_str(self, line) -> str:
        out = []
        for name, elements in _fields(line):
            out.append(str(len(elements)))
            out.extend(str(e) for e in elements)
        return " ".join(out) + "\n"
