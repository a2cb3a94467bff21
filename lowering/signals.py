"""Deferring Python signal handlers across the few lines where a run must not be interrupted.

A run donates its state buffers to XLA: from the moment the compiled step is called until its
outputs are stored back into the scope, an exception raised by a signal handler (Ctrl-C's
``KeyboardInterrupt``, a timer's handler) would drop the only copy of the parameters. Inside
:func:`deferred_signals` the handlers of the watched signals are swapped for one that only
records the signal; on exit the real handlers are put back and the recorded signals are handed
to them, so the interrupt arrives right after the state is committed.

Python runs signal handlers on the main thread only, so runs on other threads need nothing.
Swapping costs two ``sigaction`` calls per watched signal that has a Python handler (normally
only SIGINT): about a microsecond in all.
"""

from __future__ import annotations

import _signal  # the C functions: signal's enum-converting wrappers cost ~5 us a call
import signal
import threading

_WATCHED = tuple(int(getattr(signal, n)) for n in ("SIGINT", "SIGALRM", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2",
                                              "SIGVTALRM", "SIGPROF", "SIGQUIT") if hasattr(signal, n))
_MAIN = threading.main_thread().ident

_real: dict[int, object] = {}      # signal -> the handler the user had installed
_pending: list[tuple[int, object]] = []
_depth = 0


def _record(signum, frame) -> None:
    _pending.append((signum, frame))


class deferred_signals:
    """``with deferred_signals(): ...`` — handlers that would raise are held back until exit."""

    __slots__ = ("_active",)

    def __enter__(self) -> "deferred_signals":
        global _depth
        self._active = threading.get_ident() == _MAIN
        if not self._active:
            return self
        _depth += 1
        if _depth == 1:
            try:
                for sig in _WATCHED:
                    handler = _signal.getsignal(sig)
                    if handler is _record:          # left over from an exit that was itself cut short
                        continue
                    if callable(handler):
                        _real[sig] = handler
                        _signal.signal(sig, _record)
            except BaseException:
                self._restore()
                raise
        return self

    def _restore(self) -> None:
        global _depth
        _depth = 0
        for sig, handler in list(_real.items()):
            _signal.signal(sig, handler)
            del _real[sig]

    def __exit__(self, *exc) -> None:
        global _depth
        if not self._active:
            return
        if _depth > 1:
            _depth -= 1
            return
        self._restore()
        while _pending:
            signum, frame = _pending.pop(0)
            handler = _signal.getsignal(signum)
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL and signum == signal.SIGINT:
                raise KeyboardInterrupt
