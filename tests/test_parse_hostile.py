"""Malformed ProgramDesc bytes: every failure is a fluidjax error that says what and where.

One test per failure class found by hand or by the fuzzer (``tests/test_fuzz.py``), each on a
small hand-built message. Messages that the real schema refuses to hold (invalid UTF-8, unknown
enum values) are built with the fuzzer's loose schema (``fuzz.loose``: strings as bytes, enums
as integers, same field numbers).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import fluidjax as fj
from fluidjax.ir import registry
from fluidjax.proto import framework_pb2 as pb
from fuzz import loose

A = pb.AttrType
VT = pb.VarType


def _var(block, name, dims=(-1, 4), dtype=VT.FP32, kind=VT.LOD_TENSOR, lod_level=None, **flags):
    v = block.vars.add(name=name)
    v.type.type = kind
    if kind == VT.LOD_TENSOR:
        v.type.lod_tensor.tensor.data_type = dtype
        v.type.lod_tensor.tensor.dims.extend(dims)
        if lod_level is not None:
            v.type.lod_tensor.lod_level = lod_level
    for k, value in flags.items():
        setattr(v, k, value)
    return v


def _op(block, type_, inputs, outputs, **attrs):
    op = block.ops.add(type=type_)
    for slot, names in inputs.items():
        op.inputs.add(parameter=slot, arguments=names)
    for slot, names in outputs.items():
        op.outputs.add(parameter=slot, arguments=names)
    op.attrs.add(name="op_role", type=A.INT, i=0)
    op.attrs.add(name="op_callstack", type=A.STRINGS, strings=['  File "model.py", line 3, in build', "    y = relu(x)"])
    for name, (kind, value) in attrs.items():
        a = op.attrs.add(name=name, type=kind)
        field = {A.INT: "i", A.LONG: "l", A.FLOAT: "f", A.STRING: "s", A.BOOLEAN: "b", A.BLOCK: "block_idx"}.get(kind)
        if field:
            setattr(a, field, value)
        else:
            getattr(a, {A.INTS: "ints", A.LONGS: "longs", A.BLOCKS: "blocks_idx", A.STRINGS: "strings"}[kind]).extend(value)
    return op


def _desc() -> pb.ProgramDesc:
    """x (data, [-1, 4]) -> relu -> y, in block 0."""
    desc = pb.ProgramDesc()
    b = desc.blocks.add(idx=0, parent_idx=-1)
    _var(b, "x", need_check_feed=True)
    _var(b, "y")
    _op(b, "relu", {"X": ["x"]}, {"Out": ["y"]})
    return desc


def _sub_blocks(desc, parents):
    for parent in parents:
        desc.blocks.add(idx=len(desc.blocks), parent_idx=parent)
    return desc


def _bytes(desc) -> bytes:
    return desc.SerializePartialToString()


def _refused(data: bytes, *fragments: str) -> fj.ProgramFormatError:
    with pytest.raises(fj.ProgramFormatError) as info:
        fj.Program.parse(data)
    text = str(info.value)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in: {text}"
    return info.value


def _loose(desc=None):
    return loose.parse(_bytes(desc if desc is not None else _desc()))


def test_the_base_program_is_fine():
    data = _bytes(_desc())
    prog = fj.Program.parse(data)
    assert prog.serialize() == data
    assert fj.infer_shapes(prog, {"x": (3, 4)})["y"] == (3, 4)
    prog.clone(for_test=True).serialize()


# -- bytes that are not a ProgramDesc ---------------------------------------------------------------
def test_garbage_is_a_format_error():
    _refused(b"\xff\xff\xff\xff", "not a ProgramDesc")
    _refused(_bytes(_desc())[:-7], "not a ProgramDesc")


def test_not_bytes_is_a_format_error():
    _refused("a string", "expects ProgramDesc bytes", "str")


def test_a_program_without_blocks_parses_as_an_empty_program():
    # Found by the fuzzer: validation indexed the missing block 0 (IndexError).
    prog = fj.Program.parse(b"")
    assert prog.num_blocks == 1 and not prog.global_block().ops
    prog.clone(for_test=True)


# -- required fields and enum values --------------------------------------------------------------
def test_variable_without_type():
    # Was KeyError: 'type'.
    desc = _desc()
    desc.blocks[0].vars[1].ClearField("type")
    _refused(_bytes(desc), "block 0", "variable 'y'", "vars[1]", "VarDesc.type is missing")


def test_var_type_without_its_kind():
    # Was google.protobuf.message.EncodeError at serialize / clone.
    desc = _desc()
    _var(desc.blocks[0], "feed", kind=VT.FEED_MINIBATCH).type.ClearField("type")
    _refused(_bytes(desc), "variable 'feed'", "VarType.type")


def test_tensor_without_data_type():
    desc = _desc()
    desc.blocks[0].vars[0].type.lod_tensor.tensor.ClearField("data_type")
    _refused(_bytes(desc), "variable 'x'", "data_type is missing")


def test_lod_tensor_desc_without_tensor():
    desc = _desc()
    desc.blocks[0].vars[0].type.lod_tensor.ClearField("tensor")
    _refused(_bytes(desc), "variable 'x'", "no tensor")


def test_op_without_type():
    desc = _desc()
    desc.blocks[0].ops[0].ClearField("type")
    _refused(_bytes(desc), "block 0, op 0", "OpDesc.type is missing")


def test_slot_without_name():
    desc = _desc()
    desc.blocks[0].ops[0].inputs[0].ClearField("parameter")
    _refused(_bytes(desc), "block 0, op 0 ('relu')", "OpDesc.Var.parameter")


def test_block_without_parent_idx():
    desc = _sub_blocks(_desc(), [0])
    desc.blocks[1].ClearField("parent_idx")
    _refused(_bytes(desc), "block 1", "BlockDesc.parent_idx is missing")


def test_attribute_of_unknown_type():
    desc = _loose()
    desc.blocks[0].ops[0].attrs.add(name=b"mystery", type=42, i=1)
    _refused(loose.encode(desc), "block 0, op 0 ('relu'), attribute 'mystery'", "AttrType")


def test_scalar_attribute_without_its_type():
    desc = _desc()
    a = desc.blocks[0].ops[0].attrs.add(name="fill", type=A.SCALAR)
    a.scalar.r = 1.5  # Scalar.type is required
    _refused(_bytes(desc), "block 0, op 0 ('relu'), attribute 'fill'", "scalar.type")


def test_scalar_attribute_without_its_value():
    # Found by the fuzzer (attrs:6644): EncodeError at serialize.
    desc = _desc()
    desc.blocks[0].ops[0].attrs.add(name="fill", type=A.SCALAR)
    _refused(_bytes(desc), "block 0, op 0 ('relu'), attribute 'fill'", "SCALAR attribute without its value")


def test_data_type_that_is_a_variable_kind():
    # Was TypeError: 15 is not a Paddle tensor element type (at parse or later).
    desc = _desc()
    desc.blocks[0].vars[0].type.lod_tensor.tensor.data_type = VT.READER
    _refused(_bytes(desc), "variable 'x'", "data_type 15 is not a tensor element type")


def test_unknown_variable_kind():
    desc = _loose()
    desc.blocks[0].vars[1].type.type = 99
    _refused(loose.encode(desc), "variable 'y'", "VarType.type")


def test_non_tensor_variable_kinds_parse_and_round_trip():
    desc = _desc()
    b = desc.blocks[0]
    for name, kind in (("feed", VT.FEED_MINIBATCH), ("fetch", VT.FETCH_LIST), ("scopes", VT.STEP_SCOPES),
                       ("raw", VT.RAW), ("text", VT.STRING), ("texts", VT.STRINGS), ("table", VT.LOD_RANK_TABLE),
                       ("places", VT.PLACE_LIST)):
        _var(b, name, kind=kind)
    reader = _var(b, "reader", kind=VT.READER)
    lt = reader.type.reader.lod_tensor.add(lod_level=1)
    lt.tensor.data_type = VT.FP32
    lt.tensor.dims.extend([-1, 3])
    data = _bytes(desc)
    prog = fj.Program.parse(data)
    assert prog.serialize() == data
    assert prog.global_block().var("reader").type == VT.READER
    prog.clone(for_test=True)
    str(prog)


# -- strings that are not UTF-8 --------------------------------------------------------------------
def _set_bad(desc, where: str) -> None:
    b = desc.blocks[0]
    bad = b"bad\xff\xfe"
    if where == "variable name":
        b.vars[1].name = bad
    elif where == "op type":
        b.ops[0].type = bad
    elif where == "slot name":
        b.ops[0].inputs[0].parameter = bad
    elif where == "argument":
        b.ops[0].outputs[0].arguments[0] = bad
    elif where == "attribute name":
        b.ops[0].attrs[0].name = bad
    elif where == "attribute string":
        b.ops[0].attrs.add(name=b"data_format", type=2, s=bad)
    elif where == "op_callstack":
        b.ops[0].attrs[1].strings[1] = bad
    elif where == "var attribute":
        b.vars[0].attrs.add(name=b"tag", type=2, s=bad)
    elif where == "op_version_map":
        desc.op_version_map.pair.add(op_name=bad).op_version.version = 1


@pytest.mark.parametrize("where, expected", [
    ("variable name", "the variable's name b'bad\\xff\\xfe' is not valid UTF-8"),
    ("op type", "block 0, op 0 (b'bad\\xff\\xfe'): the op type"),
    ("slot name", "block 0, op 0 ('relu'): the input slot name"),
    ("argument", "block 0, op 0 ('relu'), output 'Out': the variable name"),
    ("attribute name", "block 0, op 0 ('relu'): an attribute name"),
    ("attribute string", "block 0, op 0 ('relu'), attribute 'data_format': its string value"),
    ("op_callstack", "attribute 'op_callstack': string [1]"),
    ("var attribute", "variable 'x', attribute 'tag': its string value"),
    ("op_version_map", "op_version_map.pair[0]: op_name"),
])
def test_invalid_utf8_is_refused_naming_the_field(where, expected):
    # Was UnicodeDecodeError at serialize / clone (proto2 strings parse into bytes).
    desc = _loose()
    _set_bad(desc, where)
    error = _refused(loose.encode(desc), expected, "not valid UTF-8")
    str(error)  # the message itself formats


# -- the block tree --------------------------------------------------------------------------------
def _parse_quickly(data: bytes, *fragments: str) -> None:
    start = time.perf_counter()
    _refused(data, *fragments)
    assert time.perf_counter() - start < 2.0


def test_block_that_is_its_own_parent():
    # Hung Block.var lookups forever.
    desc = _sub_blocks(_desc(), [0, 0])
    desc.blocks[2].parent_idx = 2
    _parse_quickly(_bytes(desc), "block 2", "cycle", "2 -> 2")


def test_blocks_whose_parents_form_a_cycle():
    desc = _sub_blocks(_desc(), [0, 2, 1])
    _parse_quickly(_bytes(desc), "cycle", "never reaches block 0")


@pytest.mark.parametrize("parent", [3, 99, -2, 2**31 - 1])
def test_parent_out_of_range(parent):
    desc = _sub_blocks(_desc(), [0, 0])
    desc.blocks[1].parent_idx = parent
    _refused(_bytes(desc), "block 1", f"parent_idx {parent}")


def test_block_zero_must_be_the_root():
    desc = _sub_blocks(_desc(), [0])
    desc.blocks[0].parent_idx = 1
    _refused(_bytes(desc), "block 0 is the root block", "parent_idx -1")
    desc.blocks[0].parent_idx = -1
    desc.blocks[1].parent_idx = -1
    _refused(_bytes(desc), "block 1", "only block 0 may be a root")


def test_block_idx_must_match_its_position():
    desc = _sub_blocks(_desc(), [0, 0])
    desc.blocks[1].idx = 2
    _refused(_bytes(desc), "block 1", "BlockDesc.idx is 2")


def test_forward_block_out_of_range():
    desc = _sub_blocks(_desc(), [0])
    desc.blocks[1].forward_block_idx = 5
    _refused(_bytes(desc), "block 1", "forward_block_idx 5")


@pytest.mark.parametrize("kind, value, fragment", [
    (A.BLOCK, 7, "names block 7, but the program has 3 block(s)"),
    (A.BLOCK, 0, "names block 0, whose parent is block -1"),
    (A.BLOCK, 2, "names block 2, whose parent is block 1"),
    (A.BLOCKS, [1, 9], "names block 9"),
    (A.BLOCK, -1, "names block -1"),
])
def test_block_attributes_name_child_blocks(kind, value, fragment):
    desc = _sub_blocks(_desc(), [0, 1])
    # An op fluidjax does not know (a registered one would refuse a BLOCKS value for its BLOCK
    # attribute first): the block structure is checked for every op.
    _op(desc.blocks[0], "custom_block_op", {"Input": ["x"]}, {"Out": ["y"]}, sub_block=(kind, value))
    _refused(_bytes(desc), "block 0, op 1 ('custom_block_op'), attribute 'sub_block'", fragment)


# -- variables --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dims", [[-4, 4], [-2, -(2**40)], [-(2**63), 4]])
def test_dims_below_minus_one_are_unknown_and_kept_as_written(dims):
    """Paddle writes products of unknown dims ([-4] for instance_norm's SavedMean of a [-1, 4]
    input; tests/test_layers_nn.py parses such a program): read as -1, written back as they were."""
    desc = _desc()
    for v in desc.blocks[0].vars:
        tensor = v.type.lod_tensor.tensor
        del tensor.dims[:]
        tensor.dims.extend(dims)
    data = _bytes(desc)
    prog = fj.Program.parse(data)
    assert prog.global_block().var("y").shape == tuple(-1 if d < 0 else d for d in dims)
    assert prog.serialize() == data
    assert prog.clone().serialize() == data
    assert fj.infer_shapes(prog, {"x": (2, 4)})["y"] == (2, 4)
    prog.global_block().var("y").shape = (-1, 4)  # changed after parsing: written as it is now
    assert list(fj.Program.parse(prog.serialize()).global_block().var("y").shape) == [-1, 4]


def test_negative_lod_level():
    desc = _desc()
    desc.blocks[0].vars[0].type.lod_tensor.lod_level = -1
    _refused(_bytes(desc), "variable 'x'", "lod_level -1 is negative")


def test_huge_dims_parse_and_never_allocate():
    desc = _desc()
    for v in desc.blocks[0].vars:
        del v.type.lod_tensor.tensor.dims[:]
        v.type.lod_tensor.tensor.dims.extend([-1, 2**40, 2**40])
    data = _bytes(desc)
    prog = fj.Program.parse(data)
    assert prog.serialize() == data
    assert prog.clone().global_block().var("y").shape == (-1, 2**40, 2**40)
    shapes = fj.infer_shapes(prog, {"x": (2, 2**40, 2**40)})  # pure metadata: nothing allocated
    assert shapes["y"] == (2, 2**40, 2**40)
    assert str(prog)


def test_duplicate_variable():
    desc = _desc()
    _var(desc.blocks[0], "x")
    _refused(_bytes(desc), "block 0, variable 'x'", "declared twice", "vars[0] and vars[2]")


def test_root_op_naming_an_undeclared_variable():
    desc = _desc()
    desc.blocks[0].ops[0].inputs[0].arguments[0] = "ghost"
    _refused(_bytes(desc), "block 0, op 0 ('relu'), input 'X'", "'ghost' is not declared in block 0")


def test_empty_var_name_marker_is_fine():
    desc = _desc()
    desc.blocks[0].ops[0].outputs.add(parameter="Extra", arguments=["@EMPTY@"])
    fj.Program.parse(_bytes(desc))


def test_sub_block_op_naming_an_undeclared_variable_fails_at_shape_inference():
    # Paddle's grad sub-blocks name their forward sub-block's variables: this must parse.
    desc = _sub_blocks(_desc(), [0])
    _op(desc.blocks[1], "relu", {"X": ["from_a_sibling"]}, {"Out": ["y"]})
    prog = fj.Program.parse(_bytes(desc))
    with pytest.raises(fj.VariableNotFoundError) as info:
        fj.infer_shapes(prog, {}, block_idx=1)
    assert "block 1, op 0" in str(info.value) and "'from_a_sibling'" in str(info.value)


# -- attributes ------------------------------------------------------------------------------------
def test_op_role_of_the_wrong_kind():
    # Was ValueError: invalid literal for int() in clone(for_test=True).
    desc = _desc()
    role = desc.blocks[0].ops[0].attrs[0]
    role.type, role.s = A.STRING, "backward"
    _refused(_bytes(desc), "block 0, op 0 ('relu'), attribute 'op_role'", "kind string", "int")


def test_op_callstack_of_the_wrong_kind():
    desc = _desc()
    stack = desc.blocks[0].ops[0].attrs[1]
    stack.type, stack.i = A.INT, 3
    _refused(_bytes(desc), "attribute 'op_callstack'", "strings")


def test_registered_op_attribute_of_the_wrong_kind():
    desc = _desc()
    b = desc.blocks[0]
    _var(b, "w", dims=[4, 3], persistable=True)
    _var(b, "z", dims=[-1, 3])
    _op(b, "mul", {"X": ["y"], "Y": ["w"]}, {"Out": ["z"]}, x_num_col_dims=(A.STRING, "one"))
    _refused(_bytes(desc), "block 0, op 1 ('mul'), attribute 'x_num_col_dims'", "kind string", "declares it int", "accepted kinds: bool, int, long")


def test_compatible_attribute_kinds_parse():
    """Paddle writes long for int, bool for int, ints for longs and empty lists of any kind."""
    desc = _desc()
    b = desc.blocks[0]
    _var(b, "w", dims=[4, 3], persistable=True)
    _var(b, "z", dims=[-1, 3])
    _op(b, "mul", {"X": ["y"], "Y": ["w"]}, {"Out": ["z"]}, x_num_col_dims=(A.LONG, 1), y_num_col_dims=(A.BOOLEAN, True))
    _var(b, "r", dims=[-1, 3])
    _op(b, "reshape2", {"X": ["z"]}, {"Out": ["r"]}, shape=(A.INTS, [-1, 3]))
    assert registry.get("mul").attrs["x_num_col_dims"].kind == "int"
    assert registry.get("reshape2").attrs["shape"].kind == "ints"
    data = _bytes(desc)
    prog = fj.Program.parse(data)
    assert prog.serialize() == data
    assert fj.infer_shapes(prog, {"x": (2, 4)})["r"] == (2, 3)
    shape = b.ops[-1].attrs[-1]
    shape.type = A.LONGS  # ints written as longs
    shape.longs.extend(shape.ints)
    shape.ClearField("ints")
    _op(b, "transpose2", {"X": ["z"]}, {"Out": ["r"]}, axis=(A.STRINGS, []))  # an empty list of another kind
    data = _bytes(desc)
    assert fj.Program.parse(data).serialize() == data


def test_unregistered_op_parses_and_fails_typed_later():
    desc = _desc()
    _op(desc.blocks[0], "my_custom_op", {"X": ["x"]}, {"Out": ["y"]}, anything=(A.STRING, "goes"))
    data = _bytes(desc)
    prog = fj.Program.parse(data)
    assert prog.serialize() == data
    with pytest.raises(fj.UnregisteredOpError) as info:
        fj.infer_shapes(prog, {"x": (2, 4)})
    assert "'my_custom_op'" in str(info.value) and "block 0, op 1" in str(info.value)


def test_shape_rule_failure_names_block_op_and_type():
    desc = _desc()
    b = desc.blocks[0]
    _var(b, "w", dims=[4, 3], persistable=True)
    _var(b, "z", dims=[-1, 3])
    _op(b, "mul", {"X": ["y"], "Y": ["w"]}, {"Out": ["z"]}, x_num_col_dims=(A.INT, 7))
    prog = fj.Program.parse(_bytes(desc))
    with pytest.raises(fj.ShapeError) as info:
        fj.infer_shapes(prog, {"x": (2, 4)})
    assert "'mul' (block 0, op 1)" in str(info.value)


def test_op_missing_its_input_is_a_shape_error():
    desc = _desc()
    del desc.blocks[0].ops[0].inputs[:]
    prog = fj.Program.parse(_bytes(desc))
    with pytest.raises(fj.ShapeError) as info:
        fj.infer_shapes(prog, {"x": (2, 4)})
    assert "'relu' (block 0, op 0)" in str(info.value)


def test_parsed_program_runs_and_bad_feeds_are_typed():
    prog = fj.Program.parse(_bytes(_desc()))
    exe = fj.Executor()
    (y,) = exe.run(prog, feed={"x": -np.ones((2, 4), np.float32)}, fetch_list=["y"], scope=fj.Scope())
    assert (y == 0).all()
    with pytest.raises(fj.FeedError):
        exe.run(prog, feed={"x": np.ones((2, 5), np.float32)}, fetch_list=["y"], scope=fj.Scope())


# -- Paddle's own programs stay loadable ------------------------------------------------------------
def test_paddle_control_flow_program_parses_byte_for_byte():
    """A Paddle 2.6.2 program with while, cond, their backward (whose grad sub-blocks name the
    forward sub-block's variables) and Adam: it parses and re-serializes to the same bytes."""
    from fuzz import seeds

    data = seeds.paddle_seed().main
    prog = fj.Program.parse(data)
    assert prog.serialize() == data
    assert prog.num_blocks == 7
    prog.clone(for_test=True).serialize()
    shapes = fj.infer_shapes(prog, {"x": (2, 4)})          # through while, cond and their grads
    assert shapes["x@GRAD"] == (2, 4) and shapes["fc_0.w_0@GRAD"] == (4, 4) and shapes["mean_1.tmp_0"] == ()
