"""Programs as data: :class:`Program` holds :class:`Block` s of :class:`Variable` s and :class:`Operator` s.

This is Paddle's ``ProgramDesc`` / ``BlockDesc`` / ``OpDesc``; ``serialize()`` writes it in
Paddle's wire format. Appending an op checks it against the op registry and runs its shape rule
at once (the seeds' ``InferShape`` in the constructor), so a shape error surfaces at the line
of user code that caused it.
"""

from __future__ import annotations

import contextlib
import copy
import html
import itertools
import operator
from typing import Any, Iterable, Iterator, Mapping, Sequence

from . import callstack, dtypes, registry, tracking, unique_name
from .errors import ProgramFormatError, ShapeError, VariableNotFoundError
from .tracking import AttrDict, SlotDict, TrackedDict, TrackedList, WrapOnSet

_dict_setitem = dict.__setitem__
_dict_update = dict.update


_OP_CONTAINERS = {"inputs": SlotDict, "outputs": SlotDict, "attrs": AttrDict}
_UNTRACKED_LIST_ATTRS = frozenset({"op_callstack", "op_role_var"})


def _tracked_list(owner, items) -> TrackedList:
    lst = TrackedList(items)
    lst._owner = owner
    return lst
from .names import (EMPTY_VAR_NAME, OP_ROLE_BACKWARD, OP_ROLE_FORWARD, OP_ROLE_LOSS,  # noqa: F401  (re-exported)
                    OP_ROLE_LRSCHED, OP_ROLE_OPTIMIZE)
from . import summary as _summary
from .summary import print_summary
from .variable import Parameter, Variable, names_of

# Two things a Program does are implemented by modules that build on this one, so they attach
# themselves here instead of being imported (an import would run in a circle):
# - "codec": fluidjax.ir.serialize (ProgramDesc bytes and protos; it constructs Programs), attached
#   when it is imported, which ``fluidjax.ir`` always does;
# - "graph_html": the drawing of the graph in a notebook's view of a program, attached by
#   ``fluidjax.frontend.drawing`` (the IR knows nothing of drawing; without it the view is tables).
_attached: dict[str, Any] = {}


def attach(role: str, implementation: Any) -> None:
    """Attach the implementation of ``role`` ("codec" or "graph_html"); see the comment above."""
    if role not in ("codec", "graph_html"):
        raise ValueError(f"unknown Program role {role!r}")
    _attached[role] = implementation


def _codec():
    return _attached["codec"]


_ArgList = Variable | str | Sequence[Variable | str] | None


def _names(arg: _ArgList, program: "Program | None" = None, where: tuple = ()) -> list[str]:
    """The variable names of an op argument; with ``program``, a Variable of another program is
    a :class:`VariableNotFoundError` (``where`` = (op type, "input"/"output", slot), for the text)."""
    if arg is None:
        return []
    items = [arg] if isinstance(arg, (Variable, str)) else arg
    if program is not None:
        for a in items:
            if isinstance(a, Variable) and a.block is not None and a.block.program is not program:
                _foreign_variable(a, program, where)
    return names_of(items, "an op argument")


