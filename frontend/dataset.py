"""Fluid's ``fluid.DatasetFactory`` / ``QueueDataset`` / ``InMemoryDataset``, read on the host.

Fluid 1.x's datasets feed ``exe.train_from_dataset`` / ``infer_from_dataset`` from text files:
each file goes through the dataset's *pipe command* (a shell command reading the file on stdin,
usually ``python my_generator.py``, a :class:`~.data_generator.MultiSlotDataGenerator`; default
``cat``), whose output is Paddle's MultiSlot text: one sample a line, for every variable of
``set_use_var`` in order the number of values then the values. Here the dataset runs that command
(``cat`` is read directly), parses the lines, and yields one feed dict per batch of
``set_batch_size`` samples (the last batch may be smaller, as Fluid's reader ends a file list):

- a variable with ``lod_level`` >= 1 gets a :class:`~fluidjax.LoDTensor` ``[total, 1]`` with one
  sequence per sample (its count of values), as Fluid's MultiSlot feed does;
- a dense variable (``lod_level`` 0) gets an array of its declared shape, the one ``-1`` taking
  what the batch's values fill (``[-1, 13]`` with 13 values per sample: ``[batch, 13]``);
- a ``float32`` variable reads ``float`` slots, an ``int64`` one ``uint64`` ids; other dtypes are
  refused at ``set_use_var``, as in Fluid.

What Fluid does in C++ threads happens here in one: ``set_thread`` is recorded and the files are
read in order, which is what Fluid's reader gives with one thread (with several, Fluid
interleaves files nondeterministically). A line whose slots do not parse — a count of 0 (Fluid
asks to pad in the generator), too few values, values left over, a non-number — is a
:class:`~fluidjax.FeedError` naming the file, the line and the variable. A pipe command that
fails is a :class:`~fluidjax.FeedError` with its stderr. ``InMemoryDataset`` keeps the parsed
samples (``load_into_memory``), shuffles them (``local_shuffle``, Python's ``random``; one
process, so ``global_shuffle`` is the same), and trains on what is loaded, as Fluid's.
"""

from __future__ import annotations

import random
import shlex
import subprocess
import warnings
from typing import Iterator, Sequence

import numpy as np

from ..ir import dtypes
from ..ir.errors import FeedError, NotOfferedError
from ..ir.variable import Variable
from ..lowering.lod_tensor import LoDTensor

__all__ = ["DatasetFactory", "DatasetBase", "QueueDataset", "InMemoryDataset", "parse_multislot_line"]

_INT64_MAX = np.iinfo(np.int64).max


class _Slot:
    """One ``set_use_var`` variable: its name, value kind and feed shape."""

    def __init__(self, var: Variable) -> None:
        self.name = var.name
        dtype = dtypes.to_numpy(var.dtype)
        if dtype == np.float32:
            self.kind, self.dtype = "float", np.float32
        elif dtype == np.int64:
            self.kind, self.dtype = "uint64", np.int64
        else:
            raise FeedError(f"dataset.set_use_var: variable {var.name!r} is {dtype.name}; Fluid's datasets feed "
                            "only float32 and int64 variables (declare the data variable with one of them)")
        self.lod_level = int(var.lod_level)
        self.shape = tuple(int(d) for d in var.shape)

    def dense(self, values: list, batch: int) -> np.ndarray:
        arr = np.asarray(values, self.dtype)
        unknown = [i for i, d in enumerate(self.shape) if d < 0]
        known = int(np.prod([d for d in self.shape if d >= 0])) if self.shape else 1
        shape = list(self.shape)
        if len(unknown) == 1 and known and arr.size % known == 0:
            shape[unknown[0]] = arr.size // known
        elif unknown or arr.size != known:
            raise FeedError(f"dataset: the {batch} sample(s) of a batch give {arr.size} values for dense variable "
                            f"{self.name!r} of shape {list(self.shape)}, which they do not fill (each sample must "
                            "give the variable's shape without its -1)")
        return arr.reshape(shape)


