"""Errors raised by fluidjax, each naming the op and where the user's code created it.

Every error fluidjax raises on purpose is a :class:`FluidJaxError`. Each class also subclasses
the built-in exception that code written for Paddle (or plain Python) would catch, so
``except KeyError`` keeps working for a missing variable and ``except ValueError`` for a bad
feed.
"""

from __future__ import annotations


class FluidJaxError(Exception):
    """Base class of fluidjax's errors."""


class _PlainKeyError(KeyError):
    """A ``KeyError`` whose text prints as written (``KeyError`` quotes its argument)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ShapeError(FluidJaxError, ValueError):
    """An op's inputs have shapes or dtypes it cannot take; raised when the op is appended."""


class InputTypeError(ShapeError, TypeError):
    """An op's input of the wrong kind or dtype (a Python value where a Variable is needed, a float
    where a bool is needed); a :class:`ShapeError` that ``except TypeError`` also catches."""


class LoDError(FluidJaxError, ValueError):
    """A LoD (sequence lengths or offsets) that breaks Paddle's rules or does not fit the data;
    the message names the broken rule."""


class LoDTypeError(LoDError, TypeError):
    """A LoD given as something other than lists of integers (a float length, a string, a flat
    list); a :class:`LoDError` that ``except TypeError`` also catches."""


class FeedError(FluidJaxError, ValueError):
    """A feed (or fetch) does not match the program's variables; raised before anything runs."""


class EOFException(FluidJaxError, EOFError):
    """A non-iterable data loader (``fluid.io.DataLoader`` / ``PyReader`` after ``start()``) has
    no batch left: Fluid's ``fluid.core.EOFException``. Catch it, then call the loader's
    ``reset()``."""


class UninitializedVariableError(FluidJaxError, RuntimeError):
    """A persistable variable the program reads has no value in the scope."""


class OpRuntimeError(FluidJaxError, RuntimeError):
    """An op failed while its JAX rule ran; the message says which op and where it was built."""


class SymbolicValueError(FluidJaxError, TypeError):
    """A symbolic Variable was used as if it held a value."""


class ProgramFormatError(FluidJaxError, ValueError):
    """Program bytes or a program's structure are malformed; the message says what and where
    (block, op index, variable or field)."""


class VariableNotFoundError(FluidJaxError, _PlainKeyError):
    """A variable name that no block in scope declares."""


class UnregisteredOpError(FluidJaxError, _PlainKeyError):
    """An op type fluidjax does not implement."""


class NumericCheckError(FluidJaxError, FloatingPointError):
    """A run's numeric check failed (NaN/Inf under ``FLAGS_check_nan_inf``, or an index out of
    range); the scope is left as it was before the run. ``op_type``, ``variable`` and
    ``location`` say where."""

    def __init__(self, message: str, op_type: str | None = None, variable: str | None = None,
                 location: str | None = None) -> None:
        super().__init__(message)
        self.op_type = op_type
        self.variable = variable
        self.location = location


class IndexOutOfRangeError(NumericCheckError, IndexError):
    """An index-taking op (a label, an id, a gather index) got an index outside its range."""


class TensorFormatError(FluidJaxError, ValueError):
    """A saved tensor file (Paddle's tensor stream) is malformed, truncated or of another format;
    ``path`` and ``variable`` say which file and which variable (None where unknown)."""

    def __init__(self, message: str, path: str | None = None, variable: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.variable = variable


class UnsafeFormatError(TensorFormatError):
    """A file in a format whose loading could execute code (a Python pickle, as Paddle's
    ``.pdparams`` checkpoints are): fluidjax refuses it and never unpickles."""


class ParameterMismatchError(TensorFormatError):
    """A saved tensor's dtype or shape differs from the program's variable of that name."""


class OpVersionError(FluidJaxError, ValueError):
    """A program was saved with an op version whose semantics fluidjax does not implement."""


class NotOfferedError(FluidJaxError, NotImplementedError):
    """A part of Fluid's API that fluidjax deliberately does not offer (dygraph, the parameter
    server transpiler, CUDA-only paths): the message says what to use instead."""


class ReentrantRunError(FluidJaxError, RuntimeError):
    """``Executor.run`` was called on a scope whose run is in progress on the same thread (from a
    signal handler or a callback that interrupted that run): nothing ran, the scope is unchanged."""


class ResourceExhaustedError(FluidJaxError, MemoryError):
    """A run's step needs more memory than its device has free. Raised before the step runs when
    the need is known to exceed what is free, or when XLA runs out; the message gives both figures
    and says whether the scope is unchanged (see ``docs/reliability.md``)."""


class LoopBoundError(FluidJaxError, RuntimeError):
    """A ``while`` op ran more iterations than ``FLAGS_max_while_iterations`` allows; ``op_type``,
    ``bound`` and ``location`` say which loop and where it was built. The scope is unchanged."""

    def __init__(self, message: str, op_type: str = "while", bound: int = 0, location: str = "") -> None:
        super().__init__(message)
        self.op_type, self.bound, self.location = op_type, bound, location


class BoundExceededError(FluidJaxError, IndexError):
    """A value past a size a compiled step fixes (a tensor array's room, ``sequence_pad``'s
    ``padded_length``, a ``sequence_slice`` past its sequence): never dropped or cut silently.
    ``op_type``, ``bound`` and ``location`` say which op, which bound and where the user built it;
    the scope is as it was before the run (``docs/reliability.md``, "Bounds")."""

    def __init__(self, message: str, op_type: str | None = None, bound: int | None = None,
                 location: str | None = None) -> None:
        super().__init__(message)
        self.op_type, self.bound, self.location = op_type, bound, location


class DataDependentShapeError(OpRuntimeError):
    """An op given a value whose row count is data (``where_index``, ``masked_select``, ``unique``,
    NMS and proposal outputs, and what row-wise ops make of them: padded to a static capacity,
    carrying the real count) in a position where fluidjax does not honour that count: the op would
    read the capacity or mix the padding rows into its result, so it refuses rather than return
    them as data (``docs/ops_data_dependent.md`` lists what is honoured). ``op_type``,
    ``location``, ``producer_type`` and ``producer_location`` name the consuming and producing ops."""

    def __init__(self, message: str, op_type: str | None = None, location: str | None = None,
                 producer_type: str | None = None, producer_location: str | None = None) -> None:
        super().__init__(message)
        self.op_type, self.location = op_type, location
        self.producer_type, self.producer_location = producer_type, producer_location
