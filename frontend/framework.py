"""Default programs and ``program_guard``."""

from __future__ import annotations

import contextlib
from typing import Iterator

from ..ir.program import (Program, default_main_program, default_startup_program, switch_main_program,
                          switch_startup_program)

__all__ = ["Program", "default_main_program", "default_startup_program", "program_guard"]


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
