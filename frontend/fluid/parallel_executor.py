"""``fluid.ParallelExecutor``: Fluid 1.x's data-parallel executor, as a
``CompiledProgram(program).with_data_parallel(loss_name=...)`` run by an :class:`Executor`.

Every fed batch is split over the JAX devices (``jax.devices()``: the GPUs, or the host's
devices; ``use_cuda`` picks nothing, JAX's default backend is used) and XLA inserts the
gradient all-reduce; the numbers are those of one device running the whole batch
(``lowering/parallel.py``). What differs from Fluid 1.x:

- a fetched value is the whole batch's (a mean loss is one value), where Fluid returned each
  device's value concatenated (a ``[devices]`` loss); ``np.mean`` of either is the same for
  equal splits;
- a ``feed`` given as a list of per-device dicts (one per device, Fluid's ``feed_parallel``
  form) is handed to ``Executor.run(compiled, feed=[...])`` as it is: each device runs exactly
  its own dict's rows or LoD sequences (``CompiledProgram.place_feeds``); a list of another
  length (a script that counted its devices itself: ``CPU_NUM``, the CPU count) is joined, LoD
  offsets rebased, and split by Paddle's rule;
- without ``feed``, the program's started ``py_reader`` / non-iterable ``DataLoader`` gives the
  next batch (the whole batch, split over the devices), or raises ``fluid.core.EOFException``;
- ``exec_strategy`` and most ``build_strategy`` settings are accepted and change nothing (XLA
  schedules, fuses and reduces; see ``docs/fluid1.md``); ``num_trainers > 1`` must match a
  multi-process run started with ``python -m fluidjax.distributed.launch``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import jax

from ...ir import feed_sources
from ...ir.errors import FeedError
from ...ir.program import Program, default_main_program
from ...lowering.executor import Executor
from ...lowering.lod_split import merge_place_feeds
from ...lowering.parallel import BuildStrategy, CompiledProgram, ExecutionStrategy
from ...lowering.places import CPUPlace
from ...lowering.scope import Scope, global_scope

__all__ = ["ParallelExecutor"]


class ParallelExecutor:
    """Fluid 1.x's ``ParallelExecutor(use_cuda, loss_name=None, main_program=None,
    share_vars_from=None, exec_strategy=None, build_strategy=None, num_trainers=1, trainer_id=0,
    scope=None)``; see the module docstring."""

    def __init__(self, use_cuda: bool, loss_name: str | None = None, main_program: Program | None = None,
                 share_vars_from: "ParallelExecutor | None" = None, exec_strategy: ExecutionStrategy | None = None,
                 build_strategy: BuildStrategy | None = None, num_trainers: int = 1, trainer_id: int = 0,
                 scope: Scope | None = None) -> None:
        if num_trainers != jax.process_count():
            raise ValueError(f"ParallelExecutor: num_trainers={num_trainers} but this run has {jax.process_count()} "
                             "process(es); multi-node training is a multi-process run started with "
                             "`python -m fluidjax.distributed.launch` (num_trainers is then the process count)")
        if share_vars_from is not None and not isinstance(share_vars_from, ParallelExecutor):
            raise TypeError(f"share_vars_from must be a ParallelExecutor, got {type(share_vars_from).__name__}")
        self._use_cuda = bool(use_cuda)
        self._program = main_program if main_program is not None else default_main_program()
        if share_vars_from is not None:
            scope = share_vars_from._scope
        self._scope = scope if scope is not None else global_scope()
        self._exec_strategy = exec_strategy if exec_strategy is not None else ExecutionStrategy()
        self._build_strategy = build_strategy if build_strategy is not None else BuildStrategy()
        self._trainer_id = int(trainer_id)
        self._compiled = CompiledProgram(self._program, self._build_strategy).with_data_parallel(
            loss_name=loss_name, build_strategy=self._build_strategy, exec_strategy=self._exec_strategy)
        self._executor = Executor(CPUPlace())

    @property
    def device_count(self) -> int:
        """The number of devices each batch is split over."""
        return self._compiled.mesh.size

    def _local_devices(self) -> int:
        return sum(d.process_index == jax.process_index() for d in self._compiled.mesh.devices.flat)

    def run(self, fetch_list: Sequence, feed: Any = None, feed_dict: Mapping | None = None,
            return_numpy: bool = True) -> list:
        """Run one step on every device and return the fetched values (whole-batch values; see
        the module docstring). ``feed_dict`` is Fluid's older name for ``feed``."""
        if feed is None and feed_dict is not None:
            feed = feed_dict
        if feed is None:
            source = feed_sources.source_for(self._program)
            feed = source() if source is not None else {}
        elif isinstance(feed, (list, tuple)):
            if not feed or not all(isinstance(f, Mapping) for f in feed):
                raise FeedError("ParallelExecutor.run: feed must be a dict, or a list with one dict per device")
            feed = [dict(f) for f in feed]
            if len(feed) != self._local_devices():
                # a script's own device count (CPU_NUM, the CPU count) differs from JAX's: the
                # dicts are joined (LoD offsets rebased) and split by Paddle's rule
                feed = merge_place_feeds(feed)[0]
        return self._executor.run(self._compiled, feed=feed, fetch_list=fetch_list, scope=self._scope,
                                  return_numpy=return_numpy)

    def drop_local_exe_scopes(self) -> None:
        """Fluid dropped its per-device temporary scopes; fluidjax keeps none (a no-op)."""

