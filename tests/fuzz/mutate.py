"""Mutant ``i`` of a seed: byte-level and structure-aware mutations, reproducible from ``(seed, i)``.

:func:`mutant` draws everything from ``random.Random(f"{seed}:{i}")``, so the same seed bytes
and index always give the same mutant. About half the mutants are structure-aware: the seed is
decoded into the loose schema (:mod:`fuzz.loose`), one to three targeted or generic mutations
are applied, and it is re-encoded (required fields may be left out). The rest are byte-level
(bit flips, truncations, insertions, overwrites, deletions, duplicated chunks, splices with
another seed), and some are both.
"""

from __future__ import annotations

import random
from typing import Callable

from google.protobuf.descriptor import FieldDescriptor as FD

from . import loose

# AttrType numbers (wire facts) and a few VarType.Type numbers.
INT, FLOAT, STRING, INTS, FLOATS, STRINGS, BOOLEAN, BOOLEANS, BLOCK, LONG, BLOCKS, LONGS = range(12)
FLOAT64S, VAR, VARS, FLOAT64, SCALAR, SCALARS = range(12, 18)
LOD_TENSOR, SELECTED_ROWS, LOD_TENSOR_ARRAY, READER = 7, 8, 13, 15

BAD_UTF8 = [b"\xff", b"\xc3\x28", b"ab\xed\xa0\x80", b"\xe2\x82", b"\xc0\xaf", b"x\x80y", b"\xf8\x88\x80\x80\x80"]
INTERESTING_INTS = [-1, 0, 1, 2, 3, -2, 7, 13, 15, 17, 18, 25, 99, 2**31 - 1, -(2**31), 2**40, -(2**40), 2**62,
                    2**63 - 1, -(2**63)]
INTERESTING_FLOATS = [float("nan"), float("inf"), float("-inf"), 1e300, -0.0, 1e-45, 3.0e38]
# Attribute values that stress shape rules: axes, counts and shapes out of range.
STRESS_INTS = [-1, 0, 1, 2, 5, -100, 100, 2**31 - 1, -(2**31)]
OP_TYPES = ["mul", "softmax", "elementwise_add", "reshape2", "split", "concat", "transpose2", "slice",
            "fill_constant", "uniform_random", "gaussian_random", "range", "expand_v2", "tile", "pad",
            "one_hot_v2", "top_k_v2", "stack", "unstack", "gather", "conv2d", "pool2d", "batch_norm",
            "layer_norm", "cross_entropy", "mean", "reduce_sum", "sgd", "adam", "matmul_v2", "squeeze2",
            "unsqueeze2", "flatten_contiguous_range", "cast", "fill_constant_batch_size_like", "randint",
            "while", "conditional_block", "no_such_op", "", "mul_grad", "softmax_grad", "lookup_table_v2"]
NAMES = [b"@EMPTY@", b"", b"no_such_var", b"x", b"feed", b"fetch", b"op_role", b"op_callstack", b"sub_block"]


# -- walking a loose message ----------------------------------------------------------------------
def _fields(msg, out: list, path: str = "") -> list:
    """Every (message, field descriptor, path) of ``msg``'s tree."""
    for fd in msg.DESCRIPTOR.fields:
        here = f"{path}.{fd.name}"
        out.append((msg, fd, here))
        if fd.type == FD.TYPE_MESSAGE:
            if fd.is_repeated:
                for i, sub in enumerate(getattr(msg, fd.name)):
                    _fields(sub, out, f"{here}[{i}]")
            elif msg.HasField(fd.name):
                _fields(getattr(msg, fd.name), out, here)
    return out


def _pick(rng: random.Random, msg, wanted: Callable) -> tuple | None:
    """A random (message, field descriptor, path) with ``wanted(message, fd)``, found by a random
    walk down the tree (much cheaper than listing every field of a big program)."""
    for _ in range(30):
        m, path = msg, ""
        while True:
            here = [fd for fd in m.DESCRIPTOR.fields if wanted(m, fd)]
            subs = []
            for fd in m.DESCRIPTOR.fields:
                if fd.type != FD.TYPE_MESSAGE:
                    continue
                if fd.is_repeated:
                    if len(getattr(m, fd.name)):
                        subs.append(fd)
                elif m.HasField(fd.name):
                    subs.append(fd)
            if here and (not subs or rng.random() < 0.4):
                fd = rng.choice(here)
                return m, fd, f"{path}.{fd.name}"
            if not subs:
                break
            fd = rng.choice(subs)
            if fd.is_repeated:
                items = getattr(m, fd.name)
                i = rng.randrange(len(items))
                m, path = items[i], f"{path}.{fd.name}[{i}]"
            else:
                m, path = getattr(m, fd.name), f"{path}.{fd.name}"
    return None


