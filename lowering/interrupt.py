"""Stopping a run whose ``while`` never ends: Ctrl-C, and the ``FLAGS_max_while_iterations`` guard.

A compiled step is one XLA call: Python cannot stop it, and Ctrl-C (deferred while a donating step
holds the state, see ``signals.py``) would wait for a loop that never ends. So a step that contains
a ``while`` op is run differently (``Executor._call_interruptible``):

- it is compiled *without donation*: the scope keeps its old values until the commit, so the run can
  be abandoned at any moment and the scope is as it was;
- on the main thread it runs in a worker thread while the main thread waits in short slices, so a
  signal handler (Ctrl-C's ``KeyboardInterrupt``) runs within one slice and its exception abandons
  the run;
- every loop polls the host about every :data:`POLL_SECONDS` (it runs in chunks of iterations
  sized on the host, with a ``pure_callback`` between two, see :func:`while_loop`): an abandoned
  run's loops end at their next poll, so the worker does not spin a core forever. Its results are
  dropped.

``FLAGS_max_while_iterations`` (0: no bound) makes every ``while`` op of a step stop after that
many iterations and the run raise :class:`~fluidjax.LoopBoundError` naming the op, its line and the
bound; nothing is committed. It is part of the compiled step (changing it recompiles).

Each run of such a step gets a token (an int32 argument of the step) that its polls and bound hits
report under, so runs on other threads are not disturbed by one run's cancellation.
"""

from __future__ import annotations

import atexit
import itertools
import queue
import threading
import time
from contextlib import contextmanager
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["POLL_SECONDS", "while_loop", "running", "tracing"]

# A loop asks the host whether its run is abandoned between chunks of iterations; a callback
# costs tens of microseconds, so the chunks are sized for a poll about every POLL_SECONDS.
POLL_SECONDS = 0.05
FIRST_CHUNK = 256
MAX_CHUNK = 1 << 24

_lock = threading.Lock()
_ended = threading.Condition(_lock)     # notified when a run finishes
_tokens = itertools.count(1)
_cancelled: set[int] = set()
_in_flight: set[int] = set()
_bound_hits: dict[int, list] = {}       # token -> [(op type, where it was built)] of loops at the bound
_last_poll: dict[int, float] = {}       # token -> when its loops last polled
_trace = threading.local()


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


def _poll(where, token, at_bound, chunk, iteration=None) -> np.int32:
    """Host side of a loop's poll: the next chunk's length, 0 to end the loop (its run is
    abandoned, or it reached the bound). Chunks are sized so that polls come about every
    :data:`POLL_SECONDS` whatever an iteration costs (a callback costs tens of microseconds)."""
    token, chunk, now = int(token), int(chunk), time.monotonic()
    with _lock:
        if at_bound:
            _bound_hits.setdefault(token, []).append(where)
            return np.int32(0)
        if token in _cancelled:
            return np.int32(0)
        last = _last_poll.get(token)
        _last_poll[token] = now
    if last is None:
        return np.int32(min(chunk * 8, MAX_CHUNK))
    grown = chunk * POLL_SECONDS / max(now - last, 1e-6)
    return np.int32(max(1, min(int(grown), chunk * 8, MAX_CHUNK)))


def while_loop(op, cond, body, init):
    """``lax.while_loop(cond, body, init)`` for ``op``, whose state ``init`` is ``(carry,
    iteration)``. Outside a step traced for interruption, exactly that. Inside one, the loop runs
    in chunks (an inner ``lax.while_loop`` whose condition only adds a counter comparison), and
    between two chunks of a loop still running one ``pure_callback`` asks the host whether the run
    is abandoned and how long the next chunk is (:func:`_poll`: polls about every
    :data:`POLL_SECONDS`; the first chunk is :data:`FIRST_CHUNK` iterations, so a short loop never
    calls the host). A loop at the bound (``FLAGS_max_while_iterations``) stops there and reports it."""
    context = getattr(_trace, "context", None)
    if context is None:
        return lax.while_loop(cond, body, init)
    token, bound = context
    where = (op.type, str(op.location))      # static: no reference to the op (or its program)

    def running(state):
        return jnp.asarray(cond(state)).reshape(())

    def under_bound(state):
        return (bound <= 0) | (state[1] < bound)

    def outer_body(outer):
        state, chunk = outer

        def inner_cond(inner):
            state, n = inner
            return running(state) & (n < chunk) & under_bound(state)

        def inner_body(inner):
            state, n = inner
            return body(state), n + 1

        state, _ = lax.while_loop(inner_cond, inner_body, (state, jnp.zeros((), jnp.int32)))
        go = running(state)
        at_bound = go & ~under_bound(state)

        def poll():
            # pure_callback, not io_callback: a step with an effect loses jax.jit's C++ fast path
            # (hundreds of microseconds a call). Its operands (the token, the iteration) vary,
            # and its result decides the loop: it can be neither hoisted nor dropped.
            return jax.pure_callback(partial(_poll, where), jax.ShapeDtypeStruct((), jnp.int32), token, at_bound,
                                     chunk, state[1])

        return state, lax.cond(go, poll, lambda: jnp.int32(0))

    state, _ = lax.while_loop(lambda outer: outer[1] > 0, outer_body, (init, jnp.int32(FIRST_CHUNK)))
    return state


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
        _last_poll.pop(token, None)
        _ended.notify_all()
        return _bound_hits.pop(token, [])


def running() -> int:
    """How many runs of interruptible steps are still executing (abandoned ones included)."""
    with _lock:
        return len(_in_flight)


class _Workers:
    """Daemon threads that run interruptible steps for the main thread, kept between runs (a new
    thread per run cost hundreds of microseconds). A worker still running an abandoned step is
    busy; a new one starts when none is idle."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, job) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
            else:
                threading.Thread(target=self._serve, name="fluidjax-step", daemon=True).start()
        self._jobs.put(job)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            finally:
                with self._lock:
                    self._idle += 1


workers = _Workers()


def _stop_all(timeout: float = 5.0) -> None:
    """At exit: abandon the runs still executing and give their loops time to end. A worker
    thread still inside XLA when the interpreter finalizes would abort the process."""
    with _lock:
        _cancelled.update(_in_flight)
        _ended.wait_for(lambda: not _in_flight, timeout)


atexit.register(_stop_all)
