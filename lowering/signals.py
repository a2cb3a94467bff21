"""Deferring Python signal handlers across the few lines where a run must not be interrupted.

A run donates its state buffers to XLA: from the moment the compiled step is called until its
outputs are stored back into the scope, an exception raised by a signal handler (Ctrl-C's
``KeyboardInterrupt``, a timer's handler) would drop the only copy of the parameters. Inside
:func:`deferred_signals` the handlers of the watched signals are swapped for one that only
records the signal; on exit the real handlers are put back and the recorded signals are handed
to them, so the interrupt arrives right after the state is committed.

Once the swap is done no handler can raise until the real ones are back: a signal that arrived
just before the swap is handled (recorded) by whichever handler is installed when Python gets to
it. Python runs signal handlers on the main thread only, so runs on other threads need nothing.
Swapping costs two ``sigaction`` calls per watched signal that has a Python handler (normally
only SIGINT); the C functions of ``_signal`` are used because the ``signal`` module's
enum-converting wrappers cost about 5 µs a call.
"""

from __future__ import annotations

import _signal
import signal
import threading

_WATCHED = tuple(int(getattr(signal, n)) for n in ("SIGINT", "SIGALRM", "SIGTERM", "SIGHUP", "SIGUSR1",
                                                   "SIGUSR2", "SIGVTALRM", "SIGPROF", "SIGQUIT")
                 if hasattr(signal, n))
_MAIN = threading.main_thread().ident
_getsignal, _setsignal, _get_ident = _signal.getsignal, _signal.signal, threading.get_ident

_pending: list[tuple[int, object]] = []
_saved: list[tuple[int, object]] = []    # (signal, the user's handler) while deferred
_depth = [0]
_last_swap: list = [None, ()]            # [the watched signals' handlers, the indices of those to swap]


def _record(signum, frame) -> None:
    _pending.append((signum, frame))


def _deliver() -> None:
    """Run the handlers of the recorded signals, in the order they came. As Python runs every
    tripped signal's handler, one that raises does not hold the others back to a later window
    (two Ctrl-Cs in one run once gave a KeyboardInterrupt at its end and another at the end of the
    next run): they run too, and an exception one of them raises replaces the first, chained to it."""
    while _pending:
        try:
            signum, frame = _pending.pop(0)
        except IndexError:    # a handler delivered here ran a deferred window of its own,
            return            # which delivered the rest
        handler = _getsignal(signum)
        try:
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL and signum == signal.SIGINT:
                raise KeyboardInterrupt
        except BaseException:
            _deliver()
            raise


def _restore() -> None:
    """Put the saved handlers back (the last swapped first). The caller sets ``_depth`` to 0 itself,
    inline, before calling: Python runs pending signal handlers on entering a function, and one
    that raised there left the depth above 0 for good -- every later window then nested inside a
    window that was never open and deferred nothing (the soak lost a run's donated state so).

    An entry is removed only once its handler is back (``signal.signal`` runs pending handlers
    before it installs one, and a handler may raise there): an exception leaves the rest saved,
    and the next window's exit puts them back; they are the user's handlers, never ``_record``."""
    _depth[0] = 0
    while _saved:
        try:
            sig, handler = _saved[-1]
        except IndexError:    # (a handler that ran here opened and closed a window of its own,
            return            # which put back the rest)
        _setsignal(sig, handler)
        try:
            _saved.pop()
        except IndexError:
            return


class deferred_signals:
    """``with deferred_signals(): ...`` — handlers that would raise are held back until exit.

    An instance holds nothing (the windows nest by a count): one may be kept and entered again,
    on any thread (only the main thread's windows defer anything)."""

    __slots__ = ()

    def __enter__(self) -> "deferred_signals":
        if _get_ident() == _MAIN:
            _depth[0] += 1
            if _depth[0] == 1:
                try:
                    # Which handlers to swap is worked out once per set of handlers (the last one
                    # kept): one C-level map and a tuple comparison on every run after that.
                    handlers = tuple(map(_getsignal, _WATCHED))
                    last = _last_swap
                    if handlers == last[0]:
                        swap = last[1]
                    else:
                        swap = tuple(i for i, h in enumerate(handlers) if h is not _record and callable(h))
                        _last_swap[:] = [handlers, swap]
                    for i in swap:
                        _saved.append((_WATCHED[i], handlers[i]))
                        _setsignal(_WATCHED[i], _record)
                except BaseException:
                    _depth[0] = 0     # first, inline: see _restore
                    _restore()
                    raise
        return self

    def __exit__(self, *exc) -> None:
        if _get_ident() != _MAIN:
            return
        if _depth[0] > 1:
            _depth[0] -= 1
            return
        _depth[0] = 0             # first, inline: see _restore
        _restore()
        if _pending:
            _deliver()


def thread_map(fn, items, workers: int) -> list:
    """``[fn(item) for item in items]`` on up to ``workers`` threads, safe to interrupt.

    Not a ``ThreadPoolExecutor``: a Ctrl-C landing inside its bookkeeping on the main thread
    (between a ``with`` taking its semaphore's lock and the block that releases it) leaks that
    lock; its workers block on it and the executor's exit waits for them forever (the DynamicRNN
    soak hung so while fsyncing a checkpoint). Here the workers share nothing with the main thread
    but a lock of their own (signals reach only the main thread), they are started with signals
    deferred, and a Ctrl-C while they run ends the wait, not them: they finish and exit alone.
    The first exception a worker raised is raised here.
    """
    items = list(items)
    results: list = [None] * len(items)
    todo, lock, errors = iter(range(len(items))), threading.Lock(), []

    def work() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None or errors:
                return
            try:
                results[i] = fn(items[i])
            except BaseException as exc:  # noqa: BLE001  (raised again by the caller's thread)
                errors.append(exc)
                return

    threads = [threading.Thread(target=work, name="fluidjax-worker", daemon=True)
               for _ in range(max(1, min(workers, len(items))))]
    with deferred_signals():
        for thread in threads:
            thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results