def _ops(desc) -> list:
    return [(bi, k, op) for bi, b in enumerate(desc.blocks) for k, op in enumerate(b.ops)]


def _vars(desc) -> list:
    return [(bi, v) for bi, b in enumerate(desc.blocks) for v in b.vars]


def _attrs(desc) -> list:
    return [(bi, op, a) for bi, _, op in _ops(desc) for a in op.attrs]


def _tensor(var):
    t = var.type
    for holder in ("lod_tensor", "tensor_array"):
        if t.HasField(holder):
            return getattr(t, holder).tensor, getattr(t, holder)
    if t.HasField("selected_rows"):
        return t.selected_rows, None
    return None, None


def _bad_utf8(rng: random.Random, text: bytes) -> bytes:
    bad = rng.choice(BAD_UTF8)
    where = rng.randrange(len(text) + 1)
    return text[:where] + bad + text[where:]


# -- targeted mutations (each returns a description, or None when it does not apply) -------------
def m_parent(rng, desc, others):
    n = len(desc.blocks)
    if n < 2 or rng.random() < 0.2:
        b = desc.blocks[0]
        b.parent_idx = rng.choice([0, 1, -2, n, 2**31 - 1])
        return f"block 0 parent_idx -> {b.parent_idx}"
    i = rng.randrange(1, n)
    choice = rng.randrange(4)
    if choice == 0:
        desc.blocks[i].parent_idx = i
        return f"block {i} is its own parent"
    if choice == 1 and n > 2:
        j = rng.choice([k for k in range(1, n) if k != i])
        desc.blocks[i].parent_idx, desc.blocks[j].parent_idx = j, i
        return f"blocks {i} and {j} are each other's parent"
    if choice == 2:
        desc.blocks[i].parent_idx = rng.choice([n, n + 3, -2, -1, 2**31 - 1, -(2**31)])
        return f"block {i} parent_idx -> {desc.blocks[i].parent_idx}"
    desc.blocks[i].parent_idx = rng.randrange(n)
    return f"block {i} parent_idx -> {desc.blocks[i].parent_idx}"


def m_block_list(rng, desc, others):
    n = len(desc.blocks)
    choice = rng.randrange(5)
    if choice == 0:
        i = rng.randrange(n)
        desc.blocks[i].idx = rng.choice([i + 1, i - 1, -1, 2**31 - 1])
        return f"block {i} idx -> {desc.blocks[i].idx}"
    if choice == 1 and n > 1:
        i = rng.randrange(1, n)
        del desc.blocks[i]
        return f"block {i} deleted"
    if choice == 2 and n > 1:
        i, j = rng.sample(range(n), 2)
        a, b = type(desc.blocks[i])(), type(desc.blocks[j])()
        a.CopyFrom(desc.blocks[i])
        b.CopyFrom(desc.blocks[j])
        desc.blocks[i].CopyFrom(b)
        desc.blocks[j].CopyFrom(a)
        return f"blocks {i} and {j} swapped"
    if choice == 3:
        b = desc.blocks.add()
        b.CopyFrom(desc.blocks[rng.randrange(n)])
        b.idx, b.parent_idx = n, rng.choice([0, n, n - 1])
        return f"block {n} added as a copy"
    i = rng.randrange(n)
    desc.blocks[i].forward_block_idx = rng.choice([i, n, -2, 0, 2**31 - 1])
    return f"block {i} forward_block_idx -> {desc.blocks[i].forward_block_idx}"


