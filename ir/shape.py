"""Shape inference: each op's rule runs when it is appended; :func:`infer_shapes` resolves a program.

A shape rule is a function ``rule(ctx)`` of an :class:`InferShapeContext`: it reads
``ctx.input(slot)`` (a :class:`VarInfo` with ``shape``, ``dtype``, ``lod_level``), checks with
``ctx.check(cond, msg)`` and writes ``ctx.set_output(slot, shape, dtype)``. ``-1`` is UNK.
The same rule serves at build time (UNK batch) and in :func:`infer_shapes` (concrete feeds).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, NamedTuple

from . import callstack, dtypes, registry
from .errors import FluidJaxError, ShapeError, UnregisteredOpError, VariableNotFoundError
from .names import EMPTY_VAR_NAME


class VarInfo(NamedTuple):
    """What a shape rule knows about a variable."""

    name: str
    shape: tuple[int, ...]
    dtype: str | None
    lod_level: int = 0

    @property
    def ndim(self) -> int:
        """The rank."""
        return len(self.shape)


class InferShapeContext:
    """The view of one op that its shape rule sees; outputs are buffered until the rule succeeds."""

    def __init__(self, op, lookup: Callable[[str], VarInfo], where: str | None = None) -> None:
        self.op = op
        self.where = where  # "block 0, op 3" when the op's place is known (infer_shapes)
        try:
            self.opdef = registry.get(op.type)
        except KeyError:  # UnregisteredOpError is a KeyError too
            raise UnregisteredOpError(
                f"op {op.type!r}{f' ({where})' if where else ''}: this op type is not registered in "
                "fluidjax, so it has no shape rule and cannot run (see "
                "fluidjax.ir.registry.registered_types())") from None
        self._lookup = lookup
        self.results: dict[str, VarInfo] = {}

    # -- reading ---------------------------------------------------------------------------
    def input(self, slot: str) -> VarInfo | None:
        """The single variable in input ``slot`` (None when the slot is empty)."""
        names = self.op.inputs.get(slot, [])
        return self._info(names[0]) if names else None

    def inputs(self, slot: str) -> list[VarInfo | None]:
        """The variables in input ``slot``; None stands for an ``@EMPTY@`` entry."""
        return [None if n == EMPTY_VAR_NAME else self._info(n) for n in self.op.inputs.get(slot, [])]

    def output(self, slot: str) -> VarInfo | None:
        """The variable currently in output ``slot`` (as declared, before this rule)."""
        names = self.op.outputs.get(slot, [])
        return self._info(names[0]) if names else None

    def has_output(self, slot: str) -> bool:
        """Whether output ``slot`` names a variable."""
        return bool(self.op.outputs.get(slot))

    def attr(self, name: str) -> Any:
        """Attribute ``name`` of the op."""
        return self.op.attrs.get(name)

    def _info(self, name: str) -> VarInfo:
        info = self.results.get(name)
        if info is None:
            try:
                info = self._lookup(name)
            except KeyError:  # VariableNotFoundError is a KeyError too
                block = self.op.block
                raise VariableNotFoundError(
                    f"op {self.op.type!r}{f' ({self.where})' if self.where else ''}: variable {name!r} "
                    f"is not declared in block {getattr(block, 'idx', '?')} or its parents") from None
        return info

    # -- writing ---------------------------------------------------------------------------
    def set_output(self, slot: str, shape: Iterable[int], dtype=None, lod_level: int | None = None,
                   index: int = 0) -> None:
        """Give output ``slot`` (its ``index``-th variable) a shape, dtype and LoD level.

        ``dtype`` defaults to the first input's dtype, ``lod_level`` to the first input's level
        (Paddle's ShareLoD). An absent dispensable output is ignored.
        """
        names = self.op.outputs.get(slot, [])
        if index >= len(names) or names[index] == EMPTY_VAR_NAME:
            return
        first = self._first_input()
        if dtype is None:
            dtype = first.dtype if first else "float32"
        if lod_level is None:
            lod_level = first.lod_level if first else 0
        shape = tuple(int(d) if d is not None and int(d) >= 0 else -1 for d in shape)
        self.results[names[index]] = VarInfo(names[index], shape, dtypes.normalize(dtype), int(lod_level))

    def _first_input(self) -> VarInfo | None:
        for slot in self.opdef.inputs:
            names = self.op.inputs.get(slot.name)
            if names:
                return self._info(names[0])
        return None

    def check(self, cond: bool, message: str) -> None:
        """Raise a :class:`ShapeError` naming the op, its inputs and the user's line unless ``cond``."""
        if not cond:
            self.fail(message)

    def fail(self, message: str):
        """Raise a :class:`ShapeError` naming the op, its inputs' shapes and the user's line."""
        ins = []
        for slot, names in self.op.inputs.items():
            for n in names:
                if n == EMPTY_VAR_NAME:
                    continue
                try:
                    info = self._info(n)
                except FluidJaxError:
                    ins.append(f"{slot}={n!r} (not declared)")
                    continue
                ins.append(f"{slot}={n!r} shape={info.shape} dtype={info.dtype}")
        where = callstack.where(self.op.attrs.get("op_callstack"))
        place = f" ({self.where})" if self.where else ""
        raise ShapeError(f"op {self.op.type!r}{place}: {message}\n  inputs: {'; '.join(ins) or '(none)'}\n"
                         f"  created at: {where}")


def _block_lookup(block):
    def lookup(name: str) -> VarInfo:
        var = block.var(name)
        return VarInfo(var.name, var.shape, var.dtype, var.lod_level)

    return lookup


# The shape rule used when an op declares none: abstract evaluation of its JAX rule. It needs JAX,
# so `lowering` installs it (ir itself never imports JAX).
derived_rule: Callable[[InferShapeContext], None] | None = None


def rule_of(opdef) -> Callable[[InferShapeContext], None]:
    """The shape rule of an op definition: its own, the grad rule, or the derived one."""
    if opdef.forward_type is not None:
        return grad_rule
    if opdef.infer_shape is not None:
        return opdef.infer_shape
    if derived_rule is None:
        raise ShapeError(f"op {opdef.type!r} has no shape rule and fluidjax.lowering is not loaded")
    return derived_rule


def run_rule(op, lookup: Callable[[str], VarInfo], where: str | None = None) -> dict[str, VarInfo]:
    """Run op's shape rule against ``lookup``; return the output infos it produced.

    ``where`` (``"block 0, op 3"``) goes into error messages. Whatever goes wrong is a fluidjax
    error: :class:`UnregisteredOpError` for an unknown op type, :class:`VariableNotFoundError`
    for an argument no block declares, and :class:`ShapeError` for anything the rule trips over
    (a malformed op read from a file can hold any attribute value and any number of inputs).
    """
    ctx = InferShapeContext(op, lookup, where)
    try:
        rule_of(ctx.opdef)(ctx)
    except FluidJaxError:
        raise
    except Exception as exc:  # a rule tripping over its inputs is the user's shape error too
        ctx.fail(f"shape inference failed: {type(exc).__name__}: {_short_text(exc)}")
    return ctx.results


def _short_text(exc: BaseException, limit: int = 500) -> str:
    try:
        text = str(exc)
    except Exception:  # an exception whose __str__ fails still gets reported
        text = f"<{type(exc).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def infer_op(op) -> None:
    """Run op's shape rule at append time and write the results into the block's variables."""
    block = op.block
    results = run_rule(op, _block_lookup(block))
    for name, info in results.items():
        var = block.var(name)
        # One store, one version bump for the three fields (set_output normalized them).
        var._set_inferred(one_element_shape(info.shape, var.shape), info.dtype, info.lod_level)


def one_element_shape(inferred: tuple[int, ...], declared: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of a result: a 0-d result whose variable is declared ``[1]`` keeps ``[1]``.

    Fluid 1.x computed a mean, a full reduction or an accuracy as shape ``[1]``, Paddle 2.x as
    0-d; the program's declaration says which: the Fluid 1.x layers declare ``[1]`` (so do Fluid
    1.x's program bytes), Paddle 2.x's bytes ``[]``. The lowering follows it at run time.
    """
    return (1,) if inferred == () and declared == (1,) else inferred


def infer_shapes(program, feed_shapes: Mapping[str, Any], block_idx: int = 0) -> dict[str, tuple[int, ...]]:
    """Resolve every UNK of a block for concrete feed shapes, without changing the program.

    ``feed_shapes`` maps data-variable names to shapes (or to arrays, whose shapes are used).
    Returns ``{variable name: concrete shape}`` for every variable the block's ops touch. The
    first inconsistency (a feed that contradicts a known dimension, an op whose rule fails)
    raises :class:`ShapeError`.

    >>> # shapes = fj.infer_shapes(fj.default_main_program(), {"images": (64, 4096)})
    """
    block = program.block(block_idx)
    env: dict[str, VarInfo] = {}
    base = _block_lookup(block)
    for name, shape in feed_shapes.items():
        shape = tuple(getattr(shape, "shape", shape))
        var = block.find_var(name)
        if var is None:
            raise ShapeError(f"feed {name!r} is not a variable of the program")
        if len(shape) != len(var.shape) or any(d >= 0 and d != s for d, s in zip(var.shape, shape)):
            raise ShapeError(f"feed {name!r} has shape {shape}, but the variable is declared {var.shape}")
        env[name] = VarInfo(name, shape, var.dtype, var.lod_level)

    def lookup(name: str) -> VarInfo:
        return env.get(name) or base(name)

    for index, op in enumerate(block.ops):
        where = f"block {block.idx}, op {index}"
        results = run_rule(op, lookup, where)
        for name, info in results.items():
            try:
                declared = block.var(name).shape
            except KeyError:  # VariableNotFoundError is a KeyError too
                raise VariableNotFoundError(
                    f"op {op.type!r} ({where}): output {name!r} is not declared in block {block.idx} "
                    "or its parents") from None
            if len(declared) == len(info.shape) and any(
                    d >= 0 and s >= 0 and d != s for d, s in zip(declared, info.shape)):
                raise ShapeError(f"op {op.type!r} ({where}) at {op.location}: output {name!r} comes out as "
                                 f"{info.shape}, but the program declares {declared}")
            env[name] = info
    return {name: info.shape for name, info in env.items()}


# -- reusable rules ---------------------------------------------------------------------------
def same_as(slot: str = "X", out: str = "Out") -> Callable[[InferShapeContext], None]:
    """A rule: output ``out`` has the shape and dtype of input ``slot``."""

    def rule(ctx: InferShapeContext) -> None:
        x = ctx.input(slot)
        ctx.set_output(out, x.shape, x.dtype, x.lod_level)

    return rule


def grad_rule(ctx: InferShapeContext) -> None:
    """``<type>_grad``: each ``X@GRAD`` has the shape and dtype of its forward input ``X``."""
    for slot in ctx.opdef.outputs:
        fwd_slot = slot.name[: -len("@GRAD")]
        for i, info in enumerate(ctx.inputs(fwd_slot)):
            if info is not None:
                ctx.set_output(slot.name, info.shape, info.dtype, info.lod_level, index=i)