def parse_multislot_line(line: str, slots: Sequence[_Slot], where: str = "a line") -> list[list]:
    """One MultiSlot text line → one list of values per slot (``count v1 .. vcount`` per slot)."""
    tokens = line.split()
    out, pos = [], 0
    for slot in slots:
        if pos >= len(tokens):
            raise FeedError(f"dataset: {where} ends before variable {slot.name!r} (a line gives, for every "
                            f"set_use_var variable in order, a count then that many values): {line.strip()[:200]!r}")
        try:
            count = int(tokens[pos])
        except ValueError:
            raise FeedError(f"dataset: {where}: the count of variable {slot.name!r} is {tokens[pos]!r}, not an "
                            "integer") from None
        if count <= 0:
            raise FeedError(f"dataset: {where}: variable {slot.name!r} has {count} values; a slot needs at least "
                            "one (pad it in the data generator, as Fluid requires)")
        raw = tokens[pos + 1: pos + 1 + count]
        if len(raw) < count:
            raise FeedError(f"dataset: {where}: variable {slot.name!r} announces {count} values, the line has "
                            f"{len(raw)} left")
        try:
            if slot.kind == "float":
                values = [float(t) for t in raw]
            else:
                values = [int(t) for t in raw]
        except ValueError:
            raise FeedError(f"dataset: {where}: variable {slot.name!r} ({slot.kind}) has a value that is not a "
                            f"{'number' if slot.kind == 'float' else 'non-negative integer id'}: {raw}") from None
        if slot.kind == "uint64" and any(v < 0 or v > _INT64_MAX for v in values):
            raise FeedError(f"dataset: {where}: variable {slot.name!r} has an id outside [0, 2**63): {raw}")
        out.append(values)
        pos += 1 + count
    if pos != len(tokens):
        raise FeedError(f"dataset: {where} has {len(tokens) - pos} value(s) after the last set_use_var variable "
                        f"{slots[-1].name if slots else None!r}: the generator writes more slots than set_use_var "
                        "lists")
    return out