def m_block_attr(rng, desc, others):
    n = len(desc.blocks)
    targets = [n, n + 5, -1, 0, 2**31 - 1, -(2**31)] + list(range(n))
    attrs = [(bi, op, a) for bi, op, a in _attrs(desc) if a.type in (BLOCK, BLOCKS)]
    if attrs and rng.random() < 0.7:
        bi, op, a = rng.choice(attrs)
        if a.type == BLOCK:
            a.block_idx = rng.choice(targets + [bi])
            return f"BLOCK attribute {a.name!r} -> {a.block_idx}"
        a.blocks_idx.append(rng.choice(targets + [bi]))
        return f"BLOCKS attribute {a.name!r} -> {list(a.blocks_idx)}"
    ops = _ops(desc)
    if not ops:
        return None
    bi, _, op = rng.choice(ops)
    a = op.attrs.add(name=b"sub_block", type=rng.choice([BLOCK, BLOCKS]))
    if a.type == BLOCK:
        a.block_idx = rng.choice(targets)
    else:
        a.blocks_idx.extend(rng.sample(targets, 2))
    return f"new block attribute on a {op.type!r} op of block {bi}"


def m_utf8(rng, desc, others):
    if rng.random() < 0.4:  # a string list: op_callstack, op_role_var, strings attributes
        found = _pick(rng, desc, lambda m, fd: fd.type == FD.TYPE_BYTES and fd.is_repeated and len(getattr(m, fd.name)))
        if found:
            m, fd, p = found
            values = getattr(m, fd.name)
            i = rng.randrange(len(values))
            values[i] = _bad_utf8(rng, values[i])
            return f"invalid UTF-8 in {p}[{i}]"
    found = _pick(rng, desc, lambda m, fd: fd.type == FD.TYPE_BYTES and not fd.is_repeated)
    if not found:
        return None
    m, fd, p = found
    setattr(m, fd.name, _bad_utf8(rng, getattr(m, fd.name)))
    return f"invalid UTF-8 in {p}"


def m_dims(rng, desc, others):
    tensors = [(v, *_tensor(v)) for _, v in _vars(desc)]
    tensors = [t for t in tensors if t[1] is not None]
    if not tensors:
        return None
    var, tensor, holder = rng.choice(tensors)
    choice = rng.randrange(5)
    if choice == 0 and tensor.dims:
        i = rng.randrange(len(tensor.dims))
        tensor.dims[i] = rng.choice([-2, -3, -(2**40), -(2**63), 0])
    elif choice == 1:
        del tensor.dims[:]
        tensor.dims.extend(rng.choice([[2**40, 2**40], [2**62, 2], [2**63 - 1], [-1, 2**40, 2**40], [2**31, 2**31]]))
    elif choice == 2:
        tensor.dims.extend([rng.choice([1, 2, -1, 2**20]) for _ in range(rng.choice([1, 3, 40]))])
    elif choice == 3 and holder is not None:
        holder.lod_level = rng.choice([-1, -(2**31), 3, 2**31 - 1])
    else:
        del tensor.dims[:]
    return f"dims/lod of variable {var.name!r} -> {list(tensor.dims)}"


def m_required(rng, desc, others):
    found = _pick(rng, desc, lambda m, fd: fd.is_required and m.HasField(fd.name))
    if not found:
        return None
    m, fd, p = found
    m.ClearField(fd.name)
    return f"required field {p} cleared"


def m_enum(rng, desc, others):
    choice = rng.randrange(4)
    if choice == 0:
        attrs = _attrs(desc)
        if attrs:
            _, op, a = rng.choice(attrs)
            a.type = rng.choice([18, 19, 99, -1, 2**31 - 1, 1000])
            return f"attribute {a.name!r} type -> unknown {a.type}"
    variables = _vars(desc)
    if not variables:
        return None
    _, var = rng.choice(variables)
    if choice == 1:
        var.type.type = rng.choice([16, 32, 99, -1, 0, 5, READER, 9, 10, 11, 12, 14, 17, 18, 25, 26, 27, 30])
        return f"variable {var.name!r} type.type -> {var.type.type}"
    tensor, _ = _tensor(var)
    if tensor is None:
        return None
    tensor.data_type = rng.choice([7, 8, 9, 10, 11, 12, 13, 14, READER, 16, 17, 18, 19, 25, 26, 32, 99, -1])
    return f"variable {var.name!r} data_type -> {tensor.data_type}"


_VALUE_FIELD = {INT: "i", FLOAT: "f", STRING: "s", INTS: "ints", FLOATS: "floats", STRINGS: "strings",
                BOOLEAN: "b", BOOLEANS: "bools", BLOCK: "block_idx", LONG: "l", BLOCKS: "blocks_idx",
                LONGS: "longs", FLOAT64S: "float64s", VAR: "var_name", VARS: "vars_name", FLOAT64: "float64",
                SCALAR: "scalar", SCALARS: "scalars"}


