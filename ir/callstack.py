"""Where the user's code created an op, recorded as Paddle's ``op_callstack`` attribute."""

from __future__ import annotations

import linecache
import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MAX_FRAMES = 8


def _is_internal(filename: str) -> bool:
    if filename.startswith(_PACKAGE_DIR + os.sep):
        rest = filename[len(_PACKAGE_DIR) + 1 :]
        return not (rest.startswith("tests" + os.sep) or rest.startswith("benchmarks" + os.sep)
                    or rest.startswith("notebooks" + os.sep))
    return filename.startswith("<frozen") or os.sep + "contextlib.py" in filename


def user_callstack() -> list[str]:
    """The innermost frames outside fluidjax, outermost first, as Paddle writes ``op_callstack``:
    two strings a frame, the ``File "...", line N, in f`` line and the source line.

    Walking frames with ``sys._getframe`` keeps op append cheap (no full ``traceback`` capture).
    """
    frame = sys._getframe(1)
    lines: list[str] = []
    frames = 0
    while frame is not None and frames < _MAX_FRAMES:
        code = frame.f_code
        if not _is_internal(code.co_filename):
            text = linecache.getline(code.co_filename, frame.f_lineno).strip()
            lines.append(f"    {text}")
            lines.append(f'  File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}')
            frames += 1
        frame = frame.f_back
    lines.reverse()
    return lines


def where(callstack: list[str] | None) -> str:
    """The user's innermost frame of a recorded callstack, as ``file:line`` (or ``unknown``)."""
    frames = [line.strip() for line in callstack or [] if line.lstrip().startswith("File ")]
    return frames[-1] if frames else "an unknown location"
