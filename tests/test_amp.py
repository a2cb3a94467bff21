"""Mixed precision (``fj.amp.decorate``, ``fluid.contrib.mixed_precision``) against Paddle 2.6.2.

Where the casts go: Paddle's own rewrite (``paddle.static.amp.decorate`` /
``fp16_utils.cast_model_to_fp16``) applied to the *same* forward program — ours serialized, parsed
by Paddle — must give the same ops, op for op, with the same variable names (Paddle's extra
``memcpy`` of the overflow flag to the CPU aside). Paddle is a CPU-only build here: it marks every
white-list op "unsupported" for bfloat16/float16 (no GPU kernels), and its rewrite would then
change nothing; the comparisons give its lists an empty ``unsupported_list``, which is what a
device with low-precision kernels (and fluidjax, whose XLA runs every op in any float type) has.

Running: this CPU has no bfloat16 matmul kernel in Paddle (no AVX512-BF16 for oneDNN; its CPU
``mul``/``matmul`` kernels are float32/float64), so Paddle runs the rewritten program with its
bfloat16 variables held in float32 and rounded to bfloat16 after every op that writes them (a
pair of Paddle ``cast`` ops — whose CPU kernel *truncates* to bfloat16, where XLA rounds to
nearest: Paddle's losses drift a little above ours), and the losses are compared with
bfloat16-sized tolerances; the same program with no rounding must give float32 training's losses
exactly. Float16's loss-scaling ops are checked against Paddle's kernels in the op table
(``tests/optable/loss_scaling_cases.py``); here, what a step that overflows does is checked against
NumPy's account of Paddle's ``update_loss_scaling``.
"""

from __future__ import annotations

import contextlib
import itertools
import re

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer
from fluidjax.ir import dtypes

LR = 0.003


# -- models ------------------------------------------------------------------------------------------
def mlp():
    x = layer.data("x", dims=8)
    y = layer.data("y", dims=1, dtype="int64")
    h = layer.fc(x, 16, activation="relu")
    p = layer.softmax(layer.fc(h, 4))
    return layer.mean(layer.cross_entropy(p, y))


def mlp_feed(rng, batch=6):
    return {"x": rng.uniform(-1, 1, (batch, 8)).astype("float32"),
            "y": rng.integers(0, 4, (batch, 1)).astype("int64")}, {}


VOCAB, T, D, HEADS, CLASSES = 64, 8, 32, 2, 4


def transformer(n_layers: int = 2):
    """A small post-norm transformer encoder classifying token sequences."""
    ids = layer.data("ids", dims=[T], dtype="int64")
    pos = layer.data("pos", dims=[T], dtype="int64")
    label = layer.data("label", dims=1, dtype="int64")
    x = fj.embedding(ids, [VOCAB, D]) + fj.embedding(pos, [T, D])      # [-1, T, D]
    dh = D // HEADS

    def heads(t):
        return layer.transpose(layer.reshape(t, [0, T, HEADS, dh]), [0, 2, 1, 3])

    for _ in range(n_layers):
        q, k, v = (heads(layer.fc(x, D, num_flatten_dims=2)) for _ in range(3))
        att = layer.softmax(layer.matmul(q, k, transpose_y=True, alpha=dh ** -0.5))
        ctx = layer.reshape(layer.transpose(layer.matmul(att, v), [0, 2, 1, 3]), [0, T, D])
        x = layer.layer_norm(x + layer.fc(ctx, D, num_flatten_dims=2), begin_norm_axis=2)
        ff = layer.fc(layer.fc(x, 2 * D, num_flatten_dims=2, activation="relu"), D, num_flatten_dims=2)
        x = layer.layer_norm(x + ff, begin_norm_axis=2)
    logits = layer.fc(layer.reduce_mean(x, dim=1), CLASSES)
    return layer.mean(layer.softmax_with_cross_entropy(logits, label))


def transformer_feed(rng, batch=4):
    ids = rng.integers(0, VOCAB, (batch, T)).astype("int64")
    return {"ids": ids, "pos": np.tile(np.arange(T), (batch, 1)).astype("int64"),
            "label": (ids[:, :1] % CLASSES).astype("int64")}, {}