def _fill(rng, a, kind: int) -> None:
    """Give attribute ``a`` a plausible value of ``kind`` (keeping the old fields)."""
    field = _VALUE_FIELD[kind]
    if kind in (INT, LONG, BLOCK):
        setattr(a, field, rng.choice([0, 1, -1, 3]))
    elif kind in (FLOAT, FLOAT64):
        setattr(a, field, rng.choice([0.5, -2.0, 1e30]))
    elif kind in (STRING, VAR):
        setattr(a, field, rng.choice([b"abc", b"", b"x"]))
    elif kind == BOOLEAN:
        a.b = True
    elif kind in (INTS, LONGS, BLOCKS):
        getattr(a, field).extend(rng.choice([[1, 2], [], [-1]]))
    elif kind in (FLOATS, FLOAT64S):
        getattr(a, field).extend([0.5, 2.0])
    elif kind in (STRINGS, VARS):
        getattr(a, field).extend([b"abc", b"x"])
    elif kind == BOOLEANS:
        a.bools.extend([True, False])
    elif kind == SCALAR:
        a.scalar.type = rng.choice([1, 2, 3, 4])
    else:
        a.scalars.add(type=rng.choice([1, 2, 3]))


def m_attr_kind(rng, desc, others):
    attrs = _attrs(desc)
    if not attrs:
        return None
    _, op, a = rng.choice(attrs)
    if rng.random() < 0.3:  # the framework attributes fluidjax reads itself
        named = [x for x in attrs if x[2].name in (b"op_role", b"op_callstack", b"op_role_var", b"op_namescope")]
        if named:
            _, op, a = rng.choice(named)
    kind = rng.randrange(18)
    a.type = kind
    if rng.random() < 0.7:
        _fill(rng, a, kind)
    return f"attribute {a.name!r} of a {op.type!r} op -> kind {kind}"


def m_attr_value(rng, desc, others):
    attrs = [x for x in _attrs(desc) if x[2].type in (INT, LONG, INTS, LONGS, FLOAT, FLOATS, FLOAT64, BOOLEAN, STRING)]
    if not attrs:
        return None
    _, op, a = rng.choice(attrs)
    if a.type in (INT, LONG):
        setattr(a, "i" if a.type == INT else "l", rng.choice(STRESS_INTS))
    elif a.type in (INTS, LONGS):
        values = getattr(a, "ints" if a.type == INTS else "longs")
        choice = rng.randrange(3)
        if choice == 0 and values:
            values[rng.randrange(len(values))] = rng.choice(STRESS_INTS)
        elif choice == 1:
            del values[:]
        else:
            values.extend(rng.choice(STRESS_INTS) for _ in range(rng.choice([1, 2, 9])))
    elif a.type in (FLOAT, FLOAT64):
        setattr(a, "f" if a.type == FLOAT else "float64", rng.choice([float("nan"), float("inf"), -1.0, 0.0]))
    elif a.type == FLOATS:
        a.floats.append(float("nan"))
    elif a.type == BOOLEAN:
        a.b = not a.b
    else:
        a.s = rng.choice([b"", b"NHWC", b"bogus", b"float64", b"x" * 1000])
    return f"attribute {a.name!r} of a {op.type!r} op -> a stress value"


def m_args(rng, desc, others):
    ops = _ops(desc)
    if not ops:
        return None
    bi, k, op = rng.choice(ops)
    slots = list(op.inputs) + list(op.outputs)
    names = [v.name for _, v in _vars(desc)] + NAMES
    choice = rng.randrange(6)
    if choice == 0 and slots:
        slot = rng.choice(slots)
        if slot.arguments:
            slot.arguments[rng.randrange(len(slot.arguments))] = rng.choice(names)
        else:
            slot.arguments.append(rng.choice(names))
        return f"argument of block {bi} op {k} -> another name"
    if choice == 1 and slots:
        rng.choice(slots).arguments.append(rng.choice(names))
        return f"extra argument in block {bi} op {k}"
    if choice == 2 and slots:
        del rng.choice(slots).arguments[:]
        return f"emptied a slot of block {bi} op {k}"
    if choice == 3 and op.inputs:
        del op.inputs[rng.randrange(len(op.inputs))]
        return f"removed an input slot of block {bi} op {k}"
    if choice == 4 and op.outputs:
        del op.outputs[rng.randrange(len(op.outputs))]
        return f"removed an output slot of block {bi} op {k}"
    slot = (op.inputs if rng.random() < 0.5 else op.outputs).add(parameter=rng.choice([b"X", b"Y", b"Bogus", b""]))
    slot.arguments.append(rng.choice(names))
    return f"new slot in block {bi} op {k}"


