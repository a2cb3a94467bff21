"""Checks that a parsed ``ProgramDesc`` is well formed, so nothing after parsing fails on its format.

``Program.parse`` (``ir/serialize.py``) calls these while it converts the message; a program
that passes can be serialized, cloned, shape-inferred, printed and run without tripping over
its format: any later failure is about what the program computes (a :class:`ShapeError`, an
:class:`UnregisteredOpError`, a :class:`VariableNotFoundError` in a sub-block, ...), never an
untyped exception. A program that does not pass raises :class:`ProgramFormatError` saying what
is wrong and where: the block index, the op index and type, the variable, the proto field.

What is refused at parse (see ``docs/reliability.md``):

- a required proto2 field that is missing (``VarDesc.type``, ``VarType.type``,
  ``TensorDesc.data_type``, ``OpDesc.type``, ``OpDesc.Attr.type``, ...). protobuf's closed
  enums turn an unknown enum value (an attribute type 42, a ``VarType.Type`` 99) into a missing
  field, so unknown enum values are refused by the same check;
- a string field (names, op types, slot and argument names, attribute names and string values,
  ``op_callstack``) that is not valid UTF-8;
- a block tree that is not one: block ``i`` must say ``idx == i``, block 0 is the root
  (``parent_idx == -1``), every other block's parent is an existing block and the parent chain
  ends at block 0 (no block is its own ancestor); ``forward_block_idx`` is -1 or a block;
- a BLOCK / BLOCKS attribute naming a block that is not a child of the op's block;
- a tensor variable whose element type is not a tensor element type (``READER`` as a
  ``data_type``) or whose ``lod_level`` is negative. (A dim below -1 is *not* refused: Paddle
  writes products of unknown dims, e.g. ``[-4]`` for instance_norm's saved mean of a
  ``[-1, 4]`` input. It is read as -1, unknown, and written back as it was.)
- two variables of one block with the same name;
- an op of block 0 naming a variable block 0 does not declare (``@EMPTY@`` aside);
- an attribute whose kind does not fit: the framework attributes every op may carry
  (``op_role`` is a number, ``op_callstack`` a list of strings, ...), and for a registered op
  every attribute its schema declares (a string where ints are expected is refused; ``int`` vs
  ``long`` vs ``bool``, ``float`` vs ``float64``, ``ints`` vs ``longs`` and an empty list of any
  list kind are accepted: Paddle writes them interchangeably).

What parses and fails later, typed: an unknown op type (``UnregisteredOpError`` from shape
inference and from a run), a sub-block op naming a variable no enclosing block declares (Paddle's
grad sub-blocks read their forward sub-block's variables that way; ``VariableNotFoundError``
when such an op is shape-inferred), slots a registered op does not have or lacks, attribute
values out of range (``ShapeError`` naming block, op index and type).
"""

from __future__ import annotations

from typing import Any, NoReturn

from . import registry
from .errors import ProgramFormatError

EMPTY_VAR_NAME = "@EMPTY@"

_T = registry.ATTR_TYPES
_KIND_NAME = registry.ATTR_TYPE_NAMES

# Attribute kinds whose values are strings (checked for UTF-8), and block references.
_STRING_KINDS = frozenset({_T["string"], _T["var"]})
_STRINGS_KINDS = frozenset({_T["strings"], _T["vars"]})
_LIST_KINDS = frozenset({_T[k] for k in ("ints", "floats", "strings", "bools", "blocks", "longs",
                                         "float64s", "vars", "scalars")})
_NUMBER = frozenset({_T["int"], _T["long"], _T["bool"]})
_REAL = _NUMBER | {_T["float"], _T["float64"]}
_NUMBERS = frozenset({_T["ints"], _T["longs"], _T["bools"]})
_REALS = _NUMBERS | {_T["floats"], _T["float64s"]}
# Declared kind -> the kinds a parsed attribute of that name may have. Paddle writes int for
# long, bool for int and the like (its C++ side converts on read), so those stay compatible.
_COMPATIBLE = {
    _T["int"]: _NUMBER, _T["long"]: _NUMBER, _T["bool"]: _NUMBER,
    _T["float"]: _REAL, _T["float64"]: _REAL,
    _T["ints"]: _NUMBERS, _T["longs"]: _NUMBERS, _T["bools"]: _NUMBERS,
    _T["floats"]: _REALS, _T["float64s"]: _REALS,
}
# Attributes every op may carry, which fluidjax itself reads (clone(for_test) reads op_role,
# error messages op_callstack).
_FRAMEWORK_ATTRS = {
    "op_role": _NUMBER,
    "op_callstack": frozenset({_T["strings"]}),
    "op_role_var": frozenset({_T["strings"]}),
    "op_namescope": frozenset({_T["string"]}),
    "op_device": frozenset({_T["string"]}),
}

