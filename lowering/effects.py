"""Host effects of a run happen once, for the attempt that commits (docs/reliability.md, "Exactly once").

A compiled step may be called more than once for one ``exe.run``: a run whose tensor arrays or
LoD loop bounds outgrow their room is thrown away and done again with the room grown, and a run can
be abandoned (Ctrl-C, ``FLAGS_max_while_iterations``) or fail (a run-time check) after its host
callbacks ran. State is put back in all those cases; this module does the same for the step's
host effects, ``print`` (Fluid's ``layers.Print``) and ``py_func``:

- the Executor opens a :class:`Journal` around a whole run (all its attempts) and hands the step
  its *ticket*, an int32 array ``[journal id, attempt]``, as an argument (the step's last); the
  callbacks receive it as an operand, so each reports to its own run even when several threads run
  steps at once (callbacks run on XLA's threads);
- a ``print`` is buffered in its attempt and written to stdout when the attempt commits
  (:meth:`Journal.commit`); a thrown-away, abandoned or failed attempt's prints are dropped, and
  ``first_n`` counts committed prints only;
- in a run that may be done again (its step checks a room or bound the Executor grows), each
  ``py_func`` call's inputs and results are kept for the run: a call of a re-run attempt with the
  same op and inputs as a call of an earlier attempt (not yet matched in this attempt) gets that
  call's results, so the user's function is called once per distinct call of the run (its
  backward function likewise). Inputs are compared exactly (a copy is kept: hashing them cost more
  than the copy, 4-7 ms a MiB against 0.2 ms). A callback of an attempt no longer current (an
  abandoned run's step still finishing in a worker thread) calls nothing and prints nothing.

A step called without a journal (ticket ``[0, 0]``: ``Executor.lower``, a data-parallel step, the
bridge's function) acts at once, as a plain JAX host callback does.
"""

from __future__ import annotations

import itertools
import sys
import threading
import weakref
from contextlib import contextmanager
from typing import Callable, Sequence

import numpy as np

__all__ = ["Journal", "open_journal", "close", "next_attempt", "IDLE_TICKET", "tracing", "traced_ticket",
           "emit_print", "call_once", "site_of", "clear_failed_tokens"]

#: The ticket of a step called outside a run: its effects act at once.
IDLE_TICKET = np.zeros(2, np.int32)

_lock = threading.Lock()
_ids = itertools.count(1)
_journals: dict[int, "Journal"] = {}
_printed: dict = {}                     # print site -> how many of its prints were committed
_sites: set = set()                     # the sites of ops alive (see site_of)
_trace = threading.local()


class Journal:
    """The host effects of one run: the current attempt's prints, and every ``py_func`` result
    of the run's attempts."""

    def __init__(self, ident: int, keep: bool = True) -> None:
        self.id = ident
        self.attempt = 0
        self.prints: list[tuple] = []    # (site, first_n, text) of the current attempt
        # A run that may be done again keeps its py_func calls: site -> [[inputs, results, the last
        # attempt that used them]], in call order; site -> the first entry the attempt has not used.
        self.keep = keep
        self.entries: dict = {}
        self.start: dict = {}
        self.lock = threading.Lock()

    def ticket(self) -> np.ndarray:
        return np.array([self.id, self.attempt], np.int32)

    def commit(self) -> None:
        """The attempt committed: write its prints (the first ``first_n`` of each print op's
        committed prints) to stdout."""
        with self.lock:
            prints, self.prints = self.prints, []
        if prints:
            _write(prints)


def _write(prints: Sequence[tuple]) -> None:
    out = []
    with _lock:
        for site, first_n, text in prints:
            count = _printed.get(site, 0)
            if first_n < 0 or count < first_n:
                out.append(text)
            _printed[site] = count + 1
    if out:
        sys.stdout.write("".join(out))
        sys.stdout.flush()


def open_journal(reruns: bool = True) -> Journal:
    """A journal for one run, at its first attempt. ``reruns``: whether the run's step may be done
    again (it checks a room or bound the Executor grows); only then are ``py_func`` calls kept
    (a copy of their inputs and results, for the run's duration)."""
    with _lock:
        ident = next(_ids) & 0x7FFFFFFF or next(_ids)
        journal = _journals[ident] = Journal(ident, reruns)
    return journal


def close(journal: Journal | None) -> None:
    """The run ended (committed or not): later callbacks of its attempts act on nothing."""
    if journal is not None:
        with _lock:
            _journals.pop(journal.id, None)


def next_attempt(ticket):
    """The ticket of the next attempt of ``ticket``'s run; the attempt before it is thrown away
    (its buffered prints dropped; its ``py_func`` results stay, for the new attempt to reuse)."""
    if ticket is None or int(ticket[0]) == 0:
        return ticket
    with _lock:
        journal = _journals.get(int(ticket[0]))
    if journal is None:
        return ticket
    with journal.lock:
        journal.attempt += 1
        journal.prints, journal.start = [], {}
        return journal.ticket()