def m_op_type(rng, desc, others):
    ops = _ops(desc)
    if not ops:
        return None
    bi, k, op = rng.choice(ops)
    op.type = rng.choice(OP_TYPES).encode()
    return f"block {bi} op {k} type -> {op.type!r}"


def m_ops(rng, desc, others):
    ops = _ops(desc)
    if not ops:
        return None
    bi, k, op = rng.choice(ops)
    block = desc.blocks[bi]
    choice = rng.randrange(4)
    if choice == 0:
        del block.ops[k]
        return f"block {bi} op {k} deleted"
    if choice == 1:
        block.ops.add().CopyFrom(op)
        return f"block {bi} op {k} duplicated"
    if choice == 2 and len(block.ops) > 1:
        j = rng.randrange(len(block.ops))
        a, b = type(op)(), type(op)()
        a.CopyFrom(block.ops[k])
        b.CopyFrom(block.ops[j])
        block.ops[k].CopyFrom(b)
        block.ops[j].CopyFrom(a)
        return f"block {bi} ops {k} and {j} swapped"
    target = desc.blocks[rng.randrange(len(desc.blocks))]
    target.ops.add().CopyFrom(op)
    del block.ops[k]
    return f"block {bi} op {k} moved to another block"


def m_vars(rng, desc, others):
    variables = [(bi, i, v) for bi, b in enumerate(desc.blocks) for i, v in enumerate(b.vars)]
    if not variables:
        return None
    bi, i, var = rng.choice(variables)
    block = desc.blocks[bi]
    choice = rng.randrange(5)
    if choice == 0:
        block.vars.add().CopyFrom(var)
        return f"variable {var.name!r} declared twice"
    if choice == 1:
        del block.vars[i]
        return f"variable {var.name!r} deleted"
    if choice == 2:
        var.name = rng.choice([v.name for _, _, v in variables] + NAMES)
        return f"variable renamed to {var.name!r}"
    if choice == 3:
        for flag in ("persistable", "is_parameter", "need_check_feed", "stop_gradient"):
            if rng.random() < 0.5:
                setattr(var, flag, not getattr(var, flag))
        return f"flags of variable {var.name!r} toggled"
    a = var.attrs.add(name=rng.choice([b"tag", b"\xff"]), type=rng.choice([INT, STRING, INTS, FLOAT, 99]))
    if rng.random() < 0.5:  # VarDesc.Attr holds i, s or ints, whatever its type says
        a.i = rng.choice([0, -1, 2**31 - 1])
    else:
        a.s = rng.choice([b"", b"tag", b"\xc3\x28"])
    return f"VarDesc attribute added to {var.name!r}"


def m_generic(rng, desc, others):
    """Any field of the tree: an interesting value, a clear, or a repeated element added/removed."""
    found = _pick(rng, desc, lambda m, fd: True)
    if not found:
        return None
    m, fd, path = found
    name = fd.name
    repeated = fd.is_repeated
    if rng.random() < 0.15:
        m.ClearField(name)
        return f"{path} cleared"
    if fd.type == FD.TYPE_MESSAGE:
        if repeated:
            items = getattr(m, name)
            if items and rng.random() < 0.5:
                items.add().CopyFrom(items[rng.randrange(len(items))])
                return f"{path}: an element duplicated"
            if items:
                del items[rng.randrange(len(items))]
                return f"{path}: an element deleted"
            items.add()
            return f"{path}: an empty element added"
        getattr(m, name).SetInParent()
        return f"{path} set (empty)"
    value: object
    if fd.type == FD.TYPE_BYTES:
        value = rng.choice([_bad_utf8(rng, b"name"), b"", b"x" * rng.choice([1, 300]), *NAMES])
    elif fd.type == FD.TYPE_BOOL:
        value = rng.random() < 0.5
    elif fd.type in (FD.TYPE_FLOAT, FD.TYPE_DOUBLE):
        value = rng.choice(INTERESTING_FLOATS)
    else:
        value = rng.choice(INTERESTING_INTS)
        if fd.type == FD.TYPE_INT32:
            value = max(-(2**31), min(2**31 - 1, value))
    try:
        if repeated:
            items = getattr(m, name)
            if items and rng.random() < 0.6:
                items[rng.randrange(len(items))] = value
            else:
                items.append(value)
        else:
            setattr(m, name, value)
    except (ValueError, TypeError):
        return None
    return f"{path} -> {value!r:.40}"


