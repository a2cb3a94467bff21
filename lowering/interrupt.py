"""Stopping a run whose ``while`` never ends: Ctrl-C, and the ``FLAGS_max_while_iterations`` guard.

A compiled step is one XLA call: Python cannot stop it, and Ctrl-C (deferred while a donating step
holds the state, see ``signals.py``) would wait for a loop that never ends. So a step that contains
a ``while`` op is run differently (``Executor._call_interruptible``):

- it is compiled *without donation*: the scope keeps its old values until the commit, so the run can
  be abandoned at any moment and the scope is as it was;
- on the main thread it runs in a worker thread while the main thread waits in short slices, so a
  signal handler (Ctrl-C's ``KeyboardInterrupt``) runs within one slice and its exception abandons
  the run;
- every loop polls the host every :data:`POLL_EVERY` iterations (an ``io_callback`` inside a
  ``lax.cond`` in the loop's condition, see :func:`loop_gate`): an abandoned run's loops then end at
  their next poll, so the worker does not spin a core forever. Its results are dropped.

``FLAGS_max_while_iterations`` (0: no bound) makes every ``while`` op of a step stop after that
many iterations and the run raise :class:`~fluidjax.LoopBoundError` naming the op, its line and the
bound; nothing is committed. It is part of the compiled step (changing it recompiles).

Each run of such a step gets a token (an int32 argument of the step) that its polls and bound hits
report under, so runs on other threads are not disturbed by one run's cancellation.
"""

from __future__ import annotations

import atexit
import itertools
import threading
from contextlib import contextmanager
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import io_callback

__all__ = ["POLL_EVERY", "loop_gate", "running", "tracing"]

# A loop asks the host whether its run is abandoned once every POLL_EVERY iterations: a callback
# costs tens of microseconds, the lax.cond that skips it well under one.
POLL_EVERY = 1024

_lock = threading.Lock()
_ended = threading.Condition(_lock)     # notified when a run finishes
_tokens = itertools.count(1)
_cancelled: set[int] = set()
_in_flight: set[int] = set()
_bound_hits: dict[int, list] = {}       # token -> [(op type, where it was built)] of loops at the bound
_trace = threading.local()
_TRUE = np.bool_(True)
_FALSE = np.bool_(False)


@contextmanager
def tracing(token, bound: int):
    """While a step is traced: loops poll under ``token`` and stop after ``bound`` iterations (0: no
    bound); both are traced int32 scalars, arguments of the step, so a new bound does not recompile."""
    previous = getattr(_trace, "context", None)
    _trace.context = (token, bound)
    try:
        yield
    finally:
        _trace.context = previous


def _poll(where, token, at_bound) -> np.bool_:
    """Host side of a loop's poll: False ends the loop (its run is abandoned, or it reached the bound)."""
    token = int(token)
    if at_bound:
        with _lock:
            _bound_hits.setdefault(token, []).append(where)
        return _FALSE
    return _FALSE if token in _cancelled else _TRUE


def loop_gate(op, i, running):
    """The condition of ``op``'s ``lax.while_loop`` at iteration ``i``: ``running`` (the loop's own
    condition), and, when a step is traced for interruption, not abandoned and under the bound."""
    context = getattr(_trace, "context", None)
    if context is None:
        return running
    token, bound = context
    where = (op.type, str(op.location))      # static: no reference to the op (or its program)
    go = jnp.asarray(running).reshape(())
    at_bound = go & (bound > 0) & (i >= bound)
    ask = (i % POLL_EVERY == POLL_EVERY - 1) | at_bound

    def poll():
        return io_callback(partial(_poll, where), jax.ShapeDtypeStruct((), jnp.bool_), token, at_bound,
                           ordered=False)

    return go & lax.cond(ask, poll, lambda: jnp.bool_(True))


# -- the host's side of a run -------------------------------------------------------------------------
def new_token() -> int:
    """A token for one run (registered as in flight until :func:`finished`)."""
    with _lock:
        token = next(_tokens) & 0x7FFFFFFF or 1
        _in_flight.add(token)
        return token


def cancel(token: int) -> None:
    """Abandon the run of ``token``: its loops end at their next poll."""
    with _lock:
        if token in _in_flight:
            _cancelled.add(token)


def finished(token: int) -> list:
    """The run of ``token`` returned: forget it; (op type, where) of the loops that reached the bound."""
    with _lock:
        _in_flight.discard(token)
        _cancelled.discard(token)
        _ended.notify_all()
        return _bound_hits.pop(token, [])


def running() -> int:
    """How many runs of interruptible steps are still executing (abandoned ones included)."""
    with _lock:
        return len(_in_flight)


def _stop_all(timeout: float = 5.0) -> None:
    """At exit: abandon the runs still executing and give their loops time to end. A worker
    thread still inside XLA when the interpreter finalizes would abort the process."""
    with _lock:
        _cancelled.update(_in_flight)
        _ended.wait_for(lambda: not _in_flight, timeout)


atexit.register(_stop_all)