def lstm_classifier(stacked: int = 3, emb: int = 16, hid: int = 10):
    """The book's understand_sentiment stacked LSTM (embedding, fc, dynamic_lstm, alternating
    direction, max sequence_pool of the last fc and lstm, softmax fc, cross entropy). ``hid`` is
    not a multiple of 8: there Paddle 2.6.2's CPU ``lstm_grad`` (its AVX path) returns zero bias
    gradients, where ours match finite differences."""
    words = layer.data("words", dims=1, dtype="int64", lod_level=1)
    label = layer.data("label", dims=1, dtype="int64")
    fc1 = layer.fc(layer.embedding(words, [VOCAB, emb]), hid * 4)
    lstm1, _ = layer.dynamic_lstm(fc1, hid * 4)
    inputs = [fc1, lstm1]
    for i in range(2, stacked + 1):
        fc = layer.fc(inputs, hid * 4)
        lstm, _ = layer.dynamic_lstm(fc, hid * 4, is_reverse=(i % 2) == 0)
        inputs = [fc, lstm]
    pred = layer.fc([layer.sequence_pool(inputs[0], "max"), layer.sequence_pool(inputs[1], "max")], CLASSES,
                    activation="softmax")
    return layer.mean(layer.cross_entropy(pred, label))


def lstm_feed(rng, batch=4):
    lengths = rng.integers(2, 7, batch).tolist()
    return ({"words": rng.integers(0, VOCAB, (sum(lengths), 1)).astype("int64"),
             "label": rng.integers(0, CLASSES, (batch, 1)).astype("int64")}, {"words": [lengths]})


def _build(model, amp=None, optimizer=None):
    """(main, startup, loss, decorated optimizer or None)."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        loss = model()
        opt = optimizer or fj.optimizer.Adam(LR)
        if amp is not None:
            opt = fj.amp.decorate(opt, **amp)
        opt.minimize(loss)
    return main, startup, loss, opt if amp is not None else None


def _fj_feed(feed, lods):
    return {k: fj.create_lod_tensor(v, lods[k]) if k in lods else v for k, v in feed.items()}


# -- Paddle's rewrite of the same program ---------------------------------------------------------------
def _paddle():
    """Paddle (imported after JAX), in static-graph mode."""
    import paddle_oracle  # noqa: F401

    import paddle

    paddle.enable_static()
    return paddle


@contextlib.contextmanager
def _paddle_with_kernels():
    """Paddle's AMP lists as on a device with low-precision kernels (see the module docstring):
    no op is "unsupported"."""
    from paddle.static.amp import fp16_lists

    real = fp16_lists._get_sys_unsupported_list

    def supported(dtype):
        device, _, all_ops = real(dtype)
        return device, set(), all_ops

    fp16_lists._get_sys_unsupported_list = supported
    try:
        yield
    finally:
        fp16_lists._get_sys_unsupported_list = real


def _paddle_program(forward_bytes: bytes):
    """Our forward program parsed by Paddle, with each variable's ``op`` (its writer) set as a
    program built in Paddle has it (the gray-op rule reads it)."""
    paddle = _paddle()

    prog = paddle.static.Program.parse_from_string(forward_bytes)
    block = prog.global_block()
    for op in block.ops:
        for name in op.output_arg_names:
            block.var(name).op = op
    return prog


def _paddle_decorated(forward_bytes: bytes, loss_name: str, **kw):
    """Paddle's ``static.amp.decorate(Adam).minimize`` on our forward program, parsed."""
    paddle = _paddle()

    prog = _paddle_program(forward_bytes)
    with _paddle_with_kernels(), paddle.static.program_guard(prog, paddle.static.Program()), \
            paddle.utils.unique_name.guard():
        paddle.static.amp.decorate(paddle.optimizer.Adam(LR), **kw).minimize(prog.global_block().var(loss_name))
    return prog


def _paddle_rewrite(forward_bytes: bytes, dtype: str, level: str, use_guard: bool = False):
    """Paddle's ``cast_model_to_fp16`` alone on our forward program, parsed."""
    from paddle.base import core
    from paddle.static.amp import fp16_utils

    prog = _paddle_program(forward_bytes)
    enum = core.VarDesc.VarType.BF16 if dtype == "bfloat16" else core.VarDesc.VarType.FP16
    with _paddle_with_kernels():
        lists = fp16_utils.AutoMixedPrecisionLists(dtype=dtype)
        fp16_utils.cast_model_to_fp16(prog, lists, use_guard, enum, level)
    return prog


