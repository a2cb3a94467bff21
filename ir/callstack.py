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


_UNSEEN = object()
_shown_names: dict[str, str | None] = {}


def _shown_name(filename: str) -> str | None:
    """How a frame's file shows in a callstack: the file itself; ``Cell In[5]`` for a notebook cell
    (IPython compiles cells to temporary files such as ``/tmp/ipykernel_12/3485.py``, which
    mean nothing to the reader); None for IPython's own frames. Only looked up once a file."""
    shown: str | None = filename
    ipython = sys.modules.get("IPython")     # never imported here: a script pays nothing
    if ipython is not None:
        if filename.startswith(os.path.dirname(os.path.abspath(ipython.__file__)) + os.sep):
            shown = None
        else:
            shell = ipython.get_ipython() if hasattr(ipython, "get_ipython") else None
            label = getattr(getattr(shell, "compile", None), "format_code_name", lambda _: None)(filename)
            if label:
                shown = f"{label[0]} {label[1]}"
            elif "ipykernel_" in filename or filename.startswith("<ipython-input-"):
                return shown   # a cell not registered yet: look again next time
    _shown_names[filename] = shown
    return shown


def install_notebook_tracebacks() -> bool:
    """In IPython (Jupyter), show fluidjax's errors with a short traceback: the user's frames
    (cells and their own modules) only, not the frames inside fluidjax or IPython. Does nothing
    outside IPython, or when the shell already has a custom exception handler. Returns whether
    it installed the handler."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    if shell is None or not hasattr(shell, "set_custom_exc") or getattr(shell, "custom_exceptions", ()):
        return False
    from .errors import FluidJaxError

    shell.set_custom_exc((FluidJaxError,), _short_traceback)
    return True


def _short_traceback(shell, etype, value, tb, tb_offset=None):
    """IPython's custom exception handler: the traceback without fluidjax's and IPython's frames."""
    import types

    ipython_dir = os.path.dirname(os.path.abspath(sys.modules["IPython"].__file__)) + os.sep
    kept = []
    t = tb
    while t is not None:
        filename = t.tb_frame.f_code.co_filename
        if not _is_internal(filename) and not filename.startswith(ipython_dir):
            kept.append(t)
        t = t.tb_next
    short = None
    for t in reversed(kept):
        short = types.TracebackType(short, t.tb_frame, t.tb_lasti, t.tb_lineno)
    stb = shell.InteractiveTB.structured_traceback(etype, value, short if kept else tb, tb_offset=0)
    shell._showtraceback(etype, value, stb)
    return stb


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
            shown = _shown_names.get(code.co_filename, _UNSEEN)
            if shown is _UNSEEN:
                shown = _shown_name(code.co_filename)
            if shown is None:
                break  # IPython's own machinery: the cell that ran the code was the last frame
            text = linecache.getline(code.co_filename, frame.f_lineno).strip()
            lines.append(f"    {text}")
            lines.append(f'  File "{shown}", line {frame.f_lineno}, in {code.co_name}')
            frames += 1
        frame = frame.f_back
    lines.reverse()
    return lines


def where(callstack: list[str] | None) -> str:
    """The user's innermost frame of a recorded callstack, as ``file:line`` (or ``unknown``)."""
    frames = [line.strip() for line in callstack or [] if line.lstrip().startswith("File ")]
    return frames[-1] if frames else "an unknown location"
