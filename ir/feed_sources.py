"""Started non-iterable readers (Fluid 1.x's ``py_reader`` / ``DataLoader(iterable=False)``) that
feed a run made without a feed.

A loader started with ``start()`` registers its feed callable with the names of its data
variables. ``exe.run(program)`` with no feed asks :func:`source_for` for the program's source:
the one set on the program itself, else the started reader whose variables the program declares
by name — so a ``clone(for_test=True)`` made before ``start()``, a ``CompiledProgram`` /
``ParallelExecutor`` of the program, or another program built on the same variables is fed
too, as Fluid's shared reader variable fed them.
"""

from __future__ import annotations

import weakref
from typing import Callable, Sequence

from .errors import FeedError

# (names, source): a bound method is held weakly (a loader dropped without reset() stops feeding).
_STARTED: list[tuple[tuple[str, ...], Callable[[], Callable[[], dict] | None]]] = []


def _ref(source: Callable[[], dict]):
    if hasattr(source, "__self__") and hasattr(source, "__func__"):
        return weakref.WeakMethod(source)
    return lambda: source


def register(names: Sequence[str], source: Callable[[], dict]) -> None:
    """Record a started reader: ``source()`` returns the next feed of variables ``names``."""
    unregister(source)
    _STARTED.append((tuple(names), _ref(source)))


def unregister(source: Callable[[], dict]) -> None:
    """Forget a reader (its ``reset()``), and any whose loader is gone."""
    _STARTED[:] = [(n, r) for n, r in _STARTED if r() is not None and r() != source]


def source_for(program) -> Callable[[], dict] | None:
    """The feed source of a run of ``program`` (a Program, or anything with its ``.program``)
    made without a feed, or None. Several started readers whose variables it declares are an error."""
    own = getattr(program, "_fluidjax_feed_source", None)
    if own is not None:
        return own
    inner = getattr(program, "_program", None) or getattr(program, "program", None)
    if inner is not None and inner is not program and hasattr(inner, "global_block"):
        own = getattr(inner, "_fluidjax_feed_source", None)
        if own is not None:
            return own
        program = inner
    if not hasattr(program, "global_block"):
        return None
    block = program.global_block()
    found = [(n, r()) for n, r in _STARTED if n and r() is not None and all(block.has_var(v) for v in n)]
    if len(found) > 1:
        raise FeedError(f"several started readers feed this program's variables ({[n for n, _ in found]}); "
                        "reset() the readers not in use, or pass feed= explicitly")
    return found[0][1] if found else None


def with_reader_feed(program, feed: dict) -> dict:
    """``feed`` plus the next batch of the started reader whose variables ``program`` declares and
    ``feed`` does not give (Fluid ran the reader's ``read`` op whatever else was fed: the 1.4
    transformer feeds its position-encoding tables on the first run of a py_reader program)."""
    if not _STARTED or not feed:
        return feed
    inner = getattr(program, "_program", None) or getattr(program, "program", None)
    program = inner if inner is not None and hasattr(inner, "global_block") else program
    if not hasattr(program, "global_block"):
        return feed
    block = program.global_block()
    found = [(n, r()) for n, r in _STARTED
             if n and r() is not None and all(block.has_var(v) for v in n) and not any(v in feed for v in n)]
    if len(found) != 1:
        return feed
    return {**found[0][1](), **feed}


def any_started() -> bool:
    """Whether some reader is started (the executor's hot path skips the lookup otherwise)."""
    return bool(_STARTED)
