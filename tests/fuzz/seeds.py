"""The fuzzer's seed programs, built the same way (and to the same bytes) in every process.

Each :class:`Seed` holds a serialized main program, the startup program that initialises its
parameters (or None), and what a run of it fetches. ``op_callstack`` paths are made relative to
the repository, so the bytes — and so every mutant — do not depend on where the checkout lives.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import fluidjax as fj
from fluidjax import layer
from fluidjax.ir import dtypes, registry
from fluidjax.ir.program import Operator
from fluidjax.proto import framework_pb2 as pb

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_T = registry.ATTR_TYPES


@dataclasses.dataclass(frozen=True)
class Seed:
    name: str
    main: bytes
    startup: bytes | None
    fetch: tuple[str, ...]


def _relative_callstacks(program: fj.Program) -> None:
    """Keep the innermost frame of this file only, with the repository path replaced: callers' frames
    (pytest's, a fixture's, the replay CLI's) would make the bytes depend on who built the seed."""
    for block in program.blocks:
        for op in block.ops:
            stack = op.attrs.get("op_callstack")
            if stack:
                pairs = [p for p in zip(stack[0::2], stack[1::2])  # ('  File "...", line N, in f', '    source')
                         if "fuzz" + os.sep + "seeds.py" in p[0]]
                op.attrs["op_callstack"] = [line.replace(REPO_ROOT, "<repo>") for line in pairs[-1]] if pairs else []


def _programs():
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 7
    return main, startup


def train_seed() -> Seed:
    """fc layers, cross entropy, backward and an Adam optimizer."""
    main, startup = _programs()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", input_size=6)
        label = layer.data("label", dims=1, dtype="int64")
        h = layer.fc(x, output_size=8, activation="relu")
        prob = layer.fc(h, output_size=3, activation="softmax")
        loss = layer.mean(layer.cross_entropy(prob, label))
        fj.optimizer.Adam(learning_rate=0.01).minimize(loss)
    _relative_callstacks(main)
    _relative_callstacks(startup)
    return Seed("train", main.serialize(), startup.serialize(), (loss.name, prob.name))


def _raw_op(block, type_, inputs, outputs, attrs):
    """An op of any type (registered or not), appended without schema checks or shape rules."""
    values = {name: value for name, (_, value) in attrs.items()}
    types = {name: _T[kind] for name, (kind, value) in attrs.items()}
    values["op_role"], types["op_role"] = 0, _T["int"]
    values["op_callstack"], types["op_callstack"] = ['  File "<repo>/tests/fuzz/seeds.py", line 1, in seed',
                                                     "    raw op"], _T["strings"]
    op = Operator(block, type_, {k: list(v) for k, v in inputs.items()}, {k: list(v) for k, v in outputs.items()},
                  values, types)
    block.ops.append(op)
    return op


def blocks_seed() -> Seed:
    """Sub-blocks (one nested in another) owned by conditional_block / while ops in block 0."""
    main, startup = _programs()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", input_size=4)
        cond = layer.fill_constant([1], "bool", True)
        g = main.global_block()
        counter = g.create_var("counter", (1,), "int64")
        y = g.create_var("y", (-1, 4), "float32")
        b1 = main.create_block()                     # block 1, child of 0
        t = b1.create_var("t", (-1, 4), "float32")
        b1.append_op("scale", {"X": x}, {"Out": t}, {"scale": 2.0})
        b1.append_op("relu", {"X": t}, {"Out": y})
        b3 = main.create_block()                     # block 2, child of 1
        u = b3.create_var("u", (-1, 4), "float32")
        b3.append_op("tanh", {"X": t}, {"Out": u})
        main.rollback()
        main.rollback()
        b2 = main.create_block()                     # block 3, child of 0
        b2.append_op("scale", {"X": counter}, {"Out": counter}, {"scale": 1.0, "bias": 1.0})
        _raw_op(b1, "while", {"X": [t.name], "Condition": [cond.name]}, {"Out": [u.name], "StepScopes": []},
                {"sub_block": ("block", b3.idx), "is_test": ("bool", False)})
        main.rollback()
        _raw_op(g, "conditional_block", {"Cond": [cond.name], "Input": [x.name]}, {"Out": [y.name], "Scope": []},
                {"sub_block": ("block", b1.idx), "is_scalar_condition": ("bool", True)})
        _raw_op(g, "while", {"X": [counter.name], "Condition": [cond.name]}, {"Out": [counter.name]},
                {"sub_block": ("block", b2.idx), "is_test": ("bool", False)})
        _raw_op(g, "select_blocks", {"X": [x.name]}, {"Out": [y.name]}, {"sub_blocks": ("blocks", [b1.idx, b2.idx])})
        out = layer.mean(y)
    _relative_callstacks(main)
    return Seed("blocks", main.serialize(), None, (out.name,))


def lod_seed() -> Seed:
    """Variables with LoD levels 1 and 2 (an embedding of word ids, a nested-sequence feature)."""
    main, startup = _programs()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        words = layer.data("words", shape=[1], dtype="int64", lod_level=1)
        emb = layer.embedding(words, size=[20, 5])
        para = layer.data("para", shape=[5], lod_level=2)
        s = layer.elementwise_add(layer.reshape(emb, [-1, 5]), para)
        h = layer.fc(s, output_size=3, activation="tanh")
        out = layer.mean(h)
    _relative_callstacks(main)
    _relative_callstacks(startup)
    return Seed("lod", main.serialize(), startup.serialize(), (out.name, h.name))


def _scalar(**kw) -> pb.Scalar:
    s = pb.Scalar(type=kw.pop("type"))
    for k, v in kw.items():
        if k == "c":
            s.c.r, s.c.i = v
        else:
            setattr(s, k, v)
    return s


EVERY_KIND = {
    "a_int": ("int", -3), "a_float": ("float", 0.5), "a_string": ("string", "hello"),
    "a_ints": ("ints", [1, -2, 3]), "a_floats": ("floats", [0.25, -1.0]), "a_strings": ("strings", ["a", "bc"]),
    "a_bool": ("bool", True), "a_bools": ("bools", [True, False]), "a_block": ("block", 1),
    "a_blocks": ("blocks", [1, 2]), "a_long": ("long", 2**40), "a_longs": ("longs", [2**40, -1]),
    "a_float64": ("float64", 1e-300), "a_float64s": ("float64s", [1.5, -2.25e300]), "a_var": ("var", "x"),
    "a_vars": ("vars", ["x", "y"]), "a_scalar": ("scalar", _scalar(type=pb.Scalar.FLOAT64, r=3.5)),
    "a_scalars": ("scalars", [_scalar(type=pb.Scalar.LONG, i=4), _scalar(type=pb.Scalar.BOOLEAN, b=True),
                              _scalar(type=pb.Scalar.COMPLEX128, c=(1.0, -1.0))]),
}
assert set(kind for kind, _ in EVERY_KIND.values()) == set(_T), "EVERY_KIND must cover every AttrType"


def attrs_seed() -> Seed:
    """Every attribute kind, on a registered op in block 0 and an unregistered one in a sub-block;
    variables of every kind fluidjax keeps as written (feed/fetch lists, a reader, step scopes,
    strings, a tensor array, selected rows); VarDesc attributes; version and op_version_map."""
    main, startup = _programs()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        g = main.global_block()
        x = layer.data("x", input_size=3)
        y = g.create_var("y", (-1, 3), "float32")
        g.create_var("feed", (), None, type=dtypes.FEED_MINIBATCH, persistable=True)
        g.create_var("fetch", (), None, type=dtypes.FETCH_LIST, persistable=True)
        g.create_var("scopes", (), None, type=dtypes.STEP_SCOPES)
        g.create_var("text", (), None, type=dtypes.STRING)
        g.create_var("arr", (-1, 3), "float32", type=dtypes.LOD_TENSOR_ARRAY)
        g.create_var("rows", (10, 3), "float32", type=dtypes.SELECTED_ROWS)
        reader = g.create_var("reader", (), None, type=15)
        vt = pb.VarType(type=pb.VarType.READER)
        lt = vt.reader.lod_tensor.add(lod_level=1)
        lt.tensor.data_type = pb.VarType.FP32
        lt.tensor.dims.extend([-1, 3])
        reader._raw_type = vt.SerializeToString(deterministic=True)
        x.desc_attrs = [("shard", _T["ints"], [0, 1]), ("tag", _T["string"], "input")]
        b1 = main.create_block()
        main.rollback()
        main.create_block()
        main.rollback()
        op = g.append_op("scale", {"X": x}, {"Out": y}, {"scale": 3.0, "bias": 0.5})
        for name, (kind, value) in EVERY_KIND.items():
            op.attrs[name] = value
            op.attr_types[name] = _T[kind]
        _raw_op(b1, "fuzz_every_attr", {"X": [x.name]}, {"Out": [y.name]},
                {k: v for k, v in EVERY_KIND.items() if k not in ("a_block", "a_blocks")})
        out = layer.mean(y)
    main.desc_version = 2006002
    main.op_version_map = [("scale", 1), ("mean", 0)]
    _relative_callstacks(main)
    return Seed("attrs", main.serialize(), None, (out.name, y.name))


def paddle_seed() -> Seed:
    """A program written by Paddle 2.6.2: a while loop and a cond, their backward, Adam."""
    if "jax" not in sys.modules:  # Paddle before JAX segfaults
        import jax  # noqa: F401
    import paddle

    from paddle.base import framework

    paddle.enable_static()
    framework._name_scope = framework.NameScope()  # name scopes count per process: start afresh
    main, startup = paddle.static.Program(), paddle.static.Program()
    main.random_seed = startup.random_seed = 7
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 4], "float32")
        x.stop_gradient = False
        h = paddle.static.nn.fc(x, 4)
        i = paddle.full([1], 0, "int64")
        n = paddle.full([1], 3, "int64")

        def body(i, h):
            return i + 1, paddle.static.nn.fc(h, 4, activation="tanh")

        i, h = paddle.static.nn.while_loop(lambda i, h: i < n, body, [i, h])
        y = paddle.static.nn.cond(paddle.mean(h) > 0, lambda: h * 2, lambda: h - 1)
        loss = paddle.mean(y)
        paddle.optimizer.Adam(0.01).minimize(loss)
    desc = pb.ProgramDesc.FromString(main.desc.serialize_to_string())
    site = os.path.dirname(os.path.dirname(paddle.__file__))
    for block in desc.blocks:
        for op in block.ops:
            for attr in op.attrs:
                if attr.name == "op_callstack":
                    lines = [s.replace(site, "<site-packages>").replace(REPO_ROOT, "<repo>") for s in attr.strings]
                    del attr.strings[:]
                    attr.strings.extend(lines)
    return Seed("paddle", desc.SerializeToString(deterministic=True), None, (loss.name,))


BUILDERS = {"train": train_seed, "blocks": blocks_seed, "lod": lod_seed, "attrs": attrs_seed,
            "paddle": paddle_seed}


def build_all(names=None) -> dict[str, Seed]:
    """The seeds by name (all of them, or ``names``)."""
    return {name: BUILDERS[name]() for name in (names or BUILDERS)}