def _current(ticket) -> tuple[Journal | None, bool]:
    """(the journal, whether ``ticket`` is its current attempt); (None, True) without one."""
    ident, attempt = int(ticket[0]), int(ticket[1])
    if ident == 0:
        return None, True
    with _lock:
        journal = _journals.get(ident)
    return journal, journal is not None and journal.attempt == attempt


# -- tracing: the step's ticket, for the ops that call the host ----------------------------------
@contextmanager
def tracing(ticket):
    """While a step is traced: ``ticket`` (a traced int32[2], an argument of the step) is what
    its ``print`` and ``py_func`` callbacks report under."""
    previous = getattr(_trace, "ticket", None)
    _trace.ticket = ticket
    try:
        yield
    finally:
        _trace.ticket = previous


def traced_ticket():
    """The ticket of the step being traced, or the idle ticket (effects act at once)."""
    ticket = getattr(_trace, "ticket", None)
    return IDLE_TICKET if ticket is None else ticket


# -- the callbacks' side --------------------------------------------------------------------------
def emit_print(ticket, site, first_n: int, text: Callable[[], str]) -> None:
    """A ``print`` op's callback: buffered in its attempt, or written now without a journal."""
    journal, current = _current(ticket)
    if not current:
        return                              # an attempt thrown away or a run already ended
    if first_n >= 0 and committed_prints(site) >= first_n:
        return                              # (the count only grows: it will never be written)
    if journal is None:
        _write([(site, first_n, text())])
        return
    entry = (site, first_n, text())
    with journal.lock:
        if journal.attempt == int(ticket[1]):
            journal.prints.append(entry)


def _same(kept: Sequence[np.ndarray], arrays: Sequence) -> bool:
    return len(kept) == len(arrays) and all(
        k.shape == np.shape(a) and k.dtype == np.asarray(a).dtype and np.array_equal(k, a, equal_nan=k.dtype.kind in "fc")
        for k, a in zip(kept, arrays))


def call_once(ticket, site, arrays: Sequence, call: Callable[[], list], idle: Callable[[], list]) -> list:
    """A ``py_func`` callback: ``call()``'s results, called once per distinct call of the run
    (a re-run attempt's call with the same inputs as an earlier attempt's gets that call's
    results); ``idle()`` (zeros) for an attempt that can no longer commit."""
    journal, current = _current(ticket)
    if journal is None:
        return call() if current else idle()
    if not current:
        return idle()
    if not journal.keep:
        return call()
    attempt = int(ticket[1])
    with journal.lock:
        entries = journal.entries.setdefault(site, [])
        if attempt > 0:
            start = journal.start.get(site, 0)
            for i in range(start, len(entries)):
                entry = entries[i]
                if entry[2] != attempt and _same(entry[0], arrays):
                    entry[2] = attempt          # used by this attempt: a second equal call gets the next
                    while start < len(entries) and entries[start][2] == attempt:
                        start += 1
                    journal.start[site] = start
                    return entry[1]
    results = [np.array(r) for r in call()]
    with journal.lock:
        entries.append([[np.array(a) for a in arrays], results, attempt])
    return results


def clear_failed_tokens() -> None:
    """Forget this thread's JAX runtime tokens that carry a failure. A step with an ordered effect
    (``print``) threads JAX's token from one call to the next; when a call fails (a ``py_func``
    raising, XLA out of memory) its token holds the error, and every later step with a print on
    this thread failed with that old error. Called where a run of such a step failed, on the
    thread that dispatched it."""
    try:
        from jax._src import dispatch
        tokens = dispatch.runtime_tokens
        held = (tokens.current_tokens, tokens.output_runtime_tokens)
    except (ImportError, AttributeError):    # another JAX: nothing known to clear
        return
    for table in held:
        for key, token in list(table.items()):
            try:
                token.block_until_ready()
            except Exception:  # noqa: BLE001  (the failure the token carries)
                table.pop(key, None)


def site_of(op, kind: str) -> tuple:
    """What a ``kind`` op's effects are kept under: ``op``'s identity, forgotten with it (so a new op
    that reuses its ``id`` does not inherit its ``first_n`` count)."""
    site = (kind, id(op))
    with _lock:
        if site in _sites:
            return site
        _sites.add(site)
    weakref.finalize(op, _forget, site)
    return site


def _forget(site) -> None:
    with _lock:
        _sites.discard(site)
        _printed.pop(site, None)


def committed_prints(site) -> int:
    """How many prints of ``site`` were committed (first_n's count)."""
    with _lock:
        return _printed.get(site, 0)