def _foreign_variable(var: Variable, program: "Program", where: tuple) -> None:
    """A Variable of another program given to an op of ``program``. A persistable one (a
    parameter, a global variable) lives in the scope by its name, so Fluid allowed it (a
    reinforcement-learning target network: ``assign`` from one program's parameter into
    another's): it is declared in ``program``'s global block, persistable, and used by name. Any
    other is an error: its value exists only while its own program runs — except a data variable
    read as an input, which is fed by name: it is declared in ``program``'s global block as the
    same data variable (Fluid scripts build a test program that reads the train program's
    ``x``)."""
    op_type, kind, slot = where or ("?", "argument", "?")
    if getattr(var, "is_data", False) and kind == "input" and not var.persistable:
        block = program.global_block()
        mine = block.vars.get(var.name)
        if mine is None:
            block.create_var(var.name, var.shape, var.dtype, var.lod_level, stop_gradient=var.stop_gradient,
                             need_check_feed=var.need_check_feed, is_data=True)
            return
        if tuple(mine.shape) == tuple(var.shape) and mine.dtype == var.dtype and mine.lod_level == var.lod_level:
            return
        raise VariableNotFoundError(
            f"op {op_type!r} input {slot!r}: data variable {var.name!r} of {var.block.program._label()} "
            f"(shape {list(var.shape)}, {var.dtype}) is used in {program._label()}, which declares that name "
            f"differently (shape {list(mine.shape)}, {mine.dtype}, lod_level {mine.lod_level})")
    if var.persistable:
        block = program.global_block()
        mine = block.vars.get(var.name)
        if mine is None:
            block.create_var(var.name, var.shape, var.dtype, var.lod_level, persistable=True)
            return
        if tuple(mine.shape) == tuple(var.shape) and mine.dtype == var.dtype and mine.persistable:
            return
        raise VariableNotFoundError(
            f"op {op_type!r} {kind} {slot!r}: persistable variable {var.name!r} of {var.block.program._label()} "
            f"(shape {list(var.shape)}, {var.dtype}) is used in {program._label()}, which declares that name "
            f"differently (shape {list(mine.shape)}, {mine.dtype}, persistable={mine.persistable})")
    if kind == "input":
        # A clone (``default_main_program().clone()``) computes its own copy of the variable: Fluid's
        # ops hold names, so the AttGAN/STGAN trainers use a Variable built in the main program
        # inside the clone they train. Resolved by name where ``program`` declares it alike and
        # one of its ops writes it (its value exists when ``program`` runs).
        mine = program.global_block().vars.get(var.name)
        if (mine is not None and tuple(mine.shape) == tuple(var.shape) and mine.dtype == var.dtype
                and mine.lod_level == var.lod_level
                and any(var.name in op.output_arg_names for op in program.global_block().ops)):
            return
    raise VariableNotFoundError(
        f"op {op_type!r} {kind} {slot!r}: variable {var.name!r} belongs to {var.block.program._label()}, "
        f"but the op is being added to {program._label()}. A Variable that is not persistable can only be "
        "used in the program that made it: build both under the same program_guard (or pass its name if "
        "this program has a variable of that name).")