def _describe(ops) -> list:
    """Each op as (type, inputs, outputs), comparable across the two systems: Paddle's memcpy of
    the overflow flag and the SkipUpdate slot it feeds left out, grad ops by their gradient
    slots (the two backward passes hand grad ops different forward inputs), renamed partial
    gradients without their counter, runs of one op type (the moved gradient casts: their order
    follows the parameters' order, which parsing changes) sorted."""

    def norm(slots):
        return {k: sorted(re.sub(r"@RENAME@block\d+@\d+", "@RENAME", n) for n in v) for k, v in slots.items() if v}

    out = []
    for op in ops:
        if op.type == "memcpy":
            continue
        ins = {k: list(op.input(k)) for k in _slot_names(op, "input")}
        outs = {k: list(op.output(k)) for k in _slot_names(op, "output")}
        ins.pop("SkipUpdate", None)
        if op.type.endswith("_grad"):
            ins = {k: v for k, v in ins.items() if k.endswith("@GRAD")}
        out.append((op.type, norm(ins), norm(outs)))
    return [d for _, run in itertools.groupby(out, key=lambda d: d[0]) for d in sorted(run, key=repr)]


def _slot_names(op, kind):
    if isinstance(op, fj.ir.program.Operator):
        return list(op.inputs if kind == "input" else op.outputs)
    return list(op.input_names if kind == "input" else op.output_names)


def _assert_same_program(model, amp: dict):
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        loss = model()
    forward = main.serialize()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        fj.amp.decorate(fj.optimizer.Adam(LR), **amp).minimize(loss)
    theirs = _paddle_decorated(forward, loss.name, **amp)
    ours_ops, their_ops = _describe(main.global_block().ops), _describe(theirs.global_block().ops)
    assert [d[0] for d in ours_ops] == [d[0] for d in their_ops]
    for a, b in zip(ours_ops, their_ops):
        assert a == b
    return main, loss


def _precisions(ops, var):
    """The output dtypes of each op that is neither a cast nor a gradient op."""
    return [(op.type, sorted(str(var(n).dtype).replace("paddle.", "") for n in op.output_arg_names))
            for op in ops if op.type != "cast" and not op.type.endswith("_grad")]


# -- the lists and the API ------------------------------------------------------------------------------
def test_lists_are_paddles():
    paddle = _paddle()

    for dtype in ("float16", "bfloat16"):
        ours, theirs = fj.amp.AutoMixedPrecisionLists(dtype=dtype), paddle.static.amp.AutoMixedPrecisionLists(dtype=dtype)
        assert ours.white_list == theirs.white_list
        assert ours.black_list == theirs.black_list
        assert ours.gray_list == theirs.gray_list
    assert ours.unsupported_list == set()


def test_custom_lists_move_ops_as_paddle_does():
    lists = fj.amp.CustomOpLists(custom_white_list={"softmax", "relu"}, custom_black_list={"mul"},
                                 custom_black_varnames={"fc_0.tmp_0"}, dtype="bfloat16")
    assert "softmax" in lists.white_list and "softmax" not in lists.black_list
    assert "relu" in lists.white_list and "relu" not in lists.gray_list
    assert "mul" in lists.black_list and "mul" in lists.unsupported_list and "mul" not in lists.white_list
    assert lists.black_varnames == {"fc_0.tmp_0"}
    with pytest.raises(ValueError, match="overlaps"):
        fj.amp.AutoMixedPrecisionLists(custom_white_list={"relu"}, custom_black_list={"relu"})
    with pytest.raises(ValueError, match="float16"):
        fj.amp.AutoMixedPrecisionLists(dtype="float64")


