"""Paddle's naming scheme: ``fc_0``, ``fc_0.w_0``, ``fc_0.tmp_1`` — one counter per key, process-wide.

Names are global (as in Paddle) so that parameters created in two programs never collide; use
:func:`guard` to restart the counters, e.g. to build the same model twice with the same names.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Iterator

class UniqueNameGenerator:
    """One counter per key, names ``f"{prefix}{key}_{n}"`` (Fluid's ``unique_name.UniqueNameGenerator``)."""

    def __init__(self, prefix: str | None = None) -> None:
        self.ids: defaultdict[str, int] = defaultdict(int)
        self.prefix = prefix or ""

    def __call__(self, key: str) -> str:
        n = self.ids[key]
        self.ids[key] = n + 1
        return f"{self.prefix}{key}_{n}"


_generator = UniqueNameGenerator()


def generate(key: str) -> str:
    """Return ``f"{key}_{n}"`` with ``n`` counting up from 0 for each key (with the current
    generator's prefix, if any)."""
    return _generator(key)


_para_name_checker = None   # Fluid's dygraph parameter-name checker: kept and handed back only


def switch(new_generator: UniqueNameGenerator | None = None, new_para_name_checker=None) -> tuple:
    """Make ``new_generator`` (a fresh one when None) the current generator; return the old
    ``(generator, para_name_checker)``, as Fluid 1.8's ``unique_name.switch`` does."""
    global _generator, _para_name_checker
    old = (_generator, _para_name_checker)
    _generator = new_generator if new_generator is not None else UniqueNameGenerator()
    _para_name_checker = new_para_name_checker
    return old


@contextlib.contextmanager
def guard(new_generator: "UniqueNameGenerator | str | bytes | None" = None) -> Iterator[None]:
    """Start fresh counters inside the block and restore the previous ones after it. As in Fluid,
    ``new_generator`` may be a generator, or a prefix (str) for every name generated inside.

    >>> with guard():
    ...     generate("fc")
    'fc_0'
    >>> with guard("encoder/"):
    ...     generate("fc")
    'encoder/fc_0'
    """
    if isinstance(new_generator, bytes):
        new_generator = new_generator.decode()
    if isinstance(new_generator, str):
        new_generator = UniqueNameGenerator(new_generator)
    old = switch(new_generator)
    try:
        yield
    finally:
        switch(*old)


def reset() -> None:
    """Restart every counter (``fc_0`` again)."""
    _generator.ids.clear()
