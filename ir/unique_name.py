"""Paddle's naming scheme: ``fc_0``, ``fc_0.w_0``, ``fc_0.tmp_1`` — one counter per key, process-wide.

Names are global (as in Paddle) so that parameters created in two programs never collide; use
:func:`guard` to restart the counters, e.g. to build the same model twice with the same names.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Iterator

_counters: defaultdict[str, int] = defaultdict(int)


def generate(key: str) -> str:
    """Return ``f"{key}_{n}"`` with ``n`` counting up from 0 for each key."""
    n = _counters[key]
    _counters[key] = n + 1
    return f"{key}_{n}"


@contextlib.contextmanager
def guard() -> Iterator[None]:
    """Start fresh counters inside the block and restore the previous ones after it.

    >>> with guard():
    ...     generate("fc")
    'fc_0'
    """
    global _counters
    saved = _counters
    _counters = defaultdict(int)
    try:
        yield
    finally:
        _counters = saved


def reset() -> None:
    """Restart every counter (``fc_0`` again)."""
    _counters.clear()
