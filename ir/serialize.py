"""Conversion between :class:`~fluidjax.ir.program.Program` and Paddle's ``ProgramDesc`` protobuf.

Optional fields remember whether a parsed program set them, so ``Program.parse(data).serialize()``
gives back ``data`` byte for byte, for our programs and Paddle's alike. Programs built here write
the fields Paddle's own builder writes.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from typing import Any, Iterator

from google.protobuf.message import EncodeError

from ..proto import framework_pb2 as pb
from . import dtypes, registry, validate
from .errors import ProgramFormatError
from .program import Block, Operator, Program, attach
from .variable import Parameter, Variable

_T = registry.ATTR_TYPES
# AttrType → the OpDesc.Attr field holding its value.
_ATTR_FIELD = {
    _T["int"]: "i", _T["float"]: "f", _T["string"]: "s", _T["ints"]: "ints", _T["floats"]: "floats",
    _T["strings"]: "strings", _T["bool"]: "b", _T["bools"]: "bools", _T["block"]: "block_idx",
    _T["long"]: "l", _T["blocks"]: "blocks_idx", _T["longs"]: "longs", _T["float64s"]: "float64s",
    _T["var"]: "var_name", _T["vars"]: "vars_name", _T["float64"]: "float64", _T["scalar"]: "scalar",
    _T["scalars"]: "scalars",
}
_REPEATED = {_T[k] for k in ("ints", "floats", "strings", "bools", "blocks", "longs", "float64s", "vars",
                             "scalars")}
_MESSAGE = {_T["scalar"], _T["scalars"]}
_TENSOR_KINDS = {dtypes.LOD_TENSOR: "lod_tensor", dtypes.LOD_TENSOR_ARRAY: "tensor_array",
                 dtypes.SELECTED_ROWS: "selected_rows"}


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC: converting a big program makes many linked objects, and collections
    triggered half-way cost more than the conversion itself (measured: 2-3x on 5,000 ops)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# -- to proto -------------------------------------------------------------------------------------
def _var_to_proto(var: Variable, out: pb.VarDesc) -> None:
    out.name = var.name
    if var._raw_type is not None:
        out.type.ParseFromString(var._raw_type)
    else:
        out.type.type = var.type
        kind = _TENSOR_KINDS.get(var.type)
        if kind is not None:
            holder = getattr(out.type, kind)
            tensor = holder if kind == "selected_rows" else holder.tensor
            tensor.data_type = dtypes.to_enum(var.dtype)
            written = var.__dict__.get("_written_dims")
            # Dims below -1 that a parsed program had (read as -1): written back as they were.
            tensor.dims.extend(written[1] if written is not None and written[0] == var.shape else var.shape)
            if kind != "selected_rows" and (var.lod_level or var._present is None or "lod_level" in var._present):
                holder.lod_level = var.lod_level
    present = var._present
    for field, value, default_written in (
        ("persistable", var.persistable, True),
        ("need_check_feed", var.need_check_feed, False),
        ("is_parameter", var.is_parameter, False),
        ("stop_gradient", var.stop_gradient, True),
    ):
        if value or (field in present if present is not None else default_written):
            setattr(out, field, value)
    for name, type_id, value in var.desc_attrs:
        attr = out.attrs.add(name=name, type=type_id)
        if type_id == _T["ints"]:
            attr.ints.extend(value)
        elif type_id == _T["string"]:
            attr.s = value
        else:
            attr.i = value


def _attr_to_proto(name: str, type_id: int, value: Any, out: pb.OpDesc.Attr) -> None:
    out.name = name
    out.type = type_id
    field = _ATTR_FIELD[type_id]
    if type_id in _MESSAGE:
        if type_id in _REPEATED:
            for v in value:
                getattr(out, field).add().CopyFrom(v)
        else:
            getattr(out, field).CopyFrom(value)
    elif type_id in _REPEATED:
        if type_id == _T["blocks"]:
            value = [v.idx if isinstance(v, Block) else v for v in value]
        getattr(out, field).extend(value)
    else:
        if type_id == _T["block"] and isinstance(value, Block):
            value = value.idx
        setattr(out, field, value)


_SCALAR_SETTERS = {t: f for t, f in _ATTR_FIELD.items() if t not in _REPEATED and t not in _MESSAGE}
_LIST_SETTERS = {t: f for t, f in _ATTR_FIELD.items() if t in _REPEATED and t not in _MESSAGE}


def _op_to_proto(op: Operator, out: pb.OpDesc) -> None:
    out.type = op.type
    add_input, add_output = out.inputs.add, out.outputs.add
    for slot, names in op.inputs.items():
        add_input(parameter=slot, arguments=names)
    for slot, names in op.outputs.items():
        add_output(parameter=slot, arguments=names)
    add_attr = out.attrs.add
    types = op.attr_types
    for name, value in op.attrs.items():
        type_id = types[name]
        field = _SCALAR_SETTERS.get(type_id)
        if field is not None and type_id != _T["block"]:
            add_attr(name=name, type=type_id, **{field: value})
        elif type_id in _LIST_SETTERS and type_id != _T["blocks"]:
            add_attr(name=name, type=type_id, **{_LIST_SETTERS[type_id]: value})
        else:  # blocks and Scalar messages
            _attr_to_proto(name, type_id, value, add_attr())
    if op.is_target is not None:
        out.is_target = op.is_target


def program_to_proto(program: Program) -> pb.ProgramDesc:
    """The ``ProgramDesc`` message of a program."""
    desc = pb.ProgramDesc()
    for block in program.blocks:
        b = desc.blocks.add(idx=block.idx, parent_idx=block.parent_idx)
        for var in block.vars.values():
            _var_to_proto(var, b.vars.add())
        for op in block.ops:
            _op_to_proto(op, b.ops.add())
        if block.forward_block_idx != -1 or (block._present and "forward_block_idx" in block._present):
            b.forward_block_idx = block.forward_block_idx
    if program.desc_version is not None:
        desc.version.version = program.desc_version
    if program.op_version_map is not None:
        desc.op_version_map.SetInParent()
        for name, version in program.op_version_map:
            desc.op_version_map.pair.add(op_name=name).op_version.version = version
    return desc


def program_to_bytes(program: Program) -> bytes:
    """A program as deterministic ``ProgramDesc`` bytes."""
    with _gc_paused():
        return program_to_proto(program).SerializeToString(deterministic=True)


# -- from proto -----------------------------------------------------------------------------------
def _attr_value(attr: pb.OpDesc.Attr) -> Any:
    field = _ATTR_FIELD.get(attr.type)
    if field is None:
        raise ProgramFormatError(f"malformed program: attribute {attr.name!r} has unknown type {attr.type}")
    value = getattr(attr, field)
    if attr.type in _MESSAGE:
        if attr.type in _REPEATED:
            copies = []
            for v in value:
                c = pb.Scalar()
                c.CopyFrom(v)
                copies.append(c)
            return copies
        c = pb.Scalar()
        c.CopyFrom(value)
        return c
    return list(value) if attr.type in _REPEATED else value


_FLAG_FIELDS = frozenset({"persistable", "need_check_feed", "is_parameter", "stop_gradient"})
_DTYPE_OF_ENUM = dict(dtypes._NAME_OF_ENUM)
_STRING_TYPE = _T["string"]
_SCALAR_TYPE = _T["scalar"]


def _var_from_proto(block: Block, desc: pb.VarDesc, block_desc: pb.BlockDesc) -> Variable:
    # One ListFields() call says which optional fields are present (cheaper than HasField x5).
    fields = {f.name: v for f, v in desc.ListFields()}
    vtype_msg = fields.get("type")
    name = fields.get("name")
    if vtype_msg is None or name.__class__ is not str:
        validate.bad_var(block.idx, block_desc, desc)
    vtype = vtype_msg.type
    kind = _TENSOR_KINDS.get(vtype)
    shape, dtype, lod_level, written = (), None, 0, None
    present = set(_FLAG_FIELDS.intersection(fields))
    has_tensor = kind is not None and vtype_msg.HasField(kind)
    if has_tensor:
        holder = getattr(vtype_msg, kind)
        tensor = holder if kind == "selected_rows" else holder.tensor
        shape, data_type = tuple(tensor.dims), tensor.data_type
        dtype = _DTYPE_OF_ENUM.get(data_type)
        # data_type 0 (BOOL) is also what a missing (or unknown-valued) data_type reads as.
        if dtype is None or (data_type == 0 and not tensor.HasField("data_type")):
            validate.bad_tensor(block.idx, name, holder, tensor, _DTYPE_OF_ENUM)
        if shape and min(shape) < -1:
            # Paddle multiplies unknown dims by known ones (instance_norm's SavedMean is [-4] for
            # an input [-1, 4]): any negative dim is unknown. Kept as written for serialization.
            written = shape
            shape = tuple(-1 if d < 0 else d for d in shape)
        if kind != "selected_rows":
            lod_level = holder.lod_level
            if lod_level < 0:
                validate.bad_tensor(block.idx, name, holder, tensor, _DTYPE_OF_ENUM)
            if holder.HasField("lod_level"):
                present.add("lod_level")
    persistable = fields.get("persistable", False)
    stop_gradient = fields.get("stop_gradient", False)
    need_check_feed = fields.get("need_check_feed", False)
    if fields.get("is_parameter", False):
        var: Variable = Parameter.__new__(Parameter)
        var.is_parameter = True
        var.trainable = not stop_gradient
        var.regularizer = None
        var.optimize_attr = {"learning_rate": 1.0}
        var.need_clip = True
    else:
        var = Variable.__new__(Variable)
        var.is_parameter = False
    # Parsed values are already normalized: fill the fields directly instead of __init__'s checks
    # (into __dict__: the variable is not in its block yet, so its tracked fields have nothing to bump).
    var.__dict__.update(block=block, name=name, shape=shape, dtype=dtype, lod_level=lod_level,
                        persistable=persistable, stop_gradient=stop_gradient, type=vtype,
                        need_check_feed=need_check_feed, is_data=need_check_feed)
    attrs = fields.get("attrs")
    if attrs:
        var.desc_attrs = [_var_attr(block.idx, name, a) for a in attrs]
    else:
        var.desc_attrs = []
    var._present = frozenset(present)
    if has_tensor:
        var._raw_type = None
        if written is not None:
            var._written_dims = (shape, written)
    else:
        # A kind fluidjax does not interpret (feed/fetch lists, readers, step scopes, ...) is kept
        # as written. Encoding checks its required fields (and "type" reads 0 when missing).
        if vtype == 0 and not vtype_msg.HasField("type"):
            validate.bad_var(block.idx, block_desc, desc)
        try:
            var._raw_type = vtype_msg.SerializeToString(deterministic=True)
        except EncodeError:
            validate.bad_var(block.idx, block_desc, desc)
    if var.is_parameter:
        var.is_data = False
    return var


def _var_attr(block_idx: int, var_name: str, a: pb.VarDesc.Attr) -> tuple[str, int, Any]:
    if not (a.HasField("name") and a.HasField("type")) or a.name.__class__ is not str:
        validate.bad_var_attr(block_idx, var_name, a)
    if a.type == _T["ints"]:
        return a.name, a.type, list(a.ints)
    if a.type == _STRING_TYPE:
        if a.s.__class__ is not str:
            validate.bad_var_attr(block_idx, var_name, a)
        return a.name, a.type, a.s
    return a.name, a.type, a.i


def program_from_proto(desc: pb.ProgramDesc) -> Program:
    """A :class:`Program` from a ``ProgramDesc`` message; op attributes are kept as written.

    The message is validated as it is converted (see :mod:`fluidjax.ir.validate`): anything
    malformed raises :class:`ProgramFormatError` naming the block, op, variable or field.
    """
    validate.check_blocks(desc)
    program = Program()
    program.blocks = []
    int_type = _T["int"]
    parents = [b.parent_idx for b in desc.blocks]
    check_op = validate.check_op
    read: set = set()        # block 0's names its ops read (or a feed op writes) ...
    written: set = set()     # ... and those its other ops write
    for bi, b in enumerate(desc.blocks):
        block = Block(program, b.idx, b.parent_idx)
        block.forward_block_idx = b.forward_block_idx
        block._present = frozenset({"forward_block_idx"} if b.HasField("forward_block_idx") else ())
        vars = block.vars
        for v in b.vars:
            var = _var_from_proto(block, v, b)
            vars[var.name] = var
        if len(vars) != len(b.vars):
            validate.duplicate_vars(bi, b)
        declared = vars if bi == 0 else None
        for k, o in enumerate(b.ops):
            attrs, types = {}, {}
            for a in o.attrs:
                name, type_id = a.name, a.type
                field = _SCALAR_SETTERS.get(type_id)
                if field is not None:
                    # An unknown AttrType reads as a missing type, whose default is INT.
                    if type_id == int_type and not a.HasField("type"):
                        validate.bad_attr(bi, b, o, a)
                    attrs[name] = getattr(a, field)
                else:
                    if type_id in _MESSAGE and (not a.IsInitialized() or (
                            type_id == _SCALAR_TYPE and not a.HasField("scalar"))):
                        validate.bad_attr(bi, b, o, a)
                    attrs[name] = _attr_value(a)
                types[name] = type_id
            op_type = o.type
            if not op_type and not o.HasField("type"):
                validate.bad_op(bi, b, o)
            ins = {v.parameter: list(v.arguments) for v in o.inputs}
            outs = {v.parameter: list(v.arguments) for v in o.outputs}
            check_op(bi, k, op_type, ins, outs, attrs, types, declared, parents, b)
            if bi == 0:
                for names in ins.values():
                    read.update(names)
                if op_type != "feed":
                    for names in outs.values():
                        written.update(names)
                else:
                    for names in outs.values():
                        read.update(names)
            block.ops.append(Operator(block, op_type, ins, outs, attrs, types,
                                      is_target=o.is_target if o.HasField("is_target") else None))
        program.blocks.append(block)
    if not program.blocks:
        program.blocks = [Block(program, 0)]
    _mark_inputs_as_data(program.blocks[0], read - written)
    if desc.HasField("version"):
        program.desc_version = desc.version.version
    if desc.HasField("op_version_map"):
        validate.check_version_map(desc)
        program.op_version_map = [(p.op_name, p.op_version.version) for p in desc.op_version_map.pair]
    return program


def _mark_inputs_as_data(block: Block, inputs: set) -> None:
    """The wire format has no "is data" field (Paddle marks only ``need_check_feed`` variables, and
    Fluid 1.x's ``layers.data`` is not one): a non-persistable tensor of block 0 that its ops read
    and none of them computes (or that a saved model's feed op writes) can only come from a feed, so
    it is a data variable of the parsed program, as it was of the program that was saved."""
    vars = block.vars
    for name in inputs:
        var = vars.get(name)
        if (var is not None and not var.persistable and not var.is_parameter and var.type == dtypes.LOD_TENSOR
                and var.dtype is not None):
            var.__dict__["is_data"] = True


def program_from_bytes(data: bytes) -> Program:
    """A program from ``ProgramDesc`` bytes; :class:`ProgramFormatError` for anything else."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProgramFormatError(f"Program.parse expects ProgramDesc bytes, got {type(data).__name__}")
    desc = pb.ProgramDesc()
    try:
        desc.ParseFromString(data)
    except Exception as exc:
        raise ProgramFormatError(f"not a ProgramDesc: {exc}") from None
    with _gc_paused():
        return program_from_proto(desc)


# Program.serialize / parse / clone call this module through the attachment (see ir/program.py).
attach("codec", sys.modules[__name__])