class DatasetBase:
    """What Fluid's datasets share: the pipe command, batch size, files and variables."""

    def __init__(self) -> None:
        self.pipe_command = "cat"
        self.download_cmd = None
        self.batch_size = 32
        self.thread_num = 1
        self.filelist: list[str] = []
        self._slots: list[_Slot] = []
        self._use_vars: list[Variable] = []

    # -- Fluid's setters --------------------------------------------------------------------------
    def set_pipe_command(self, pipe_command: str) -> None:
        """The shell command each file goes through (stdin: the file; stdout: MultiSlot lines)."""
        self.pipe_command = pipe_command

    def set_batch_size(self, batch_size: int) -> None:
        """Samples per batch (the last batch of the files may be smaller)."""
        if int(batch_size) <= 0:
            raise ValueError(f"set_batch_size: batch_size must be positive, got {batch_size!r}")
        self.batch_size = int(batch_size)

    def set_thread(self, thread_num: int) -> None:
        """Recorded; the files are read in order in one thread (see the module's docstring)."""
        self.thread_num = int(thread_num)

    def set_filelist(self, filelist: Sequence[str]) -> None:
        """The files to read, in order."""
        self.filelist = [str(f) for f in filelist]

    def set_use_var(self, var_list: Sequence[Variable]) -> None:
        """The data variables each line's slots feed, in the order the lines give them."""
        self._use_vars = list(var_list)
        self._slots = [_Slot(v) for v in var_list]

    def set_download_cmd(self, download_cmd: str) -> None:
        """A command that prints a file (``download_cmd FILE``), used instead of reading the file."""
        self.download_cmd = download_cmd

    def set_hdfs_config(self, fs_name: str, fs_ugi: str) -> None:
        """Refused: fluidjax reads local files (give local paths, or a ``set_download_cmd``)."""
        raise NotOfferedError("dataset.set_hdfs_config: HDFS / AFS reading is not offered by fluidjax; copy the "
                              "files locally, or give set_download_cmd a command that prints a file")

    def set_fea_eval(self, record_candidate_size: int, fea_eval: bool = True) -> None:
        """Accepted and unused (Fluid's feature-importance evaluation slots)."""

    def set_rank_offset(self, rank_offset: str) -> None:
        """Accepted and unused (Fluid's PV-instance rank offsets)."""

    def set_pv_batch_size(self, pv_batch_size: int) -> None:
        """Accepted and unused (Fluid's PV batch size)."""

    def desc(self) -> str:
        """A text description of the feed configuration (Fluid returns its DataFeedDesc text)."""
        slots = "".join(f"  slots {{ name: {s.name!r} type: {s.kind!r} is_dense: {s.lod_level == 0} "
                        f"shape: {list(s.shape)} }}\n" for s in self._slots)
        return (f"name: \"MultiSlotDataFeed\"\nbatch_size: {self.batch_size}\nmulti_slot_desc {{\n{slots}}}\n"
                f"pipe_command: {self.pipe_command!r}\n")

    # -- reading ----------------------------------------------------------------------------------
    def _lines(self, path: str) -> Iterator[str]:
        """The MultiSlot lines of one file, through the download and pipe commands."""
        cmd = self.pipe_command.strip()
        if self.download_cmd is None and cmd == "cat":
            with open(path) as f:
                yield from f
            return
        source = f"{self.download_cmd} {_quote(path)}" if self.download_cmd else f"cat {_quote(path)}"
        full = source if cmd == "cat" else f"{source} | {cmd}"
        proc = subprocess.run(full, shell=True, capture_output=True, text=True)
        if proc.returncode != 0:
            raise FeedError(f"dataset: the pipe command {full!r} failed (exit {proc.returncode}): "
                            f"{proc.stderr.strip()[-1500:]}")
        yield from proc.stdout.splitlines()

    def _samples(self) -> Iterator[list]:
        if not self._slots:
            raise FeedError("dataset: no variables to feed: call set_use_var(list_of_data_variables) first")
        for path in self.filelist:
            for number, line in enumerate(self._lines(path), 1):
                if line.strip():
                    yield parse_multislot_line(line, self._slots, f"line {number} of {path!r} (after the pipe "
                                                                   "command)")

    def _records(self) -> Iterator[list]:
        return self._samples()

    def _batch_feed(self, samples: list) -> dict:
        feed = {}
        for i, slot in enumerate(self._slots):
            columns = [s[i] for s in samples]
            if slot.lod_level == 0:
                feed[slot.name] = slot.dense([v for c in columns for v in c], len(samples))
            else:
                data = np.asarray([v for c in columns for v in c], slot.dtype).reshape(-1, 1)
                tensor = LoDTensor(data)
                tensor.set_recursive_sequence_lengths([[len(c) for c in columns]])
                feed[slot.name] = tensor
        return feed

    def _feeds(self) -> Iterator[dict]:
        """One feed dict per batch of the files (the protocol ``Executor.train_from_dataset`` reads)."""
        batch: list = []
        for sample in self._records():
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self._batch_feed(batch)
                batch = []
        if batch:
            yield self._batch_feed(batch)


def _quote(path: str) -> str:
    return shlex.quote(path)


class QueueDataset(DatasetBase):
    """Streams the files through the pipe command at each ``train_from_dataset``."""

    def local_shuffle(self) -> None:
        """Refused, as in Fluid: a queue dataset streams; use an InMemoryDataset to shuffle."""
        raise NotImplementedError("QueueDataset does not support local shuffle, please use InMemoryDataset for "
                                  "local_shuffle")

    def global_shuffle(self, fleet=None) -> None:
        """Refused, as in Fluid: use an InMemoryDataset to shuffle."""
        raise NotImplementedError("QueueDataset does not support global shuffle, please use InMemoryDataset for "
                                  "global_shuffle")