def test_module_paths_and_decorate_forms():
    import fluidjax.contrib.mixed_precision as mp

    assert fj.contrib.mixed_precision is mp and "amp" in fj.__all__
    # contrib.slim is a module path (scripts import it at top); using what it names is refused
    with pytest.raises(fj.NotOfferedError, match="slim"):
        fj.contrib.slim.Compressor()
    opt = fj.optimizer.SGD(0.1)
    common = fj.amp.decorate(opt, level="O2", dtype="float16")        # Paddle 2.x's defaults
    assert (common._amp_level, common._init_loss_scaling, common._incr_every_n_steps,
            common._decr_every_n_nan_or_inf, common._decr_ratio, common._use_dynamic_loss_scaling) == \
        ("O2", 2.0 ** 16, 2000, 1, 0.5, True)
    assert not fj.amp.decorate(opt, dtype="bfloat16")._use_dynamic_loss_scaling
    for fluid in (mp.decorate(opt), fj.amp.decorate(opt, None, 2.0 ** 15), fj.amp.decorate(opt, use_pure_fp16=True)):
        assert (fluid._init_loss_scaling, fluid._incr_every_n_steps, fluid._decr_every_n_nan_or_inf,
                fluid._decr_ratio, fluid._amp_dtype) == (2.0 ** 15, 1000, 2, 0.8, "float16")
    assert fj.amp.decorate(opt, use_pure_fp16=True)._amp_level == "O2"
    with pytest.warns(UserWarning, match="bfloat16"):
        assert mp.decorate(opt, use_bf16=True)._init_loss_scaling == 1.0
    with pytest.raises(TypeError, match="one form"):
        fj.amp.decorate(opt, level="O2", use_pure_fp16=True)
    with pytest.raises(ValueError, match="level"):
        fj.amp.decorate(opt, level="O3")
    with pytest.raises(TypeError, match="optimizer"):
        fj.amp.decorate("adam")


# -- where the casts go -----------------------------------------------------------------------------------
def test_mlp_matches_paddles_own_model():
    """The same MLP built natively in Paddle and decorated there: the same program, op for op."""
    paddle = _paddle()

    main, startup, loss, _ = _build(mlp, dict(level="O1", dtype="bfloat16"))
    prog, pstart = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(prog, pstart), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [None, 8], "float32")
        y = paddle.static.data("y", [None, 1], "int64")
        h = paddle.static.nn.fc(x, 16, activation="relu")
        p = paddle.nn.functional.softmax(paddle.static.nn.fc(h, 4))
        ploss = paddle.mean(paddle.nn.functional.cross_entropy(p, y, use_softmax=False, reduction="none"))
        with _paddle_with_kernels():
            paddle.static.amp.decorate(paddle.optimizer.Adam(LR), level="O1", dtype="bfloat16").minimize(ploss)
    # Paddle 2.x spells cross entropy softmax_with_cross_entropy and mean reduce_mean; the rest,
    # casts included, is the same op for op.
    spelled = {"softmax_with_cross_entropy": "cross_entropy", "reduce_mean": "mean"}

    def fluid_spelling(t):
        base = t[:-5] if t.endswith("_grad") else t
        return spelled.get(base, base) + t[len(base):]

    ours = [op.type for op in main.global_block().ops]
    theirs = [fluid_spelling(op.type) for op in prog.global_block().ops if op.type != "memcpy"]
    assert ours == theirs
    cast_inputs = [op.input("X")[0] for op in main.global_block().ops if op.type == "cast"]
    their_casts = [op.input("X")[0] for op in prog.global_block().ops if op.type == "cast"]
    assert cast_inputs == their_casts
    assert cast_inputs[:6] == ["fc_0.w_0", "x", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0", "fc_1.tmp_1"]
    assert [op.attr("op_role") for op in main.global_block().ops if op.type == "cast"][-4:] == [2] * 4


@pytest.mark.parametrize("amp", [dict(level="O1", dtype="bfloat16"), dict(level="O1", dtype="float16"),
                                 dict(level="OD", dtype="bfloat16"), dict(level="O1", dtype="bfloat16",
                                                                         use_promote=True)],
                         ids=["O1-bf16", "O1-fp16", "OD-bf16", "O1-promote"])
def test_mlp_rewrite_is_paddles(amp):
    main, _ = _assert_same_program(mlp, amp)
    types = [op.type for op in main.global_block().ops]
    assert "check_finite_and_unscale" in types
    assert ("update_loss_scaling" in types) == (amp["dtype"] == "float16")


def test_o2_keeps_float32_parameters_and_runs_ops_as_paddle_does():
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        loss = mlp()
    forward = main.serialize()
    fj.amp.cast_model_to_fp16(main, fj.amp.AutoMixedPrecisionLists(dtype="bfloat16"), False, "bfloat16", "O2")
    tblock = _paddle_rewrite(forward, "bfloat16", "O2").global_block()
    block = main.global_block()
    assert _precisions(block.ops, block.var) == _precisions(tblock.ops, tblock.var)
    # Paddle makes the parameters bfloat16; here they stay float32 and are cast where read.
    assert {p.dtype for p in block.all_parameters()} == {"float32"}
    assert {str(p.dtype) for p in tblock.all_parameters()} == {"paddle.bfloat16"}
    casts = [op.input("X")[0] for op in block.ops if op.type == "cast"]
    assert {p.name for p in block.all_parameters()} <= set(casts)


def test_o2_bf16_trains_with_float32_master_weights():
    main, startup, loss, _ = _build(mlp, dict(level="O2", dtype="bfloat16"))
    assert {p.dtype for p in main.global_block().all_parameters()} == {"float32"}
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    feed, _ = mlp_feed(np.random.default_rng(0))
    losses = [float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]) for _ in range(15)]
    assert losses[-1] < losses[0] - 0.1
    w = scope.find_var("fc_0.w_0").get_tensor()
    assert np.asarray(w).dtype == np.float32