class Operator:
    """One op of a block (Paddle's ``OpDesc``): type, slot → variable names, attributes.

    ``inputs``, ``outputs`` and ``attrs`` are tracked dicts (see :mod:`fluidjax.ir.tracking`):
    any edit — ``op.attrs["axis"] = 1``, ``op.attrs["shape"][0] = 2``, ``op.inputs["X"][0] = "y"``,
    assigning a whole new dict, or ``op.type = ...`` — bumps the program's version, so an
    Executor never runs a step compiled for the op as it was. ``attr_types`` (and the lists of
    ``op_callstack`` / ``op_role_var``) stay plain: they only affect how the op serializes, never
    what a run computes.

    The plain dicts and lists given to the constructor (as the parser gives them) are converted
    on first access, not in the constructor: parsing a 5,000-op program then costs nothing extra,
    and whatever reads an op (shape inference, the Executor's planning, serialization) converts
    it once. Reads after that are plain attribute reads.
    """

    def __init__(self, block: "Block", type: str, inputs: dict[str, list[str]],
                 outputs: dict[str, list[str]], attrs: dict[str, Any], attr_types: dict[str, int],
                 is_target: bool | None = None) -> None:
        d = self.__dict__
        d["block"] = block
        d["type"] = type
        d["_given"] = (inputs, outputs, attrs)  # converted by _materialize on first access
        d["attr_types"] = attr_types
        d["is_target"] = is_target

    def _materialize(self) -> None:
        """Convert the constructor's containers into tracked ones owned by this op."""
        d = self.__dict__
        given = d.pop("_given", None)
        if given is None:
            return
        inputs, outputs, attrs = given
        ins, outs, values = SlotDict(), SlotDict(), AttrDict()
        ins._owner = outs._owner = values._owner = self
        # map/zip keep the per-slot work in C (no Python call a slot): every op goes through here.
        in_lists, out_lists = list(map(TrackedList, inputs.values())), list(map(TrackedList, outputs.values()))
        for lst in in_lists:
            lst._owner = self
        for lst in out_lists:
            lst._owner = self
        _dict_update(ins, zip(inputs, in_lists))
        _dict_update(outs, zip(outputs, out_lists))
        _dict_update(values, attrs)
        for name, value in attrs.items():
            # op_callstack / op_role_var never change what a run does: left as plain lists.
            if value.__class__ is list and name not in _UNTRACKED_LIST_ATTRS:
                _dict_setitem(values, name, _tracked_list(self, value))
        d["inputs"], d["outputs"], d["attrs"] = ins, outs, values

    def __getattr__(self, name: str) -> Any:
        # Only reached when `name` is not in the instance dict: an op not converted yet.
        if name in _OP_CONTAINERS and "_given" in self.__dict__:
            self._materialize()
            return self.__dict__[name]
        raise AttributeError(f"'Operator' object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        container = _OP_CONTAINERS.get(name)
        if container is not None:
            self._materialize()
            value = container.of(self, value)
        elif name != "type":
            object.__setattr__(self, name, value)
            return
        tracking.record_field(self, name)
        self.__dict__[name] = value
        self._bump()

    def _bump(self) -> None:
        block = self.block
        if block is not None:
            block.program._bump()

    def input(self, slot: str) -> list[str]:
        """The variable names in input ``slot`` (empty when absent)."""
        return self.inputs.get(slot, [])

    def output(self, slot: str) -> list[str]:
        """The variable names in output ``slot`` (empty when absent)."""
        return self.outputs.get(slot, [])

    @property
    def input_arg_names(self) -> list[str]:
        """Every input variable name, slot by slot (``@EMPTY@`` left out)."""
        return [n for names in self.inputs.values() for n in names if n != EMPTY_VAR_NAME]

    @property
    def output_arg_names(self) -> list[str]:
        """Every output variable name, slot by slot (``@EMPTY@`` left out)."""
        return [n for names in self.outputs.values() for n in names if n != EMPTY_VAR_NAME]

    def attr(self, name: str, default: Any = None) -> Any:
        """Attribute ``name``, or ``default`` when the op has none."""
        return self.attrs.get(name, default)

    def has_attr(self, name: str) -> bool:
        """Whether the op carries attribute ``name``."""
        return name in self.attrs

    def set_attr(self, name: str, value: Any, kind: str | None = None) -> None:
        """Set an attribute; its Paddle type comes from the op's schema, else from the value."""
        spec = registry.get(self.type).attrs.get(name) if registry.has(self.type) else None
        type_id = registry.ATTR_TYPES[kind] if kind else (
            spec.type_id if spec else self.attr_types.get(name, registry.ATTR_TYPES[registry.attr_kind_of(value)]))
        self.attrs[name] = value        # bumps the program's version
        self.attr_types[name] = type_id

    @property
    def callstack(self) -> list[str]:
        """Paddle's ``op_callstack``: where the user's code created the op."""
        return self.attrs.get("op_callstack") or []

    @property
    def location(self) -> str:
        """The user's file and line that created this op."""
        return callstack.where(self.callstack)

    def __repr__(self) -> str:
        return f"Operator({self.type!r}, inputs={self.inputs}, outputs={self.outputs})"

    def describe(self) -> str:
        """One line as ``str(program)`` shows it."""
        outs = ", ".join(f"{k}={v}" for k, v in self.outputs.items() if v)
        ins = ", ".join(f"{k}={v}" for k, v in self.inputs.items() if v)
        shown = {k: v for k, v in self.attrs.items() if k not in _HIDDEN_ATTRS}
        attrs = ", ".join(f"{k}={_short(v)}" for k, v in shown.items())
        return f"{{{outs}}} = {self.type}({ins}{'; ' if attrs else ''}{attrs})"


_FRAMEWORK_ATTRS = {"op_device": ("string", ""), "op_namescope": ("string", "/"), "op_role_var": ("strings", [])}

_HIDDEN_ATTRS = frozenset({"op_callstack", "op_role", "op_role_var", "op_namescope", "op_device",
                           "with_quant_attr", "use_mkldnn", "use_cudnn"})


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Block:
    """A list of ops and the variables they use (Paddle's ``BlockDesc``).

    ``ops`` and ``vars`` are a tracked list and dict (see :mod:`fluidjax.ir.tracking`): every
    edit, through the methods below or directly (``del block.ops[3]``, ``block.vars.pop(n)``,
    ``block.ops = [...]``), bumps the program's version.
    """

    # The containers report to the program directly (one call less per bump than via the block).
    ops = WrapOnSet(lambda block, ops: TrackedList.of(block.program, ops))
    vars = WrapOnSet(lambda block, vars: TrackedDict.of(block.program, vars))
    parent_idx = WrapOnSet()
    forward_block_idx = WrapOnSet()

    def __init__(self, program: "Program", idx: int, parent_idx: int = -1) -> None:
        d = self.__dict__
        d["program"] = program
        d["idx"] = idx
        d["parent_idx"] = parent_idx
        d["forward_block_idx"] = -1
        d["vars"] = TrackedDict.of(program)
        d["ops"] = TrackedList.of(program)
        d["_present"] = None

    def _bump(self) -> None:
        self.program._bump()

    # -- variables ---------------------------------------------------------------------------
    @property
    def parent(self) -> "Block | None":
        """The enclosing block, or None for the global block (``parent_idx == -1``).

        A ``parent_idx`` that names no block of the program is a :class:`ProgramFormatError`.
        """
        idx = self.parent_idx
        if idx == -1:
            return None
        blocks = self.program.blocks
        if not _is_index_in(idx, 0, len(blocks)):
            raise ProgramFormatError(
                f"block {self.idx} has parent_idx {idx!r}, but the program has {len(blocks)} block(s) "
                f"(a parent is 0..{len(blocks) - 1}, or -1 for none)")
        return blocks[idx]

    def create_var(self, name: str | None = None, shape: Iterable[int] = (), dtype="float32",
                   lod_level: int = 0, **kwargs) -> Variable:
        """Add a variable (a fresh ``tmp`` name when ``name`` is None); an existing name is returned."""
        if name is None:
            name = unique_name.generate("_generated_var")
        if name in self.vars:
            return self.vars[name]
        var = Variable(self, name, shape, dtype, lod_level, **kwargs)
        self.vars[name] = var  # bumps the program's version
        return var

    def create_parameter(self, name: str, shape: Iterable[int], dtype="float32", **kwargs) -> Parameter:
        """Add a :class:`Parameter`; a name that exists with another shape or dtype is an error."""
        shape = tuple(int(d) for d in shape)
        if name in self.vars:
            old = self.vars[name]
            if old.shape != shape or old.dtype != dtypes.normalize(dtype):
                raise ValueError(
                    f"parameter {name!r} already exists with shape {old.shape} and dtype {old.dtype}; "
                    f"cannot create it again with shape {shape} and dtype {dtypes.normalize(dtype)}")
            return old
        if any(d < 0 for d in shape):
            raise ShapeError(f"parameter {name!r} needs a fully known shape, got {shape}")
        param = Parameter(self, name, shape, dtype, **kwargs)
        self.vars[name] = param  # bumps the program's version
        return param

    def has_var(self, name: str) -> bool:
        """Whether this block itself (not a parent) has variable ``name``."""
        return name in self.vars

    def var(self, name: str) -> Variable:
        """The variable ``name`` of this block or of an enclosing one.

        Raises :class:`VariableNotFoundError` (a ``KeyError``) for an unknown name, and
        :class:`ProgramFormatError` when the parent chain is broken (a ``parent_idx`` out of
        range, or parents that loop back) instead of failing obscurely or walking forever.
        """
        var = self.vars.get(name)
        if var is not None:
            return var
        block = self
        # A parent chain visits each block at most once: more steps than blocks means a cycle.
        for _ in range(len(self.program.blocks)):
            block = block.parent
            if block is None:
                raise VariableNotFoundError(f"variable {name!r} is not in block {self.idx} or its parents")
            var = block.vars.get(name)
            if var is not None:
                return var
        raise ProgramFormatError(f"the parents of block {self.idx} form a cycle: {self._parent_chain()}")

    def _parent_chain(self) -> str:
        """``3 -> 1 -> 3``: the parent chain up to the first repeat (for error messages)."""
        seen, chain, idx = set(), [self.idx], self.parent_idx
        blocks = self.program.blocks
        while idx != -1 and idx not in seen and _is_index_in(idx, 0, len(blocks)):
            seen.add(idx)
            chain.append(idx)
            idx = blocks[idx].parent_idx
        chain.append(idx)
        return " -> ".join(str(i) for i in chain)

    def find_var(self, name: str) -> Variable | None:
        """Like :meth:`var`, but None instead of an error for an unknown name (a broken parent
        chain is still an error)."""
        try:
            return self.var(name)
        except VariableNotFoundError:
            return None

    def all_parameters(self) -> list[Parameter]:
        """The block's parameters, in creation order."""
        return [v for v in self.vars.values() if isinstance(v, Parameter)]

    # -- ops ---------------------------------------------------------------------------------------
    def append_op(self, type: str, inputs: Mapping[str, _ArgList] | None = None,
                  outputs: Mapping[str, _ArgList] | None = None, attrs: Mapping[str, Any] | None = None,
                  *, infer_shape: bool = True) -> Operator:
        """Check an op against the registry, run its shape rule, and append it.

        On any error nothing changes: the op is not added and no output variable is touched.
        """
        op = self._make_op(type, inputs, outputs, attrs)
        if infer_shape:
            from .shape import infer_op

            infer_op(op)
        self.ops.append(op)  # bumps the program's version
        return op

    def insert_op(self, index: int, type: str, inputs=None, outputs=None, attrs=None,
                  *, infer_shape: bool = True) -> Operator:
        """Like :meth:`append_op`, at position ``index``."""
        op = self._make_op(type, inputs, outputs, attrs)
        if infer_shape:
            from .shape import infer_op

            infer_op(op)
        self.ops.insert(index, op)  # bumps the program's version
        return op

    def remove_op(self, index: int) -> Operator:
        """Remove and return the op at ``index``."""
        return self.ops.pop(index)  # bumps the program's version

    def _make_op(self, type, inputs, outputs, attrs) -> Operator:
        opdef = registry.get(type)
        ins = self._check_slots(opdef, "input", opdef.inputs, inputs or {})
        outs = self._check_slots(opdef, "output", opdef.outputs, outputs or {})
        values: dict[str, Any] = {}
        types: dict[str, int] = {}
        for name, spec in opdef.attrs.items():
            if spec.default is not None:
                values[name] = spec.default
                types[name] = spec.type_id
        for name, value in (attrs or {}).items():
            if value is None:
                continue
            spec = opdef.attrs.get(name)
            values[name] = list(value) if isinstance(value, tuple) else value
            types[name] = spec.type_id if spec else registry.ATTR_TYPES[registry.attr_kind_of(value)]
        if "op_role" not in values:
            values["op_role"] = self.program._op_role
            types["op_role"] = registry.ATTR_TYPES["int"]
        # Paddle's framework attributes, which its Python passes (append_backward) expect.
        for name, (kind, value) in _FRAMEWORK_ATTRS.items():
            if name not in values:
                values[name] = list(value) if isinstance(value, list) else value
                types[name] = registry.ATTR_TYPES[kind]
        values["op_callstack"] = callstack.user_callstack()
        types["op_callstack"] = registry.ATTR_TYPES["strings"]
        order = sorted(values)
        op = Operator(self, type, ins, outs, {k: values[k] for k in order}, {k: types[k] for k in order})
        op._materialize()  # shape inference reads it next: convert now, not through __getattr__
        return op

    def _check_slots(self, opdef, kind, slots, given) -> dict[str, list[str]]:
        known = {s.name for s in slots}
        unknown = set(given) - known
        if unknown:
            raise ValueError(f"op {opdef.type!r} has no {kind} slot {sorted(unknown)}; "
                             f"its {kind}s are {[s.name for s in slots]}")
        result: dict[str, list[str]] = {}
        for slot in slots:
            names = _names(given.get(slot.name), self.program, (opdef.type, kind, slot.name))
            if not names and not slot.dispensable:
                raise ValueError(f"op {opdef.type!r} needs {kind} {slot.name!r}")
            if len(names) > 1 and not slot.duplicable:
                raise ValueError(f"op {opdef.type!r} {kind} {slot.name!r} takes one variable, got {names}")
            for n in names:
                if n != EMPTY_VAR_NAME and self.find_var(n) is None:
                    raise VariableNotFoundError(f"op {opdef.type!r} {kind} {slot.name!r}: variable {n!r} is not in "
                                   f"block {self.idx}; create it first (block.create_var)")
            if names or slot.name in given:
                result[slot.name] = names
        return result

    def __repr__(self) -> str:
        return f"Block(idx={self.idx}, {len(self.vars)} vars, {len(self.ops)} ops)"


def _is_index_in(value: Any, low: int, high: int) -> bool:
    """Whether ``value`` is an integer (``operator.index``) with ``low <= value < high``."""
    try:
        return low <= operator.index(value) < high
    except TypeError:
        return False


_program_ids = itertools.count()


class Program:
    """A program: blocks of variables and ops, built by the layer API, run by an ``Executor``.

    >>> prog = Program()
    >>> prog.global_block().create_var("x", shape=(-1, 4)).shape
    (-1, 4)
    """

    # `blocks` is a tracked list (see fluidjax.ir.tracking); `_current_block_idx` is journaled
    # (a failed layer call restores it) but does not bump: it does not change what a run does.
    blocks = WrapOnSet(TrackedList.of)
    _current_block_idx = WrapOnSet(bump=False)

    def __init__(self) -> None:
        d = self.__dict__
        d["blocks"] = TrackedList.of(self, [Block(self, 0)])
        d["_current_block_idx"] = 0
        self.random_seed: int = 0
        # A version is a process-wide stamp, never reused (tracking.next_stamp): a rolled-back
        # failed layer call may restore an older one safely.
        self._version = tracking.next_stamp()
        self._uid = next(_program_ids)
        self._op_role = OP_ROLE_FORWARD
        self.desc_version: int | None = None          # ProgramDesc.version.version, if set
        self.op_version_map: list[tuple[str, int]] | None = None
        # Called with the scope before each run, after feeds are checked (e.g. a learning-rate
        # scheduler writing its current value); Python-only, not serialized.
        self.run_hooks: list = []

    _bump = tracking.bump_program

    @contextlib.contextmanager
    def _lr_schedule_guard(self, is_with_opt: bool = False) -> Iterator[None]:
        """Ops appended inside get ``op_role`` LRSched (Optimize|LRSched with ``is_with_opt``), as
        Fluid's optimizers and learning-rate schedules mark theirs."""
        previous = self._op_role
        self._op_role = OP_ROLE_LRSCHED | (OP_ROLE_OPTIMIZE if is_with_opt else 0)
        try:
            yield
        finally:
            self._op_role = previous

    @contextlib.contextmanager
    def _optimized_guard(self, param_and_grads=None) -> Iterator[None]:
        """Ops appended inside get ``op_role`` Optimize, as Fluid's optimizers mark their update
        ops (Fluid 1.x's semi-private API; custom optimizers call it). ``param_and_grads`` is
        Fluid's ``[param, grad]`` pair, accepted; fluidjax records no ``op_role_var`` from it."""
        previous = self._op_role
        self._op_role = OP_ROLE_OPTIMIZE
        try:
            yield
        finally:
            self._op_role = previous

    def to_string(self, throw_on_error: bool = False, with_details: bool = False) -> str:
        """Fluid's ``Program.to_string``: the program as text (``str(program)``)."""
        return str(self)

    def _label(self) -> str:
        """``program #3 (the default main program)``: how error messages name a program."""
        role = (" (the default main program)" if self is _main_program else
                " (the default startup program)" if self is _startup_program else "")
        return f"program #{self._uid}{role}"

    # -- blocks --------------------------------------------------------------------------------
    def global_block(self) -> Block:
        """Block 0, where parameters and data variables live."""
        return self.blocks[0]

    def block(self, idx: int) -> Block:
        """Block number ``idx``."""
        return self.blocks[idx]

    def current_block(self) -> Block:
        """The block layer functions append to now."""
        return self.blocks[self._current_block_idx]

    @property
    def num_blocks(self) -> int:
        """How many blocks the program has."""
        return len(self.blocks)

    def create_block(self, parent_idx: int | None = None) -> Block:
        """Add a sub-block (for control-flow ops) and make it current.

        ``parent_idx`` (default: the current block) must be a block of this program, or -1.
        """
        parent = self._current_block_idx if parent_idx is None else parent_idx
        if not _is_index_in(parent, -1, len(self.blocks)):
            raise ProgramFormatError(f"create_block: parent_idx {parent!r} is not a block of the program "
                                     f"(it has {len(self.blocks)} block(s); -1 for none)")
        block = Block(self, len(self.blocks), operator.index(parent))
        self.blocks.append(block)  # bumps the program's version
        self._current_block_idx = block.idx
        return block

    def rollback(self) -> None:
        """Make the current block's parent current again."""
        self._current_block_idx = max(self.current_block().parent_idx, 0)

    # -- queries ---------------------------------------------------------------------------------
    def list_vars(self) -> Iterator[Variable]:
        """Every variable of every block."""
        for block in self.blocks:
            yield from block.vars.values()

    def all_parameters(self) -> list[Parameter]:
        """The parameters of the global block."""
        return self.global_block().all_parameters()

    # -- format ----------------------------------------------------------------------------------
    def serialize(self) -> bytes:
        """The program as Paddle ``ProgramDesc`` bytes (deterministic)."""
        return _codec().program_to_bytes(self)

    @classmethod
    def parse(cls, data: bytes) -> "Program":
        """A program from ``ProgramDesc`` bytes (ours or Paddle's ``desc.serialize_to_string()``)."""
        return _codec().program_from_bytes(data)

    @staticmethod
    def parse_from_string(binary_str: bytes) -> "Program":
        """Fluid's name of :meth:`parse`."""
        return Program.parse(binary_str)

    def clone(self, for_test: bool = False) -> "Program":
        """A deep copy. ``for_test=True`` drops backward and optimizer ops and sets ``is_test``."""
        codec = _codec()
        new = codec.program_from_proto(codec.program_to_proto(self))
        new.random_seed = self.random_seed
        new.run_hooks = list(self.run_hooks)
        for block, new_block in zip(self.blocks, new.blocks):
            for name, var in block.vars.items():
                new_var = new_block.vars[name]
                new_var.is_data = var.is_data
                for attr in ("trainable", "regularizer", "optimize_attr", "need_clip", "gradient_clip_attr",
                             "do_model_average", "error_clip"):
                    if hasattr(var, attr):
                        setattr(new_var, attr, copy.copy(getattr(var, attr)))
        if for_test:
            for block in new.blocks:
                block.ops = [op for op in block.ops
                             if not int(op.attrs.get("op_role", 0)) & (OP_ROLE_BACKWARD | OP_ROLE_OPTIMIZE)]
                for op in block.ops:
                    if registry.has(op.type) and "is_test" in registry.get(op.type).attrs:
                        op.attrs["is_test"] = True
                        op.attr_types["is_test"] = registry.ATTR_TYPES["bool"]
            new._bump()
        return new

    # -- display ---------------------------------------------------------------------------------
    def summary(self, print_fn=None, *, feed=None, fetch_list=None, scope=None, memory: dict | None = None) -> None:
        """A Keras-style table: one row per layer (``fc_0``, ``conv2d_3``), its output shape,
        parameters and FLOPs per example, and totals. Printed as text (``print_fn``, default
        ``print``), or shown as HTML inside Jupyter; ``fluidjax.ir.summary.summarize`` returns it.

        With ``feed`` (and optionally ``fetch_list``, ``scope``), the totals add XLA's memory
        analysis of the step that feed compiles (``fj.compiled_memory``: temporaries, arguments,
        outputs, peak; compiled if needed, nothing runs); or pass those figures as ``memory``."""
        if memory is None and feed is not None:
            if _summary.memory_figures is None:
                raise RuntimeError("summary(feed=...) compiles the step: import fluidjax (its lowering) first")
            memory = _summary.memory_figures(self, feed, scope=scope, fetch_list=fetch_list)
        print_summary(self, print_fn, memory)

    def __str__(self) -> str:
        lines = []
        for block in self.blocks:
            lines.append(f"block {block.idx} (parent {block.parent_idx}) {{")
            for var in block.vars.values():
                lines.append("    " + var.describe())
            if block.vars and block.ops:
                lines.append("")
            for op in block.ops:
                lines.append("    " + op.describe())
            lines.append("}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        n_ops = sum(len(b.ops) for b in self.blocks)
        n_vars = sum(len(b.vars) for b in self.blocks)
        return f"<fluidjax.Program #{self._uid}: {len(self.blocks)} block(s), {n_vars} vars, {n_ops} ops>"

    def _repr_html_(self) -> str:
        """Block 0's variables and ops as tables; a sub-block appears inside the row of the op that
        owns it (a ``while``'s body under the ``while``), folded; blocks no op owns follow."""
        shown: set[int] = set()
        parts = [self._block_html(self.blocks[0], shown)] if self.blocks else []
        for block in self.blocks:
            if block.idx not in shown:
                parts.append(f"<h4>Block {block.idx} (parent {block.parent_idx}; no op runs it)</h4>"
                             + self._block_html(block, shown))
        tables = "<h4>Block 0</h4>" + "".join(parts) if self.blocks else ""
        return _attached["graph_html"](self, tables) if "graph_html" in _attached else tables

    def _block_html(self, block: "Block", shown: set) -> str:
        esc = html.escape
        shown.add(block.idx)
        parts = ["<table><tr><th>variable</th><th>shape</th><th>dtype</th><th>lod_level</th><th>kind</th></tr>"]
        for var in block.vars.values():
            kind = "parameter" if var.is_parameter else "data" if var.is_data else (
                "persistable" if var.persistable else "")
            parts.append(f"<tr><td>{esc(var.name)}</td><td>{esc(str(var.shape))}</td>"
                         f"<td>{esc(str(var.dtype))}</td><td>{var.lod_level}</td><td>{kind}</td></tr>")
        parts.append("</table><table><tr><th>#</th><th>op</th><th>inputs</th><th>outputs</th>"
                     "<th>attributes</th></tr>")
        for i, op in enumerate(block.ops):
            ins = "<br>".join(f"{esc(k)}: {esc(', '.join(v))}" for k, v in op.inputs.items() if v)
            outs = "<br>".join(f"{esc(k)}: {esc(', '.join(v))}" for k, v in op.outputs.items() if v)
            attrs = "<br>".join(f"{esc(k)}={esc(_short(v))}" for k, v in op.attrs.items()
                                if k not in _HIDDEN_ATTRS)
            nested = ""
            for idx in _sub_block_indices(op):
                if 0 <= idx < len(self.blocks) and idx not in shown:      # each block once (no cycles)
                    child = self.blocks[idx]
                    nested += (f"<details style='margin-left:1.5em'><summary>Block {idx} "
                               f"({len(child.ops)} ops, run by this {esc(op.type)})</summary>"
                               f"{self._block_html(child, shown)}</details>")
            parts.append(f"<tr><td>{i}</td><td><b>{esc(op.type)}</b></td><td>{ins}</td>"
                         f"<td>{outs}</td><td>{attrs}{nested}</td></tr>")
        parts.append("</table>")
        return "".join(parts)


_BLOCK_ATTR_TYPES = (8, 10)      # framework.proto's AttrType BLOCK and BLOCKS


def _sub_block_indices(op) -> list[int]:
    """The block indices an op's BLOCK / BLOCKS attributes name."""
    out = []
    for name, value in op.attrs.items():
        if op.attr_types.get(name) in _BLOCK_ATTR_TYPES:
            for v in value if isinstance(value, (list, tuple)) else [value]:
                idx = getattr(v, "idx", v)
                if isinstance(idx, int):
                    out.append(idx)
    return out


# -- default programs --------------------------------------------------------------------------
_main_program = Program()
_startup_program = Program()


def default_main_program() -> Program:
    """The program layer functions append to (outside ``program_guard``)."""
    return _main_program


def default_startup_program() -> Program:
    """The program that creates and initialises parameters (outside ``program_guard``)."""
    return _startup_program


def switch_main_program(program: Program) -> Program:
    """Make ``program`` the default main program; return the previous one."""
    global _main_program
    previous, _main_program = _main_program, program
    return previous


def switch_startup_program(program: Program) -> Program:
    """Make ``program`` the default startup program; return the previous one."""
    global _startup_program
    previous, _startup_program = _startup_program, program
    return previous
