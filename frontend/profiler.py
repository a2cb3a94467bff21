"""``fluid.profiler``: Fluid 1.x's profiler calls, kept simple.

Fluid's profiler recorded every C++ op and wrote a proto for its timeline tool. Here:

- between ``start_profiler`` and ``stop_profiler`` (or inside ``with profiler(...)``) the wall
  time of every ``Executor.run`` (and ``ParallelExecutor.run``) is recorded, per program, and
  ``stop_profiler`` prints a short table (calls, total, min, max, average in ms, ordered by
  ``sorted_key``). A run's time includes compiling it the first time; ops are not timed one by one
  (XLA fuses them into one step).
- a JAX trace (``jax.profiler``: XLA's ops, per device, for TensorBoard's profile plugin or
  Perfetto) is recorded too and written under ``profile_path`` (a directory) when one is given;
  without a path (fluidjax's default, where Fluid wrote ``/tmp/profile``) it is discarded.
- ``reset_profiler`` clears the timings; ``cuda_profiler`` (nvprof) does nothing but warn.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
import warnings
from collections import defaultdict
from typing import Iterator

import jax

from ..lowering.executor import Executor

__all__ = ["cuda_profiler", "reset_profiler", "profiler", "start_profiler", "stop_profiler"]

_STATES = ("CPU", "GPU", "All")
_SORTED_KEYS = (None, "calls", "total", "max", "min", "ave")


class _Session:
    def __init__(self) -> None:
        self.active = False
        self.records: dict[str, list[float]] = defaultdict(list)
        self.trace_dir: str | None = None
        self.original_run = None


_session = _Session()


def _program_label(program) -> str:
    label = getattr(program, "_label", None)
    if callable(label):
        return label()
    inner = getattr(program, "program", None)
    if inner is not None and callable(getattr(inner, "_label", None)):
        return f"{inner._label()} (data parallel)"
    return "the default main program" if program is None else type(program).__name__


def _timed(run):
    def timed_run(self, program=None, *args, **kwargs):
        start = time.perf_counter()
        try:
            return run(self, program, *args, **kwargs)
        finally:
            if _session.active:
                _session.records[_program_label(program)].append(time.perf_counter() - start)
    timed_run.__wrapped__ = run
    return timed_run


def start_profiler(state: str, tracer_option: str = "Default") -> None:
    """Start timing runs (and a JAX trace). ``state`` is ``"CPU"``, ``"GPU"`` or ``"All"`` (all
    mean the same here); ``tracer_option`` is accepted."""
    if state not in _STATES:
        raise ValueError("The state must be 'CPU' or 'GPU' or 'All'.")
    if _session.active:
        return
    _session.active = True
    _session.original_run = Executor.run
    Executor.run = _timed(Executor.run)
    _session.trace_dir = tempfile.mkdtemp(prefix="fluidjax_profile_")
    jax.profiler.start_trace(_session.trace_dir)


def stop_profiler(sorted_key: str | None = None, profile_path: str | None = None) -> None:
    """Stop, print the table of run times ordered by ``sorted_key`` (``"calls"``, ``"total"``,
    ``"max"``, ``"min"``, ``"ave"``; None: first run first), and write the JAX trace under
    ``profile_path`` when given."""
    if sorted_key not in _SORTED_KEYS:
        raise ValueError("The sorted_key must be None or in 'calls', 'total', 'max', 'min' and 'ave'")
    if not _session.active:
        return
    _session.active = False
    Executor.run = _session.original_run
    trace_dir, _session.trace_dir = _session.trace_dir, None
    try:
        jax.profiler.stop_trace()
        if profile_path is not None:
            shutil.copytree(trace_dir, profile_path, dirs_exist_ok=True)
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)
    print(summary(sorted_key, profile_path))


def reset_profiler() -> None:
    """Clear the run times recorded so far."""
    _session.records.clear()


def summary(sorted_key: str | None = None, profile_path: str | None = None) -> str:
    """The table ``stop_profiler`` prints."""
    rows = [(name, len(t), sum(t), min(t), max(t), sum(t) / len(t)) for name, t in _session.records.items() if t]
    column = {"calls": 1, "total": 2, "min": 3, "max": 4, "ave": 5}.get(sorted_key)
    if column is not None:
        rows.sort(key=lambda row: row[column], reverse=sorted_key != "min")
    lines = ["------------------------->     Profiling Report     <-------------------------",
             f"Executor runs, wall time in ms, sorted by: {sorted_key or 'first run'}",
             f"{'Event':<48}{'Calls':>7}{'Total':>11}{'Min.':>10}{'Max.':>10}{'Ave.':>10}"]
    for name, calls, total, low, high, ave in rows:
        lines.append(f"{'run ' + name:<48}{calls:>7}{total * 1e3:>11.3f}{low * 1e3:>10.3f}{high * 1e3:>10.3f}"
                     f"{ave * 1e3:>10.3f}")
    if not rows:
        lines.append("(no Executor.run between start and stop)")
    if profile_path is not None:
        lines.append(f"JAX trace written under {profile_path} (TensorBoard's profile plugin or Perfetto)")
    return "\n".join(lines)


@contextlib.contextmanager
def profiler(state: str, sorted_key: str | None = None, profile_path: str | None = None,
             tracer_option: str = "Default") -> Iterator[None]:
    """``with profiler("CPU", "total", "/tmp/prof"): ...``: ``start_profiler`` on entry,
    ``stop_profiler(sorted_key, profile_path)`` on exit."""
    if sorted_key not in _SORTED_KEYS:
        raise ValueError("The sorted_key must be None or in 'calls', 'total', 'max', 'min' and 'ave'")
    start_profiler(state, tracer_option)
    try:
        yield
    finally:
        stop_profiler(sorted_key, profile_path)


@contextlib.contextmanager
def cuda_profiler(output_file: str, output_mode: str | None = None, config=None) -> Iterator[None]:
    """Fluid's nvprof range: does nothing here (use ``profiler``, whose JAX trace covers GPUs)."""
    warnings.warn("fluid.profiler.cuda_profiler does nothing in fluidjax (no nvprof ranges); use "
                  "fluid.profiler.profiler(..., profile_path=...) for a JAX trace", stacklevel=3)
    yield