def test_fp16_guard_limits_o2_to_the_guarded_ops():
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", dims=8)
        h = layer.fc(x, 16, activation="relu")
        with fj.amp.fp16_guard():
            o = layer.fc(h, 4)
        loss = layer.mean(o)
    forward = main.serialize()
    guarded = [op.type for op in main.global_block().ops if "__use_fp16__" in op.attr("op_namescope")]
    assert guarded == ["mul", "elementwise_add"]
    fj.amp.cast_model_to_fp16(main, None, True, "float16", "O2")
    block = main.global_block()
    low = [op.type for op in block.ops if op.type != "cast" and block.var(op.output_arg_names[0]).dtype == "float16"]
    assert low == ["mul", "elementwise_add"]
    paddle = _paddle()

    tblock = _paddle_rewrite(forward, "float16", "O2", use_guard=True).global_block()   # the mark serializes
    their_low = [op.type for op in tblock.ops
                 if op.type != "cast" and tblock.var(op.output_arg_names[0]).dtype == paddle.float16]
    assert their_low == low


def test_black_varnames_and_amp_init_on_a_test_program():
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        loss = mlp()
        test = main.clone(for_test=True)
        lists = fj.amp.AutoMixedPrecisionLists(custom_black_varnames={"fc_1.tmp_0"}, dtype="bfloat16")
        opt = fj.amp.decorate(fj.optimizer.SGD(0.1), lists, level="O2", dtype="bfloat16")
        opt.minimize(loss)
    block = main.global_block()
    second_mul = [op for op in block.ops if op.type == "mul"][1]
    assert block.var(second_mul.output("Out")[0]).dtype == "float32"   # it writes a black variable
    assert not any(op.type == "cast" for op in test.global_block().ops)
    opt.amp_init(fj.CPUPlace(), test_program=test)
    assert any(op.type == "cast" for op in test.global_block().ops)
    assert opt.get_loss_scaling().name == "loss_scaling_0" and opt.get_scaled_loss() is not None


