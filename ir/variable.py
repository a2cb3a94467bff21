"""Symbolic variables: a name, a shape with -1 for UNK, a dtype and a LoD level — never a value."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import dtypes
from .errors import SymbolicValueError

if TYPE_CHECKING:
    from .program import Block


def _no_value(var: "Variable", what: str):
    raise SymbolicValueError(
        f"{what} of Variable {var.name!r}: a Variable is symbolic and holds no value while the "
        "program is built. Run the program with an Executor and fetch it: "
        f"exe = fj.Executor(); exe.run(program, feed=..., fetch_list=[{var.name!r}])"
    )


class Variable:
    """A variable of a :class:`~fluidjax.ir.program.Block` (Paddle's ``VarDesc``).

    Made by ``block.create_var`` or by the layer functions; its shape and dtype are filled by the
    shape rule of the op that produces it. Arithmetic operators (``a + b``, ``a * 2``) append ops
    to the variable's block (installed by ``fluidjax.frontend``).
    """

    __array_priority__ = 100  # make NumPy defer to our operators (`np_array + var`)

    def __init__(
        self,
        block: "Block",
        name: str,
        shape=(),
        dtype="float32",
        lod_level: int = 0,
        *,
        persistable: bool = False,
        stop_gradient: bool = False,
        type: int = dtypes.LOD_TENSOR,
        need_check_feed: bool = False,
        is_data: bool = False,
    ) -> None:
        # ir/serialize.py (_var_from_proto) sets these same fields directly: keep the two in step.
        self.block = block
        self.name = name
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtypes.normalize(dtype) if dtype is not None else None
        self.lod_level = int(lod_level)
        self.persistable = bool(persistable)
        self.stop_gradient = bool(stop_gradient)
        self.type = type
        self.need_check_feed = bool(need_check_feed)
        self.is_data = bool(is_data)
        self.is_parameter = False
        # VarDesc.Attr entries, as (name, attr type id, value).
        self.desc_attrs: list[tuple[str, int, Any]] = []
        # Which optional VarDesc fields a parsed program had (for byte-exact round trips);
        # None for variables built here.
        self._present: frozenset[str] | None = None
        self._raw_type: bytes | None = None

    # -- the symbolic contract -------------------------------------------------------------
    def __array__(self, *args, **kwargs):
        _no_value(self, "np.asarray()")

    def __bool__(self):
        _no_value(self, "bool()")

    def __float__(self):
        _no_value(self, "float()")

    def __int__(self):
        _no_value(self, "int()")

    def __index__(self):
        _no_value(self, "using as an index")

    def __iter__(self):
        _no_value(self, "iterating")

    def __len__(self):
        _no_value(self, "len()")

    def numpy(self):
        """Always raises: a symbolic Variable has no value (fetch it with an Executor)."""
        _no_value(self, ".numpy()")

    __hash__ = object.__hash__

    # -- descriptions --------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        """The rank (-1 dims count)."""
        return len(self.shape)

    def __repr__(self) -> str:
        kind = type(self).__name__
        extra = f", lod_level={self.lod_level}" if self.lod_level else ""
        extra += ", persistable" if self.persistable else ""
        return f"{kind}({self.name!r}, shape={self.shape}, dtype={self.dtype}{extra})"

    def describe(self) -> str:
        """One line as ``str(program)`` shows it."""
        flags = []
        if self.is_parameter:
            flags.append("param")
        elif self.persistable:
            flags.append("persist")
        if self.is_data:
            flags.append("data")
        kind = {dtypes.LOD_TENSOR: "", dtypes.STRING: " string"}.get(self.type, f" type{self.type}")
        lod = f" lod_level={self.lod_level}" if self.lod_level else ""
        prefix = " ".join(flags) + " " if flags else ""
        return f"{prefix}var {self.name}{kind} : shape={self.shape} dtype={self.dtype}{lod}"


class Parameter(Variable):
    """A persistable, trainable variable created in a program's global block.

    ``trainable``, ``regularizer``, ``optimize_attr`` (per-parameter learning-rate scale) and
    ``need_clip`` are read by optimizers; they live in Python only, as in Paddle.
    """

    def __init__(self, block: "Block", name: str, shape, dtype="float32", *, trainable: bool = True,
                 regularizer=None, learning_rate: float = 1.0, need_clip: bool = True, **kwargs) -> None:
        kwargs.setdefault("persistable", True)
        super().__init__(block, name, shape, dtype, **kwargs)
        self.is_parameter = True
        self.trainable = trainable
        self.stop_gradient = not trainable
        self.regularizer = regularizer
        self.optimize_attr = {"learning_rate": learning_rate}
        self.need_clip = need_clip
