"""Errors raised by fluidjax, each naming the op and where the user's code created it."""

from __future__ import annotations


class FluidJaxError(Exception):
    """Base class of fluidjax's errors."""


class ShapeError(FluidJaxError, ValueError):
    """An op's inputs have shapes or dtypes it cannot take; raised when the op is appended."""


class FeedError(FluidJaxError, ValueError):
    """A feed does not match the program's data variables; raised before anything is compiled."""


class UninitializedVariableError(FluidJaxError, RuntimeError):
    """A persistable variable the program reads has no value in the scope."""


class OpRuntimeError(FluidJaxError, RuntimeError):
    """An op failed while its JAX rule ran; the message says which op and where it was built."""


class SymbolicValueError(FluidJaxError, TypeError):
    """A symbolic Variable was used as if it held a value."""