# -- float16 and dynamic loss scaling ----------------------------------------------------------------------
def _paddle_loss_scaling(found: bool, state: dict, incr_n: int, decr_n: int, incr: float, decr: float) -> dict:
    """NumPy's account of Paddle's update_loss_scaling (phi's UpdateLossScalingFunctor)."""
    scale, good, bad = np.float32(state["scale"]), state["good"], state["bad"]
    if found:
        good, bad = 0, bad + 1
        if bad == decr_n:
            scale, bad = max(scale * np.float32(decr), np.float32(1.0)), 0
    else:
        good, bad = good + 1, 0
        if good == incr_n:
            grown = scale * np.float32(incr)
            scale, good = (grown if np.isfinite(grown) else scale), 0
    return {"scale": scale, "good": good, "bad": bad}


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_fp16_overflow_skips_the_step_and_the_scale_adapts(optimizer):
    settings = dict(init_loss_scaling=1024.0, incr_every_n_steps=3, decr_every_n_nan_or_inf=2, incr_ratio=2.0,
                    decr_ratio=0.5)
    opt = fj.optimizer.Adam(0.01) if optimizer == "adam" else fj.optimizer.SGD(0.1)
    main, startup, loss, amp = _build(mlp, dict(level="O1", dtype="float16", **settings), opt)
    types = [op.type for op in main.global_block().ops]
    assert types.index("check_finite_and_unscale") < types.index("update_loss_scaling") < types.index(
        "adam" if optimizer == "adam" else "sgd")
    if optimizer == "adam":
        assert all(op.input("SkipUpdate") for op in main.global_block().ops if op.type == "adam")
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    persistables = sorted(v.name for v in main.list_vars() if v.persistable and v.name.startswith("fc_"))
    feed, _ = mlp_feed(np.random.default_rng(1))
    poisoned = dict(feed, x=feed["x"] * np.float32(1e5))       # beyond float16: the forward overflows
    state = {"scale": 1024.0, "good": 0, "bad": 0}
    names = [amp.get_loss_scaling().name, "num_good_steps_0", "num_bad_steps_0"]
    for step, bad in enumerate([0, 0, 0, 1, 0, 1, 1, 0, 1, 1]):
        before = {n: np.array(scope.find_var(n).get_tensor()) for n in persistables}
        value, scale, good, bad_count = exe.run(main, feed=poisoned if bad else feed, fetch_list=[loss] + names,
                                                scope=scope)
        state = _paddle_loss_scaling(bool(bad), state, 3, 2, 2.0, 0.5)
        assert (float(scale[0]), int(good[0]), int(bad_count[0])) == (state["scale"], state["good"], state["bad"]), step
        after = {n: np.array(scope.find_var(n).get_tensor()) for n in persistables}
        changed = [n for n in persistables if not np.array_equal(before[n], after[n])]
        if bad:
            assert not np.isfinite(value).all()
            assert changed == [], f"step {step}: an overflowing step changed {changed}"
        else:
            assert np.isfinite(value).all() and "fc_0.w_0" in changed
    assert state["scale"] == 1024.0 * 2 / 2 / 2


# -- the program serializes and Paddle runs it --------------------------------------------------------------
def _emulated(program: fj.Program, low: str, rounding: bool) -> fj.Program:
    """A copy of ``program`` for a runtime without ``low``-precision kernels: every ``low``
    variable held in float32 and, with ``rounding``, rounded to ``low`` after each op that writes
    it (a cast to ``low`` and back)."""
    prog = fj.Program.parse(program.serialize())
    low_enum, f32 = dtypes.to_enum(low), dtypes.to_enum("float32")
    for block in prog.blocks:
        lows = {n for n, v in block.vars.items() if v.dtype == low}
        for name in lows:
            block.vars[name].dtype = "float32"
        i = 0
        while i < len(block.ops):
            op = block.ops[i]
            for attr in ("in_dtype", "out_dtype", "dtype"):
                if op.attr(attr) == low_enum:
                    op.set_attr(attr, f32)
            k = i + 1
            if rounding:
                written = [n for slot, names in op.outputs.items() if slot != "XShape" for n in names if n in lows]
                for name in dict.fromkeys(written):
                    var = block.vars[name]
                    block.create_var(name + "@ROUNDED", var.shape, low, var.lod_level)
                    block.insert_op(k, "cast", {"X": name}, {"Out": name + "@ROUNDED"},
                                    {"in_dtype": f32, "out_dtype": low_enum})
                    block.insert_op(k + 1, "cast", {"X": name + "@ROUNDED"}, {"Out": name},
                                    {"in_dtype": low_enum, "out_dtype": f32})
                    k += 2
            i = k
    return prog


class _PaddleTrainer:
    """One Paddle executor and scope running a program step after step (a fresh executor per
    step would rebuild Paddle's interpreter every time)."""

    def __init__(self, program: fj.Program, params: dict, lods: dict):
        paddle = _paddle()
        import paddle_oracle as po

        self.paddle, self.lods = paddle, lods
        self.program = po.parse(program.serialize())
        self.scope, self.place = paddle.static.Scope(), paddle.CPUPlace()
        self.exe = paddle.static.Executor(self.place)
        for name, value in params.items():
            self.scope.var(name).get_tensor().set(np.ascontiguousarray(value), self.place)

    def step(self, feed: dict, fetch: str) -> np.ndarray:
        feed = {k: self.paddle.base.create_lod_tensor(v, self.lods[k], self.place) if k in self.lods else v
                for k, v in feed.items()}
        with self.paddle.static.scope_guard(self.scope):
            return np.array(self.exe.run(self.program, feed=feed, fetch_list=[fetch])[0])