# op type -> {attribute name: allowed kinds}, for the op types seen so far (registered ones).
_expected_cache: dict[str, dict[str, frozenset[int]]] = {}


def fail(where: str, what: str) -> NoReturn:
    """Raise :class:`ProgramFormatError` with the place first: ``block 0, op 3 ('mul'): ...``."""
    raise ProgramFormatError(f"malformed program: {where}: {what}")


def show(value: Any) -> str:
    """A name as an error message shows it: ``'fc_0.w_0'``, or ``b'fc\\xff'`` when not UTF-8;
    long ones shortened."""
    text = repr(value)
    return text if len(text) <= 80 else text[:60] + "..." + text[-15:]


def op_where(block_idx: int, op_idx: int, op_type: Any) -> str:
    """``block 0, op 3 ('mul')``."""
    return f"block {block_idx}, op {op_idx} ({show(op_type)})"


def _not_utf8(value: Any) -> str:
    return f"{show(value)} is not valid UTF-8"


def _missing_fields(message) -> str:
    """The required fields a message lacks, as protobuf names them (``tensor.data_type``)."""
    return ", ".join(message.FindInitializationErrors()) or "(none)"


def _index_of(container, item) -> int:
    for i, x in enumerate(container):
        if x is item or x == item:
            return i
    return -1


# -- blocks ---------------------------------------------------------------------------------------
def check_blocks(desc) -> None:
    """The block tree: indices, parents (in range, acyclic, rooted at block 0), forward blocks."""
    blocks = desc.blocks
    n = len(blocks)
    for i, b in enumerate(blocks):
        if (b.idx != i or b.parent_idx < -1 or b.parent_idx >= n or (b.parent_idx == -1) != (i == 0)
                or not b.HasField("idx") or not b.HasField("parent_idx")):
            _bad_block(b, i, n)
        if b.forward_block_idx != -1 and not 0 <= b.forward_block_idx < n:
            fail(f"block {i}", f"forward_block_idx {b.forward_block_idx} is not a block of the program "
                 f"(it has {n}; -1 for none)")
    # Every parent chain must reach block 0; a chain longer than the block count loops.
    depth = {0: 0}
    for i in range(1, n):
        chain = [i]
        j = blocks[i].parent_idx
        while j not in depth:
            if j in chain:
                loop = chain[chain.index(j):] + [j]
                fail(f"block {i}", "its parents form a cycle: " + " -> ".join(map(str, chain + [j]))
                     + f" (the loop {' -> '.join(map(str, loop))} never reaches block 0)")
            chain.append(j)
            j = blocks[j].parent_idx
        d = depth[j]
        for k in reversed(chain):
            d += 1
            depth[k] = d


def _bad_block(b, i: int, n: int) -> NoReturn:
    where = f"block {i}"
    for field in ("idx", "parent_idx"):
        if not b.HasField(field):
            fail(where, f"BlockDesc.{field} is missing (a required field)")
    if b.idx != i:
        fail(where, f"BlockDesc.idx is {b.idx}, but the block is number {i} in ProgramDesc.blocks "
             "(blocks must be listed in index order)")
    if i == 0:
        fail(where, f"block 0 is the root block and needs parent_idx -1, not {b.parent_idx}")
    if b.parent_idx == -1:
        fail(where, "only block 0 may be a root (parent_idx -1); a sub-block needs a parent")
    fail(where, f"parent_idx {b.parent_idx} is not a block of the program (it has {n} block(s))")


# -- variables (error paths, called by ir/serialize.py) ------------------------------------------
def bad_var(block_idx: int, block_desc, var_desc) -> NoReturn:
    """A VarDesc without its required name or type, or with a name that is not UTF-8."""
    index = _index_of(block_desc.vars, var_desc)
    where = f"block {block_idx}, variable {show(var_desc.name)} (vars[{index}])"
    if not var_desc.HasField("name"):
        fail(where, "VarDesc.name is missing (a required field)")
    if not isinstance(var_desc.name, str):
        fail(where, f"the variable's name {_not_utf8(var_desc.name)}")
    if not var_desc.HasField("type"):
        fail(where, "VarDesc.type is missing (a required field)")
    vtype = var_desc.type
    if not vtype.HasField("type"):
        fail(where, "VarType.type (the variable's kind) is missing or not a known VarType.Type value")
    fail(where, f"its VarType lacks required fields: {_missing_fields(vtype)} "
         "(missing, or holding an unknown enum value)")