class InMemoryDataset(DatasetBase):
    """Loads the parsed samples into memory (``load_into_memory``); trains on what is loaded."""

    def __init__(self) -> None:
        super().__init__()
        self._memory: list[list] | None = None
        self.queue_num = None
        self.parse_ins_id = False
        self.parse_content = False
        self.merge_by_lineid = False

    def set_queue_num(self, queue_num: int) -> None:
        """Accepted (Fluid's channel count)."""
        self.queue_num = queue_num

    def set_parse_ins_id(self, parse_ins_id: bool) -> None:
        """Refused when true: instance ids in the lines are Fluid's PSLib format, not read here."""
        if parse_ins_id:
            raise NotOfferedError("InMemoryDataset.set_parse_ins_id(True): lines with instance ids are not "
                                  "offered by fluidjax's dataset (MultiSlot lines only)")

    def set_parse_content(self, parse_content: bool) -> None:
        """Refused when true (PSLib's content field), as set_parse_ins_id."""
        if parse_content:
            raise NotOfferedError("InMemoryDataset.set_parse_content(True) is not offered by fluidjax's dataset")

    def set_fleet_send_batch_size(self, fleet_send_batch_size: int = 1024) -> None:
        """Accepted and unused (one process: nothing is sent)."""

    def set_fleet_send_sleep_seconds(self, fleet_send_sleep_seconds: int = 0) -> None:
        """Accepted and unused (one process: nothing is sent)."""

    def set_merge_by_lineid(self, merge_size: int = 2) -> None:
        """Refused: merging instances by line id is PSLib's and needs instance ids."""
        raise NotOfferedError("InMemoryDataset.set_merge_by_lineid is not offered by fluidjax's dataset")

    def load_into_memory(self) -> None:
        """Read and parse every file of the list now; later runs train on these samples."""
        self._memory = list(self._samples())

    def preload_into_memory(self, thread_num: int | None = None) -> None:
        """As ``load_into_memory`` (done at once: ``wait_preload_done`` returns immediately)."""
        self.load_into_memory()

    def wait_preload_done(self) -> None:
        """Nothing to wait for: ``preload_into_memory`` loads at once."""

    def local_shuffle(self) -> None:
        """Shuffle the loaded samples (Python's ``random``: ``random.seed`` makes it repeatable)."""
        if self._memory:
            random.shuffle(self._memory)

    def global_shuffle(self, fleet=None, thread_num: int = 12) -> None:
        """One process holds every sample: the same as ``local_shuffle``."""
        self.local_shuffle()

    def release_memory(self) -> None:
        """Drop the loaded samples."""
        self._memory = None

    def get_memory_data_size(self, fleet=None) -> int:
        """How many samples are loaded."""
        return len(self._memory or ())

    def get_shuffle_data_size(self, fleet=None) -> int:
        """How many samples are loaded (all of them take part in a shuffle)."""
        return len(self._memory or ())

    def _records(self) -> Iterator[list]:
        if self._memory is None:
            warnings.warn("InMemoryDataset: nothing is loaded (call load_into_memory() first); as in Fluid, the "
                          "run has no batches", stacklevel=4)
            return iter(())
        return iter(list(self._memory))


_CLASSES = {"QueueDataset": QueueDataset, "InMemoryDataset": InMemoryDataset}


class DatasetFactory:
    """``fluid.DatasetFactory().create_dataset("QueueDataset" | "InMemoryDataset")``."""

    def create_dataset(self, datafeed_class: str = "QueueDataset") -> DatasetBase:
        """A new dataset of the named class (Fluid's default: ``QueueDataset``)."""
        if datafeed_class in ("FileInstantDataset", "BoxPSDataset"):
            raise NotOfferedError(f"DatasetFactory: {datafeed_class} (Paddle's PSLib / BoxPS feeds) is not offered "
                                  "by fluidjax; use QueueDataset or InMemoryDataset")
        if datafeed_class not in _CLASSES:
            raise ValueError(f"DatasetFactory: datafeed class {datafeed_class!r} does not exist (QueueDataset, "
                             "InMemoryDataset)")
        return _CLASSES[datafeed_class]()
