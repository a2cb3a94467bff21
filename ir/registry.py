"""The op registry: one :class:`OpDef` per Paddle op type — slots, attributes, shape rule, JAX rule.

An op is defined once, in the op-family module under ``lowering/ops/``, with the :func:`op`
decorator::

    @op("relu", inputs="X", outputs="Out", infer_shape=same_shape("X"))
    def relu(ctx):
        return {"Out": jax.nn.relu(ctx.input("X"))}

The decorated function is the op's JAX rule. Its shape rule is either given (``infer_shape``, a
pure-Python function of an :class:`~fluidjax.ir.shape.InferShapeContext`) or derived by abstract
evaluation of the JAX rule (see ``lowering/derived_shapes.py``). The gradient op ``<type>_grad``
is registered alongside, unless ``grad=None``.

Slots are written as names with an optional suffix: ``"X*"`` takes a list of variables
(Paddle's *duplicable*), ``"X?"`` may be left out (*dispensable*).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

from .errors import UnregisteredOpError

# Paddle's AttrType enum (wire facts).
ATTR_TYPES = {
    "int": 0,
    "float": 1,
    "string": 2,
    "ints": 3,
    "floats": 4,
    "strings": 5,
    "bool": 6,
    "bools": 7,
    "block": 8,
    "long": 9,
    "blocks": 10,
    "longs": 11,
    "float64s": 12,
    "var": 13,
    "vars": 14,
    "float64": 15,
    "scalar": 16,
    "scalars": 17,
}
ATTR_TYPE_NAMES = {v: k for k, v in ATTR_TYPES.items()}


@dataclasses.dataclass(frozen=True)
class Attr:
    """An attribute's Paddle type (``"int"``, ``"longs"``, …) and its default value."""

    kind: str
    default: Any = None

    def __post_init__(self) -> None:
        if self.kind not in ATTR_TYPES:
            raise ValueError(f"unknown attribute kind {self.kind!r}; expected one of {sorted(ATTR_TYPES)}")

    @property
    def type_id(self) -> int:
        """Paddle's ``AttrType`` number of this kind."""
        return ATTR_TYPES[self.kind]