def bad_tensor(block_idx: int, name: str, holder, tensor, dtype_names: dict) -> NoReturn:
    """A tensor VarType whose data_type, dims or lod_level is unusable."""
    where = f"block {block_idx}, variable {show(name)}"
    if holder is not tensor and not holder.HasField("tensor"):
        fail(where, "its LoDTensorDesc has no tensor (TensorDesc, a required field)")
    if not tensor.HasField("data_type"):
        fail(where, "TensorDesc.data_type is missing or not a known VarType.Type value")
    if tensor.data_type not in dtype_names:
        fail(where, f"TensorDesc.data_type {tensor.data_type} is not a tensor element type "
             f"(the element types are {sorted(dtype_names)}; {tensor.data_type} is a variable kind)")
    fail(where, f"lod_level {holder.lod_level} is negative")


def bad_var_attr(block_idx: int, name: str, attr) -> NoReturn:
    """A VarDesc.Attr without name or type, or with a string that is not UTF-8."""
    where = f"block {block_idx}, variable {show(name)}, attribute {show(attr.name)}"
    for field in ("name", "type"):
        if not attr.HasField(field):
            fail(where, f"VarDesc.Attr.{field} is missing (a required field; an unknown attribute "
                 "type reads as missing)")
    if not isinstance(attr.name, str):
        fail(where, f"the attribute name {_not_utf8(attr.name)}")
    fail(where, f"its string value {_not_utf8(attr.s)}")


# -- ops (error paths, called by ir/serialize.py) ------------------------------------------------
def bad_op(block_idx: int, block_desc, op_desc) -> NoReturn:
    """An OpDesc whose required type is missing."""
    index = _index_of(block_desc.ops, op_desc)
    fail(op_where(block_idx, index, op_desc.type), "OpDesc.type is missing (a required field)")


def bad_attr(block_idx: int, block_desc, op_desc, attr) -> NoReturn:
    """An OpDesc.Attr whose required type is missing (or was an unknown AttrType)."""
    index = _index_of(block_desc.ops, op_desc)
    where = op_where(block_idx, index, op_desc.type) + f", attribute {show(attr.name)}"
    if not attr.HasField("name"):
        fail(where, "OpDesc.Attr.name is missing (a required field)")
    if not attr.HasField("type"):
        fail(where, f"OpDesc.Attr.type is missing or not a known AttrType (the known ones are "
             f"0..{max(_KIND_NAME)})")
    if attr.type == _T["scalar"] and not attr.HasField("scalar"):
        fail(where, "a SCALAR attribute without its value (OpDesc.Attr.scalar)")
    fail(where, f"its value lacks required fields: {_missing_fields(attr)}")


def check_version_map(desc) -> None:
    """``op_version_map``: every pair has its op name (UTF-8) and version."""
    for i, pair in enumerate(desc.op_version_map.pair):
        where = f"op_version_map.pair[{i}]"
        if not pair.IsInitialized():
            fail(where, f"missing required fields: {_missing_fields(pair)}")
        if not isinstance(pair.op_name, str):
            fail(where, f"op_name {_not_utf8(pair.op_name)}")


# -- the converted program -----------------------------------------------------------------------
def _expected_attrs(op_type: str) -> dict[str, frozenset[int]]:
    expected = _expected_cache.get(op_type)
    if expected is None:
        if not registry.has(op_type):
            return _FRAMEWORK_ATTRS
        expected = dict(_FRAMEWORK_ATTRS)
        for name, spec in registry.get(op_type).attrs.items():
            expected[name] = _COMPATIBLE.get(spec.type_id, frozenset({spec.type_id}))
        _expected_cache[op_type] = expected
    return expected


def check_op(bi: int, k: int, op_type: Any, inputs: dict, outputs: dict, attrs: dict, types: dict,
             declared: dict | None, parents: list[int], block_desc) -> None:
    """One converted op, before it becomes an :class:`Operator`: names that are not UTF-8, block
    0's references (``declared`` is block 0's variables, None in a sub-block), attribute kinds
    and block attributes (``parents``: every block's parent index).

    This runs for every op of every parse and clone, so the common case stays in C: a string
    join fails on a ``bytes`` (a string that was not UTF-8) and only then is it looked for.
    """
    if op_type.__class__ is not str:
        fail(op_where(bi, k, op_type), f"the op type {_not_utf8(op_type)}")
    for kind, slots in (("input", inputs), ("output", outputs)):
        try:
            _join(slots)
            if "" in slots:
                _bad_slot(bi, k, op_type, block_desc, kind, "")
            if declared is None:
                for args in slots.values():
                    _join(args)
        except TypeError:
            _find_bad_name(bi, k, op_type, block_desc, kind, slots)
        if declared is not None:
            for slot, args in slots.items():
                for a in args:
                    if a not in declared and a != EMPTY_VAR_NAME:
                        _bad_argument(bi, k, op_type, kind, slot, a, declared)
    try:
        _join(types)
    except TypeError:
        name = next(n for n in types if n.__class__ is not str)
        fail(op_where(bi, k, op_type), f"an attribute name {_not_utf8(name)}")
    expected = _expected_attrs(op_type)
    for name, tid in types.items():
        allowed = expected.get(name)
        if allowed is not None and tid not in allowed:
            value = attrs[name]
            if not (tid in _LIST_KINDS and not value and _LIST_KINDS.intersection(allowed)):
                _bad_attr_kind(bi, k, op_type, attrs, name, tid, allowed)
        if tid in _STRINGS_KINDS:
            try:
                _join(attrs[name])
            except TypeError:
                j, text = next((j, t) for j, t in enumerate(attrs[name]) if t.__class__ is not str)
                fail(op_where(bi, k, op_type) + f", attribute {show(name)}", f"string [{j}] {_not_utf8(text)}")
        elif tid in _STRING_KINDS:
            if attrs[name].__class__ is not str:
                fail(op_where(bi, k, op_type) + f", attribute {show(name)}",
                     f"its string value {_not_utf8(attrs[name])}")
        elif tid == 8 or tid == 10:  # BLOCK, BLOCKS
            value = attrs[name]
            for target in ([value] if tid == 8 else value):
                if not (0 <= target < len(parents) and parents[target] == bi):
                    _bad_block_attr(bi, k, op_type, name, target, parents)