STRUCTURE: list[tuple[Callable, int]] = [
    (m_parent, 6), (m_block_list, 4), (m_block_attr, 6), (m_utf8, 8), (m_dims, 6), (m_required, 6),
    (m_enum, 6), (m_attr_kind, 8), (m_attr_value, 10), (m_args, 8), (m_op_type, 6), (m_ops, 4),
    (m_vars, 6), (m_generic, 14),
]
_S_FUNCS = [f for f, _ in STRUCTURE]
_S_WEIGHTS = [w for _, w in STRUCTURE]


# -- byte-level mutations -------------------------------------------------------------------------
def _bytes_mutation(rng: random.Random, data: bytearray, others: list[bytes]) -> tuple[bytearray, str]:
    n = len(data)
    choice = rng.randrange(8)
    if n == 0:
        choice = 2
    if choice == 0:
        k = rng.choice([1, 1, 2, 4, 8])
        for _ in range(k):
            i = rng.randrange(n)
            data[i] ^= 1 << rng.randrange(8)
        return data, f"{k} bit flip(s)"
    if choice == 1:
        cut = rng.randrange(n)
        return data[:cut], f"truncated to {cut} bytes"
    if choice == 2:
        i = rng.randrange(n + 1)
        data[i:i] = bytes(rng.randrange(256) for _ in range(rng.choice([1, 2, 5, 16])))
        return data, f"random bytes inserted at {i}"
    if choice == 3:
        i = rng.randrange(n)
        for j in range(i, min(n, i + rng.choice([1, 2, 4, 8]))):
            data[j] = rng.choice([0x00, 0xFF, 0x80, 0x7F, rng.randrange(256)])
        return data, f"bytes overwritten at {i}"
    if choice == 4:
        i = rng.randrange(n)
        j = min(n, i + rng.choice([1, 2, 7, 64, 1000]))
        del data[i:j]
        return data, f"bytes {i}:{j} deleted"
    if choice == 5:
        i = rng.randrange(n)
        j = min(n, i + rng.choice([2, 8, 64, 512]))
        k = rng.randrange(n + 1)
        data[k:k] = data[i:j]
        return data, f"bytes {i}:{j} copied to {k}"
    if choice == 6 and others:
        other = rng.choice(others)
        i, j = rng.randrange(n + 1), rng.randrange(len(other) + 1)
        return bytearray(data[:i] + other[j:]), f"spliced at {i} with another seed at {j}"
    # a length prefix or varint made large
    i = rng.randrange(n)
    data[i] = rng.choice([0xFF, 0x80, 0x7F, 0x01])
    return data, f"byte {i} -> {data[i]:#x}"


def mutant(seed_name: str, seeds: dict[str, bytes], index: int) -> tuple[bytes, list[str]]:
    """Mutant ``index`` of seed ``seed_name`` (``seeds`` maps every seed name to its bytes: splices
    take a partner from it) and the mutations that made it."""
    rng = random.Random(f"{seed_name}:{index}")
    data = seeds[seed_name]
    others = [v for k, v in sorted(seeds.items()) if k != seed_name]
    done: list[str] = []
    r = rng.random()
    if r < 0.6:
        desc = loose.parse(data)
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            mutation = rng.choices(_S_FUNCS, _S_WEIGHTS)[0]
            try:
                what = mutation(rng, desc, others)
            except (IndexError, ValueError):  # an earlier mutation left nothing for this one to change
                what = None
            if what:
                done.append(f"{mutation.__name__}: {what}")
        data = loose.encode(desc)
    if r >= 0.5:
        buf = bytearray(data)
        for _ in range(rng.choice([1, 1, 2, 4])):
            buf, what = _bytes_mutation(rng, buf, others)
            done.append(what)
        data = bytes(buf)
    return data, done