def attr_kind_of(value: Any) -> str:
    """The Paddle attribute kind a Python value naturally has (used for undeclared attributes)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        if not value:
            return "ints"
        first = value[0]
        if isinstance(first, bool):
            return "bools"
        if isinstance(first, int):
            return "ints" if all(-(2**31) <= v < 2**31 for v in value) else "longs"
        if isinstance(first, float):
            return "floats"
        if isinstance(first, str):
            return "strings"
    raise TypeError(f"cannot store {value!r} ({type(value).__name__}) as an op attribute")


def _as_attr(value: Any) -> Attr:
    return value if isinstance(value, Attr) else Attr(attr_kind_of(value), value)


@dataclasses.dataclass(frozen=True)
class Slot:
    """An input or output slot: its Paddle name and whether it takes a list / may be absent."""

    name: str
    duplicable: bool = False
    dispensable: bool = False

    @classmethod
    def parse(cls, spec: str) -> "Slot":
        """A slot from its spec: ``X``, ``X*`` (duplicable) or ``X?`` (dispensable)."""
        name = spec.rstrip("*?")
        return cls(name, duplicable="*" in spec, dispensable="?" in spec)


def _slots(spec: str | Iterable[str]) -> tuple[Slot, ...]:
    if isinstance(spec, str):
        spec = spec.split()
    return tuple(Slot.parse(s) for s in spec)


@dataclasses.dataclass
class OpDef:
    """Everything fluidjax knows about one op type."""

    type: str
    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]
    attrs: dict[str, Attr]
    compute: Callable | None
    infer_shape: Callable | None = None
    # Input slots that never receive a gradient (indices, masks, ...). Non-float inputs never do.
    no_grad_inputs: frozenset[str] = frozenset()
    # Output slots whose gradient is not an input of the grad op (e.g. Paddle's XShape, Mask).
    no_grad_outputs: frozenset[str] = frozenset()
    # "auto": `<type>_grad` is the vjp of `compute`, registered here; "custom": the op's module
    # registers `<type>_grad` itself (slots named by the same convention); "maker": the gradient
    # is other forward ops, built by `grad_maker` (Paddle's way for scale, assign, cast, sum,
    # split, ...: Paddle has no `scale_grad`); None: no gradient.
    grad: str | None = "auto"
    # grad_maker(op, out_grads, in_grads) -> [(type, inputs, outputs, attrs)], where out_grads maps
    # each forward output slot to its gradient names and in_grads each forward input slot to the
    # names its gradients must be written to ("@EMPTY@" where none is wanted).
    grad_maker: Callable | None = None
    # Runs on the host, outside jax.jit (e.g. filling a string variable).
    host: bool = False
    # Draws random numbers: ctx.rng() gives it a key.
    random: bool = False
    # Acts outside the step each time it runs (prints, calls Python, reads a file): never evaluated
    # while tracing, even on constant inputs (that would act once, at compile time).
    effect: bool = False
    doc: str = ""
    # Set for `<type>_grad` ops made by the registry: the forward op type.
    forward_type: str | None = None
    # How the op takes a *counted* value (rows padded to a static capacity, carrying their real
    # count: where_index, masked_select, unique, NMS outputs; docs/ops_data_dependent.md): input
    # slot -> one of COUNT_ROLES, or a callable (op, values) -> that mapping, for roles that depend
    # on attributes or ranks. A slot it does not name refuses a counted value (DataDependentShapeError).
    counts: Any = None


# The roles of an input slot that takes a counted value (OpDef.counts):
#   "rows":  the output's rows follow this input's rows one to one (elementwise ops, activations,
#            ops along other axes): an output with its padded row count keeps its real count;
#   "count": the JAX rule takes the counted value itself (a LoDValue) and honours the count (shape,
#            concat along the rows, slice from the end, sort along the rows, ...);
#   "table": rows are read by index (gather's X, an embedding table): taken as it is, its count
#            not carried (padding rows are read only by an index past the count).
COUNT_ROLES = ("rows", "count", "table")


def declare_counts(types: str | Iterable[str], roles: Any) -> None:
    """Declare how ops ``types`` take a counted value: ``roles`` maps input slots to one of
    :data:`COUNT_ROLES` (``"*"`` for every slot), or is a callable ``(op, values) -> mapping``
    (see :attr:`OpDef.counts`). Their ``_grad`` ops, when registered, get the same roles."""
    if not callable(roles):
        bad = [r for r in roles.values() if r not in COUNT_ROLES]
        if bad:
            raise ValueError(f"unknown count roles {bad}; expected one of {COUNT_ROLES}")
        roles = dict(roles)
    for t in [types] if isinstance(types, str) else types:
        get(t).counts = roles
        if t + "_grad" in _REGISTRY:
            _REGISTRY[t + "_grad"].counts = roles


def count_roles(opdef: OpDef, op, values) -> dict:
    """The count roles (slot -> role) of ``op`` given its input ``values`` (see :func:`declare_counts`)."""
    roles = opdef.counts
    if roles is None:
        return {}
    roles = roles(op, values) if callable(roles) else roles
    if "*" in roles:
        return {s.name: roles["*"] for s in opdef.inputs} | {k: v for k, v in roles.items() if k != "*"}
    return roles


_REGISTRY: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    """Add ``opdef`` to the registry; a type may be registered only once."""
    if opdef.type in _REGISTRY:
        raise ValueError(f"op {opdef.type!r} is already registered")
    _REGISTRY[opdef.type] = opdef
    return opdef


def op(
    type: str,
    *,
    inputs: str | Iterable[str],
    outputs: str | Iterable[str],
    attrs: dict[str, Any] | None = None,
    infer_shape: Callable | None = None,
    no_grad_inputs: Iterable[str] = (),
    no_grad_outputs: Iterable[str] = (),
    grad: str | None = "auto",
    host: bool = False,
    random: bool = False,
    grad_maker: Callable | None = None,
    effect: bool = False,
) -> Callable[[Callable], Callable]:
    """Register the decorated JAX rule as op ``type`` (see the module docstring)."""

    def decorate(compute: Callable) -> Callable:
        opdef = OpDef(
            type=type,
            inputs=_slots(inputs),
            outputs=_slots(outputs),
            attrs={k: _as_attr(v) for k, v in (attrs or {}).items()},
            compute=compute,
            infer_shape=infer_shape,
            no_grad_inputs=frozenset(no_grad_inputs),
            no_grad_outputs=frozenset(no_grad_outputs),
            grad="maker" if grad_maker is not None else None if host or (random and grad == "auto") else grad,
            grad_maker=grad_maker,
            host=host,
            random=random,
            effect=effect,
            doc=(compute.__doc__ or "").strip(),
        )
        register(opdef)
        if opdef.grad == "auto":
            register(_auto_grad_def(opdef))
        return compute

    return decorate


def grad_var_name(name: str) -> str:
    """Paddle's name of the gradient of variable ``name``."""
    return name + "@GRAD"


def _auto_grad_def(fwd: OpDef) -> OpDef:
    """The ``<type>_grad`` op: forward inputs and outputs plus ``Out@GRAD`` in, ``X@GRAD`` out.

    Its JAX rule and shape rule are generic (installed by ``lowering``/``ir.shape``).
    """
    grad_outputs = tuple(
        Slot(s.name, s.duplicable, s.dispensable) for s in fwd.outputs if s.name not in fwd.no_grad_outputs
    )
    ins = (
        fwd.inputs
        + fwd.outputs
        + tuple(Slot(grad_var_name(s.name), s.duplicable, True) for s in grad_outputs)
    )
    outs = tuple(
        Slot(grad_var_name(s.name), s.duplicable, True) for s in fwd.inputs if s.name not in fwd.no_grad_inputs
    )
    return OpDef(
        type=fwd.type + "_grad",
        inputs=tuple(Slot(s.name, s.duplicable, True) for s in ins),
        outputs=outs,
        attrs=dict(fwd.attrs),
        compute=None,
        grad=None,
        forward_type=fwd.type,
    )


def get(type: str) -> OpDef:
    """The definition of op ``type``; :class:`UnregisteredOpError` (a ``KeyError``) for an unknown
    type."""
    try:
        return _REGISTRY[type]
    except (KeyError, TypeError):
        raise UnregisteredOpError(
            f"op type {type!r} is not registered in fluidjax ({len(_REGISTRY)} ops are; "
            "see fluidjax.ir.registry.registered_types())"
        ) from None


def has(type: str) -> bool:
    """Whether op ``type`` is registered."""
    return type in _REGISTRY


def registered_types(*, include_grad: bool = False) -> list[str]:
    """The registered op types, sorted; grad ops (``<type>_grad``, generated or hand-written) only
    when asked."""
    return sorted(t for t, d in _REGISTRY.items()
                  if include_grad or (d.forward_type is None and not t.endswith("_grad")))