_join = "".join


def _find_bad_name(bi: int, k: int, op_type: str, block_desc, kind: str, slots: dict) -> NoReturn:
    for slot, args in slots.items():
        if slot.__class__ is not str:
            _bad_slot(bi, k, op_type, block_desc, kind, slot)
        for a in args:
            if a.__class__ is not str:
                _bad_argument(bi, k, op_type, kind, slot, a, None)
    fail(op_where(bi, k, op_type), f"a {kind} slot or argument name is not a string")


def duplicate_vars(bi: int, block_desc) -> NoReturn:
    """A block declaring a variable name twice (the converted block has fewer variables)."""
    _duplicate_vars(bi, block_desc)


def _duplicate_vars(bi: int, block_desc) -> NoReturn:
    seen: dict[str, int] = {}
    for i, v in enumerate(block_desc.vars):
        if v.name in seen:
            fail(f"block {bi}, variable {show(v.name)}",
                 f"declared twice in the block (vars[{seen[v.name]}] and vars[{i}])")
        seen[v.name] = i
    fail(f"block {bi}", "a variable is declared twice in the block")


def _bad_slot(bi: int, k: int, op_type: str, block_desc, kind: str, slot: Any) -> None:
    """A slot name that is not UTF-8, or missing (empty, where the field was not written)."""
    if slot.__class__ is not str:
        fail(op_where(bi, k, op_type), f"the {kind} slot name {_not_utf8(slot)}")
    # An empty slot name is allowed when written explicitly; a missing one is not.
    op_desc = block_desc.ops[k]
    for v in (op_desc.inputs if kind == "input" else op_desc.outputs):
        if not v.HasField("parameter"):
            fail(op_where(bi, k, op_type), f"OpDesc.Var.parameter (the {kind} slot name) is missing "
                 "(a required field)")


def _bad_argument(bi: int, k: int, op_type: str, kind: str, slot: str, name: Any, declared) -> NoReturn:
    where = op_where(bi, k, op_type) + f", {kind} {show(slot)}"
    if name.__class__ is not str:
        fail(where, f"the variable name {_not_utf8(name)}")
    fail(where, f"variable {show(name)} is not declared in block {bi} ({len(declared)} variables are); "
         "an op of the root block may only name its variables (or @EMPTY@)")


def _bad_attr_kind(bi: int, k: int, op_type: str, attrs: dict, name: str, tid: int,
                   allowed: frozenset[int]) -> NoReturn:
    value = attrs[name]
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    kinds = ", ".join(sorted(_KIND_NAME[t] for t in allowed))
    spec = registry.get(op_type).attrs.get(name) if registry.has(op_type) else None
    expected = (f"op {op_type!r} declares it {spec.kind} (accepted kinds: {kinds})" if spec is not None
                else f"fluidjax reads {name!r} as {kinds}")
    fail(op_where(bi, k, op_type) + f", attribute {show(name)}",
         f"it is of kind {_KIND_NAME.get(tid, tid)} ({text}), but {expected}")


def _bad_block_attr(bi: int, k: int, op_type: str, name: str, target: int, parents: list) -> NoReturn:
    where = op_where(bi, k, op_type) + f", attribute {show(name)}"
    if not 0 <= target < len(parents):
        fail(where, f"names block {target}, but the program has {len(parents)} block(s)")
    fail(where, f"names block {target}, whose parent is block {parents[target]}: a block attribute "
         f"must name a sub-block of the op's own block ({bi})")