def _train_against_paddle(model, feed_fn, steps: int):
    """bfloat16 O1 training: ours, Paddle running our program (rounding emulated), Paddle
    running it with no rounding, and our float32 training, from the same parameters."""
    import paddle_oracle as po

    m16, s16, l16, _ = _build(model, dict(dtype="bfloat16"))
    m32, s32, l32, _ = _build(model)
    exe, sc16, sc32 = fj.Executor(), fj.Scope(), fj.Scope()
    exe.run(s32, scope=sc32)
    exe.run(s16, scope=sc16)
    for name, value in po.persistable_values(m32, sc32).items():
        sc16.var(name).get_tensor().set(value, fj.CPUPlace())
    params = po.persistable_values(m16, sc16)
    feed, lods = feed_fn(np.random.default_rng(0))
    paddles = {"rounded": _PaddleTrainer(_emulated(m16, "bfloat16", True), params, lods),
               "exact": _PaddleTrainer(_emulated(m16, "bfloat16", False), params, lods)}
    out = {k: [] for k in ("ours", "rounded", "exact", "float32")}
    for _ in range(steps):
        out["ours"].append(exe.run(m16, feed=_fj_feed(feed, lods), fetch_list=[l16], scope=sc16)[0])
        out["float32"].append(exe.run(m32, feed=_fj_feed(feed, lods), fetch_list=[l32], scope=sc32)[0])
        for key, trainer in paddles.items():
            out[key].append(trainer.step(feed, l16.name))
    return {k: np.array(v, dtype="float64").reshape(-1) for k, v in out.items()}


def test_mlp_program_serializes_and_paddle_trains_it():
    main, startup, loss, _ = _build(mlp, dict(dtype="bfloat16"))
    paddle = _paddle()

    parsed = paddle.static.Program.parse_from_string(main.serialize())
    assert [op.type for op in parsed.global_block().ops] == [op.type for op in main.global_block().ops]
    assert str(parsed.global_block().var("fc_0.w_0.cast_fp16").dtype) == "paddle.bfloat16"
    assert fj.Program.parse(main.serialize()).serialize() == main.serialize()
    out = _train_against_paddle(mlp, mlp_feed, steps=8)
    np.testing.assert_allclose(out["exact"], out["float32"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["ours"], out["rounded"], rtol=0.02, atol=0.01)
    np.testing.assert_allclose(out["ours"], out["float32"], rtol=0.02, atol=0.01)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["transformer", "lstm"])
def test_model_bf16_casts_and_losses_are_paddles(name):
    model, feed_fn = {"transformer": (transformer, transformer_feed), "lstm": (lstm_classifier, lstm_feed)}[name]
    main, _ = _assert_same_program(model, dict(level="O1", dtype="bfloat16"))
    block = main.global_block()
    low_ops = {op.type for op in block.ops if op.type != "cast" and not op.type.endswith("_grad")
               and any(block.var(n).dtype == "bfloat16" for n in op.output_arg_names)}
    assert {"mul", "elementwise_add"} <= low_ops and not low_ops & {"softmax", "layer_norm", "lstm", "lookup_table",
                                                                    "lookup_table_v2", "sequence_pool", "mean"}
    out = _train_against_paddle(model, feed_fn, steps=20)
    # The rewritten program, run by Paddle without rounding, is the float32 model exactly (up to
    # float32 summation order: the two programs are different Paddle runs, whose difference grows
    # over 20 Adam steps to ~1e-5 absolute on a loss that starts at ~1.7; a misplaced cast is O(1e-2)) ...
    np.testing.assert_allclose(out["exact"], out["float32"], rtol=2e-5, atol=5e-5)
    # ... with bfloat16 rounding (Paddle's truncates) it trains as ours does ...
    np.testing.assert_allclose(out["ours"], out["rounded"], rtol=0.12, atol=0.025)
    # ... and bfloat16 costs little against float32.
    np.testing.assert_allclose(out["ours"], out["float32"], rtol=0.05, atol=0.01)
    assert out["ours"][-1] < 0.5 * out["ours"][0]
