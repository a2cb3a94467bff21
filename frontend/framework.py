"""Default programs, ``program_guard`` and Fluid's ``name_scope``."""

from __future__ import annotations

import contextlib
from typing import Iterator

from ..ir.program import (Program, default_main_program, default_startup_program, switch_main_program,
                          switch_startup_program)

__all__ = ["Program", "default_main_program", "default_startup_program", "in_dygraph_mode", "name_scope",
           "program_guard"]

_name_scopes: list[str] = []


@contextlib.contextmanager
def program_guard(main_program: Program, startup_program: Program | None = None) -> Iterator[None]:
    """Make layer functions append to ``main_program`` (and parameters to ``startup_program``).

    >>> main, startup = Program(), Program()
    >>> with program_guard(main, startup):
    ...     pass   # layer.data(...), layer.fc(...) build into `main`
    """
    if not isinstance(main_program, Program):
        raise TypeError(f"program_guard needs a fluidjax Program, got {type(main_program).__name__}")
    previous_main = switch_main_program(main_program)
    previous_startup = switch_startup_program(startup_program) if startup_program is not None else None
    try:
        yield
    finally:
        switch_main_program(previous_main)
        if previous_startup is not None:
            switch_startup_program(previous_startup)


@contextlib.contextmanager
def name_scope(prefix: str | None = None) -> Iterator[None]:
    """Fluid's ``name_scope``: groups ops for display. Paddle records the scope in an op
    attribute only its visualizer reads; fluidjax keeps the nesting (``current_name_scope()``)
    and changes no variable or op name, as Paddle does not.

    >>> with name_scope("encoder"):
    ...     pass
    """
    _name_scopes.append(str(prefix or ""))
    try:
        yield
    finally:
        _name_scopes.pop()


def current_name_scope() -> str:
    """The nested name scopes, ``"/"``-joined (``""`` outside any)."""
    return "/".join(s for s in _name_scopes if s)


def in_dygraph_mode() -> bool:
    """Always False: fluidjax builds static programs (Fluid's dygraph is not offered)."""
    return False
