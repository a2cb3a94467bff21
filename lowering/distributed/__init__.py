"""Several processes, one program: ``fj.distributed.init`` over ``jax.distributed``.

Each process runs the same script; after :func:`init` JAX sees the devices of every process,
and a ``fj.CompiledProgram(...).with_data_parallel()`` run spans all of them: each process feeds
its own shard of the global batch (its local batch), parameters are broadcast from process 0 on
the first run and stay identical, and XLA's collectives cross process boundaries (gloo on CPU,
NCCL on GPU). Start the processes with ``python -m fluidjax.distributed.launch --nproc N script.py``
or any launcher that sets the environment variables :func:`init` reads.

>>> import fluidjax as fj
>>> # fj.distributed.init()        # before anything runs on a device
>>> # compiled = fj.CompiledProgram(main).with_data_parallel()
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np

__all__ = ["init", "config_from_env", "is_initialized", "process_index", "process_count", "gather", "gather_scope",
           "shutdown"]

_initialized = [False]


def config_from_env(environ=None) -> tuple[str | None, int | None, int | None]:
    """``(coordinator_address, num_processes, process_id)`` from the environment.

    fluidjax's own variables first (``FLUIDJAX_COORDINATOR_ADDRESS``, ``FLUIDJAX_NUM_PROCESSES``,
    ``FLUIDJAX_PROCESS_ID``), then Paddle's launcher's: ``PADDLE_TRAINER_ENDPOINTS`` (its first
    endpoint, trainer 0's, is the coordinator), ``PADDLE_TRAINERS_NUM``, ``PADDLE_TRAINER_ID``.
    Missing values are None (JAX then tries its own cluster detection: SLURM, Open MPI, ...).
    """
    env = os.environ if environ is None else environ
    address = env.get("FLUIDJAX_COORDINATOR_ADDRESS")
    if not address and env.get("PADDLE_TRAINER_ENDPOINTS"):
        address = env["PADDLE_TRAINER_ENDPOINTS"].split(",")[0].strip()
    num = env.get("FLUIDJAX_NUM_PROCESSES") or env.get("PADDLE_TRAINERS_NUM")
    if num is None and env.get("PADDLE_TRAINER_ENDPOINTS"):
        num = len([e for e in env["PADDLE_TRAINER_ENDPOINTS"].split(",") if e.strip()])
    pid = env.get("FLUIDJAX_PROCESS_ID") or env.get("PADDLE_TRAINER_ID")
    try:
        return address or None, None if num is None else int(num), None if pid is None else int(pid)
    except ValueError as exc:
        raise ValueError(f"fj.distributed: a process count or id in the environment is not an integer: {exc}") from None


def init(coordinator_address: str | None = None, num_processes: int | None = None, process_id: int | None = None,
         local_device_ids: Any = None, initialization_timeout: int = 120) -> None:
    """Join this process to a multi-process run (``jax.distributed.initialize``).

    Arguments not given are read from the environment (:func:`config_from_env`). Call it before
    anything runs on a device (before ``exe.run``). A run of one process needs nothing and
    returns at once. On CPU the collectives go over gloo.
    """
    env_address, env_num, env_pid = config_from_env()
    coordinator_address = coordinator_address or env_address
    num_processes = env_num if num_processes is None else int(num_processes)
    process_id = env_pid if process_id is None else int(process_id)
    if _initialized[0]:
        raise RuntimeError("fj.distributed.init was already called in this process")
    if num_processes == 1:
        return
    if num_processes is not None and process_id is not None and not 0 <= process_id < num_processes:
        raise ValueError(f"fj.distributed.init: process_id {process_id} is not in [0, {num_processes})")
    from jax._src import xla_bridge
    if xla_bridge.backends_are_initialized():
        raise RuntimeError("fj.distributed.init must be called before anything runs on a device (JAX's backends "
                           "have started in this process); call it at the top of the script")
    # CPU devices of several processes talk through gloo (JAX's CPU backend has no collectives
    # across processes otherwise); it changes nothing for GPUs and TPUs.
    if jax.config.jax_cpu_collectives_implementation in (None, "", "none"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                               process_id=process_id, local_device_ids=local_device_ids,
                               initialization_timeout=initialization_timeout)
    _initialized[0] = True


def is_initialized() -> bool:
    """Whether :func:`init` joined this process to a multi-process run."""
    return _initialized[0]


def process_index() -> int:
    """This process's number (0 for a single process)."""
    return jax.process_index()


def process_count() -> int:
    """How many processes run the program."""
    return jax.process_count()


def gather(value) -> np.ndarray:
    """A (possibly split over processes) array as a whole NumPy array, on every process.

    Every process must call it with the same array (it is a collective in a multi-process run).
    """
    if not isinstance(value, jax.Array) or value.is_fully_addressable:
        return np.asarray(value)
    if value.is_fully_replicated:
        return np.asarray(value.addressable_data(0))
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(value, tiled=True))


def gather_scope(scope, names=None) -> list[str]:
    """Replace the split values in ``scope`` (those of ``names``, default all) by whole NumPy
    arrays, on every process, so that a checkpoint can be written from it
    (``fj.io.save_persistables``, by process 0). Every process must call it (a collective); the
    next data-parallel run puts the values back on its devices. Returns the names gathered.
    """
    from ..lod_tensor import LoDTensor
    gathered = []
    for name in sorted(scope.local_var_names()) if names is None else names:
        holder = scope.find_var(name)
        if holder is None or not holder.holds(LoDTensor):
            continue
        tensor = holder.get(LoDTensor)
        value = tensor._value if tensor._is_initialized() else None
        if isinstance(value, jax.Array) and not value.is_fully_addressable:
            tensor._value = gather(value)
            gathered.append(name)
    return gathered


def shutdown() -> None:
    """Leave the multi-process run (optional: it also ends with the process)."""
    if _initialized[0]:
        jax.distributed.shutdown()
        _initialized[0] = False
