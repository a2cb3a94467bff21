"""Symbolic variables: a name, a shape with -1 for UNK, a dtype and a LoD level — never a value."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import dtypes
from .errors import ShapeError, SymbolicValueError
from . import tracking
from .tracking import TrackedField

if TYPE_CHECKING:
    from .program import Block


def _no_value(var: "Variable", what: str):
    raise SymbolicValueError(
        f"{what} of Variable {var.name!r}: a Variable is symbolic and holds no value while the "
        "program is built. Run the program with an Executor and fetch it: "
        f"exe = fj.Executor(); exe.run(program, feed=..., fetch_list=[{var.name!r}])"
    )


def _checked_shape(var: "Variable", shape) -> tuple[int, ...]:
    """``shape`` as a tuple of ints; a negative dim other than -1 (UNK) is a :class:`ShapeError`."""
    if type(shape) is not tuple:
        shape = tuple(int(d) for d in shape)
    if shape and min(shape) < -1:
        raise ShapeError(f"variable {var.name!r}: dim {min(shape)} in shape {shape} is not allowed; a dim "
                         "is a size >= 0, or -1 for unknown")
    return shape


# Ops whose result is a truth value: bool() of such a Variable is refused (see Variable.__bool__).
_PREDICATE_OPS = frozenset({
    "less_than", "less_equal", "greater_than", "greater_equal", "equal", "not_equal", "equal_all",
    "logical_and", "logical_or", "logical_not", "logical_xor", "isfinite", "isfinite_v2", "isinf_v2",
    "isnan_v2", "is_empty", "allclose", "isclose", "reduce_all", "reduce_any"})


def _producer_type(var: "Variable") -> str | None:
    """The type of the last op of ``var``'s block that writes ``var`` (None if none does)."""
    block = var.__dict__.get("block")
    for op in reversed(getattr(block, "ops", ()) or ()):
        for names in op.outputs.values():
            if var.name in names:
                return op.type
    return None


class Variable:
    """A variable of a :class:`~fluidjax.ir.program.Block` (Paddle's ``VarDesc``).

    Made by ``block.create_var`` or by the layer functions; its shape and dtype are filled by the
    shape rule of the op that produces it. Arithmetic operators (``a + b``, ``a * 2``) append ops
    to the variable's block (installed by ``fluidjax.frontend``).
    """

    __array_priority__ = 100  # make NumPy defer to our operators (`np_array + var`)
    # NumPy's ufunc machinery must not try to convert a Variable (its __array__ raises): with
    # this, `np_array + var` hands over to Variable.__radd__ (see frontend/math_sugar.py).
    __array_ufunc__ = None

    # Fields that change what a run does. Set-only descriptors (reads stay plain attribute reads):
    # assigning one on a variable that is in its block bumps the program's version, so an
    # Executor recompiles instead of running a stale step; see fluidjax.ir.tracking.
    shape = TrackedField("shape")
    dtype = TrackedField("dtype")
    lod_level = TrackedField()
    persistable = TrackedField()
    type = TrackedField()

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
        # Written to __dict__ directly: the variable is not in a block yet (nothing to bump).
        d = self.__dict__
        d["block"] = block
        d["name"] = name
        d["shape"] = _checked_shape(self, shape)
        d["dtype"] = dtypes.normalize(dtype) if dtype is not None else None
        d["lod_level"] = int(lod_level)
        d["persistable"] = bool(persistable)
        d["stop_gradient"] = bool(stop_gradient)
        d["type"] = type
        d["need_check_feed"] = bool(need_check_feed)
        d["is_data"] = bool(is_data)
        d["is_parameter"] = False
        # VarDesc.Attr entries, as (name, attr type id, value).
        d["desc_attrs"] = []
        # Which optional VarDesc fields a parsed program had (for byte-exact round trips);
        # None for variables built here.
        d["_present"] = None
        d["_raw_type"] = None

    def _set_inferred(self, shape: tuple[int, ...], dtype, lod_level: int) -> None:
        """Store what a shape rule inferred (all three fields, one version bump): the same as
        assigning ``shape``, ``dtype`` and ``lod_level`` one by one, at a third of the cost.
        ``shape`` must already be a tuple and ``dtype`` a normalized name (a rule's output)."""
        d = self.__dict__
        block = d["block"]
        if block is None or block.vars.get(d["name"]) is not self:
            d["shape"], d["dtype"], d["lod_level"] = shape, dtype, lod_level
            return
        if shape and min(shape) < -1:
            _checked_shape(self, shape)  # raises
        tracking.record_fields(self, ("shape", "dtype", "lod_level"))
        d["shape"], d["dtype"], d["lod_level"] = shape, dtype, lod_level
        block.program._bump()

    # -- the symbolic contract -------------------------------------------------------------
    def __array__(self, *args, **kwargs):
        _no_value(self, "np.asarray()")

    def __bool__(self):
        """True, as in Fluid: ``if attn_bias:`` / ``if init_hidden and init_cell:`` ask whether a
        Variable was given. A Variable a comparison or logical op produced (``if x > 0:``) is a
        :class:`SymbolicValueError`: branching on its value while the program is built is surely a
        mistake."""
        producer = _producer_type(self)
        if producer is None or producer not in _PREDICATE_OPS:
            return True
        raise SymbolicValueError(
            f"bool() of Variable {self.name!r}, the result of {producer!r} (a Python `if`, `while`, `and`/`or`/"
            "`not` on it): a Variable is "
            "symbolic and holds no value while the program is built, so Python cannot branch on it. Branch "
            "inside the program with fluid.layers.cond(pred, true_fn, false_fn) (or layers.Switch / "
            "layers.IfElse), loop with layers.While; or run the program with an Executor and branch on the "
            "fetched value")

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

    def _set_error_clip(self, error_clip) -> None:
        """Fluid 1.x: clip this variable's gradient as the backward pass computes it
        (``fluid.clip.ErrorClipByValue``; read by the optimizer's ``backward``). Python-only."""
        self.__dict__["error_clip"] = error_clip


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


def names_of(items, what: str) -> list[str]:
    """Names of ``items`` (a Variable, a name, or a list of them); ``what`` names the argument in errors."""
    if isinstance(items, (Variable, str)):
        items = [items]
    names = []
    for item in items:
        if isinstance(item, Variable):
            names.append(item.name)
        elif isinstance(item, str):
            names.append(item)
        else:
            raise TypeError(f"{what} must be Variables or variable names, got {item!r}")
    return names
