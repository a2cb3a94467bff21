"""Fluid 1.8's CTR layers and odds (``frontend/ctr_layers.py``, ops in ``lowering/ops/ctr.py``) and
``SampleEmbeddingHelper`` (``frontend/decoding.py``).

Oracles: Paddle 2.6.2 running our serialized program for data_norm (its gradient with Paddle's own
``append_backward``), cvm, hash, inplace_abn (emitted as batch_norm + activation) and load (Paddle
writes with its ``save`` op and reads our files); NumPy written here for filter_by_instag and the
SelectedRows helpers (Paddle 2.6.2 has no filter_by_instag op, and refuses a dense input to the
SelectedRows ones); a pure-Python XXH64 from the published algorithm for hash as well.
"""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

import fluidjax as fluid
from fluidjax.frontend.io.tensor_stream import write_tensor

import paddle_oracle  # noqa: E402  (after fluidjax: the other order crashes)
import paddle  # noqa: E402

L = fluid.layers


def _fresh():
    return fluid.Program(), fluid.Program()


def _paddle_grads(program_bytes: bytes, loss: str, feed, fetch, params, lods=None):
    """Our forward program run by Paddle with Paddle's own backward appended."""
    prog = paddle_oracle.parse(program_bytes)
    with paddle.static.program_guard(prog):
        paddle.static.append_backward(prog.global_block().var(loss))
    return paddle_oracle.run(prog, feed, fetch, params, lods=lods)


# -- data_norm --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["plain", "slot_dim", "scale_shift", "slot_scale_shift"])
def test_data_norm_and_its_statistics_gradients_match_paddle(variant):
    rng = np.random.default_rng(1)
    slot_dim = 3 if "slot" in variant else -1
    shift = "scale_shift" in variant
    xs = rng.uniform(-1, 2, (5, 6)).astype("float32")
    xs[1, 0] = 0.0          # a zero show: slot 0 of instance 1
    xs[3, 3] = 0.0          # slot 1 of instance 3
    wt = rng.uniform(0.5, 1.5, (5, 6)).astype("float32")
    main, startup = _fresh()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 6], "float32")
        x.stop_gradient = False
        w = fluid.data("w", [-1, 6], "float32")
        attr = {"batch_size": 7.0, "batch_sum": 1.5, "batch_square": 9.0, "scale_w": 1.3, "bias": 0.2}
        y = L.data_norm(x, param_attr=attr, slot_dim=slot_dim, enable_scale_and_shift=shift, epsilon=1e-4)
        loss = L.reduce_sum(L.elementwise_mul(y, w))
    forward = main.serialize()
    fluid.backward.append_backward(loss)
    names = ["dn.batch_size", "dn.batch_sum", "dn.batch_square_sum"] + (["dn.scale_w", "dn.bias"] if shift else [])
    fetch = [y.name, "x@GRAD"] + [n + "@GRAD" for n in names]
    exe = fluid.Executor()
    exe.run(startup)
    ours = exe.run(main, feed={"x": xs, "w": wt}, fetch_list=fetch)
    params = paddle_oracle.persistable_values(main)
    theirs = _paddle_grads(forward, loss.name, {"x": xs, "w": wt}, fetch, params)
    for name, a, b in zip(fetch, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-5, err_msg=name)
    # The summaries' gradients are statistics, not derivatives: Paddle's CPU kernel.
    if slot_dim < 0:
        np.testing.assert_allclose(ours[2], np.full(6, 5.0))
        np.testing.assert_allclose(ours[3], xs.sum(0), rtol=1e-5)


def test_data_norm_refuses_bad_input_at_build_time():
    with fluid.program_guard(*_fresh()):
        x = fluid.data("x", [-1, 6], "float32")
        with pytest.raises(Exception, match="slot_dim"):
            L.data_norm(x, slot_dim=4)
        with pytest.raises(Exception, match="epsilon"):
            L.data_norm(x, epsilon=0.5, name="other")


# -- continuous_value_model (cvm) -------------------------------------------------------------------------
@pytest.mark.parametrize("use_cvm", [True, False])
@pytest.mark.parametrize("lod", [None, [[2, 1, 3]]])
def test_cvm_and_its_gradient_match_paddle(use_cvm, lod):
    rng = np.random.default_rng(2)
    rows = 6 if lod else 4
    xs = rng.uniform(0, 3, (rows, 5)).astype("float32")
    cvm = rng.uniform(0, 5, (3 if lod else rows, 2)).astype("float32")
    width = 5 if use_cvm else 3
    wt = rng.uniform(0.5, 1.5, (rows, width)).astype("float32")
    main, startup = _fresh()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 5], "float32", lod_level=1 if lod else 0)
        x.stop_gradient = False
        c = fluid.data("c", [-1, 2], "float32")
        w = fluid.data("w", [-1, width], "float32")
        y = L.continuous_value_model(x, c, use_cvm=use_cvm)
        loss = L.mean(L.elementwise_mul(y, w))        # (mean counts a LoD value's real rows only)
    assert tuple(y.shape) == (-1, width)
    forward = main.serialize()
    fluid.backward.append_backward(loss)
    feed = {"x": fluid.create_lod_tensor(xs, lod, fluid.CPUPlace()) if lod else xs, "c": cvm, "w": wt}
    exe = fluid.Executor()
    exe.run(startup)
    ours = exe.run(main, feed=feed, fetch_list=[y, "x@GRAD"])
    theirs = _paddle_grads(forward, loss.name, {"x": xs, "c": cvm, "w": wt}, [y.name, "x@GRAD"], {},
                           lods={"x": lod} if lod else None)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# -- hash -------------------------------------------------------------------------------------------------
_M = (1 << 64) - 1
_P = (11400714785074694791, 14029467366897019727, 1609587929392839161, 9650029242287828579, 2870177450012600261)


def _xxh64(data: bytes, seed: int) -> int:
    """XXH64 from the published algorithm description (straightforward, with Python ints)."""
    p1, p2, p3, p4, p5 = _P
    rotl = lambda x, r: ((x << r) | (x >> (64 - r))) & _M  # noqa: E731
    rnd = lambda acc, lane: rotl((acc + lane * p2) & _M, 31) * p1 & _M  # noqa: E731
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + p1 + p2) & _M, (seed + p2) & _M, seed, (seed - p1) & _M]
        while i + 32 <= n:
            v = [rnd(v[k], struct.unpack_from("<Q", data, i + 8 * k)[0]) for k in range(4)]
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & _M
        for a in v:
            h = ((h ^ rnd(0, a)) * p1 + p4) & _M
    else:
        h = (seed + p5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        h = (rotl(h ^ rnd(0, struct.unpack_from("<Q", data, i)[0]), 27) * p1 + p4) & _M
        i += 8
    if i + 4 <= n:
        h = (rotl(h ^ (struct.unpack_from("<I", data, i)[0] * p1 & _M), 23) * p2 + p3) & _M
        i += 4
    while i < n:
        h = rotl(h ^ (data[i] * p5 & _M), 11) * p1 & _M
        i += 1
    h ^= h >> 33
    h = h * p2 & _M
    h ^= h >> 29
    h = h * p3 & _M
    return h ^ (h >> 32)


def test_reference_xxh64_matches_the_published_test_vectors():
    assert _xxh64(b"", 0) == 0xEF46DB3751D8E999
    assert _xxh64(b"a", 0) == 0xD24EC4F1A98C6E5B
    assert _xxh64(b"abc", 0) == 0x44BC2CF5AD770999


@pytest.mark.parametrize("dtype,width", [("int64", 1), ("int64", 5), ("int32", 3), ("int32", 9)])
def test_hash_matches_paddle_and_xxh64(dtype, width):
    rng = np.random.default_rng(3)
    ids = rng.integers(-2**31, 2**31 - 1, (4, width)).astype(dtype)
    main, startup = _fresh()
    with fluid.program_guard(main, startup):
        x = fluid.data("ids", [-1, width], dtype)
        out = L.hash(x, hash_size=100003, num_hash=3)
    assert tuple(out.shape) == (-1, 3, 1) and out.dtype == dtype
    got, = fluid.Executor().run(main, feed={"ids": ids}, fetch_list=[out])
    theirs, = paddle_oracle.run(main.serialize(), {"ids": ids}, [out.name])
    np.testing.assert_array_equal(got, theirs)
    want = np.array([[[_xxh64(row.tobytes(), j) % 100003] for j in range(3)] for row in ids.astype("<" + ids.dtype.str[1:])])
    np.testing.assert_array_equal(got, want)


# -- filter_by_instag -------------------------------------------------------------------------------------
def _np_filter(ins, ins_lengths, tags, tag_lengths, wanted, fill):
    """Kept instances' rows, the kept LoD, loss weights and the index map (Fluid's docs)."""
    ins_off = np.concatenate([[0], np.cumsum(ins_lengths)])
    tag_off = np.concatenate([[0], np.cumsum(tag_lengths)])
    rows, lod, index_map = [], [0], []
    for i in range(len(tag_lengths)):
        if set(tags[tag_off[i]:tag_off[i + 1]].ravel().tolist()) & set(wanted.ravel().tolist()):
            index_map.append([lod[-1], ins_off[i], ins_lengths[i]])
            rows.extend(ins[ins_off[i]:ins_off[i + 1]])
            lod.append(lod[-1] + ins_lengths[i])
    if not index_map:
        return np.full((1, ins.shape[1]), fill, ins.dtype), [0, 1], np.zeros((1, 1), "float32"), np.array([[0, 1, 1]])
    return np.array(rows), lod, np.ones((len(index_map), 1), "float32"), np.array(index_map)


@pytest.mark.parametrize("is_lod,wanted", [(False, [1]), (True, [3, 9]), (False, [42])])
def test_filter_by_instag_matches_numpy_with_its_gradient(is_lod, wanted):
    rng = np.random.default_rng(4)
    ins_lengths = [2, 1, 3, 1] if is_lod else [1, 1, 1, 1]
    ins = rng.uniform(-1, 1, (sum(ins_lengths), 3)).astype("float64")
    tag_lengths = [2, 2, 1, 2]
    tags = np.array([0, 1, 1, 3, 9, 2, 6], "int64").reshape(-1, 1)
    wanted = np.array(wanted, "int64")
    wt = rng.uniform(0.5, 1.5, (ins.shape[0], 3))
    main, startup = _fresh()
    with fluid.program_guard(main, startup):
        x = fluid.data("ins", [-1, 3], "float64", lod_level=1 if is_lod else 0)
        x.stop_gradient = False
        t = fluid.data("tags", [-1, 1], "int64", lod_level=1)
        f = fluid.data("wanted", [-1], "int64")
        out, weight = L.filter_by_instag(x, t, f, is_lod, out_val_if_empty=-5)
        w = fluid.data("w", [-1, 3], "float64")
        loss = L.mean(L.elementwise_mul(out, w))          # (mean counts the real rows only)
    fluid.backward.append_backward(loss)
    index_map = main.global_block().ops[0].output("IndexMap")[0]
    place = fluid.CPUPlace()
    feed = {"ins": fluid.create_lod_tensor(ins, [ins_lengths], place) if is_lod else ins,
            "tags": fluid.create_lod_tensor(tags, [tag_lengths], place), "wanted": wanted, "w": wt}
    exe = fluid.Executor()
    exe.run(startup)
    got_out, got_w, got_map, got_loss, got_grad = exe.run(
        main, feed=feed, fetch_list=[out, weight, index_map, loss, "ins@GRAD"], return_numpy=False)
    want_out, want_lod, want_w, want_map = _np_filter(ins, ins_lengths, tags, tag_lengths, wanted, -5)
    np.testing.assert_allclose(np.asarray(got_out), want_out)
    kept = len(want_lod) - 1
    lod = got_out.lod()[0]
    assert lod[:kept + 1] == want_lod and all(v == want_lod[-1] for v in lod[kept + 1:])   # then empty sequences
    np.testing.assert_array_equal(np.asarray(got_w), want_w)
    np.testing.assert_array_equal(np.asarray(got_map), want_map)
    # The loss and the gradient: d/d ins of mean(out · w) (rows of kept instances get w's rows).
    np.testing.assert_allclose(np.asarray(got_loss).reshape(()), (want_out * wt[:want_out.shape[0]]).mean())
    want_grad = np.zeros_like(ins)
    if want_w[0, 0]:
        for start_out, start_in, count in want_map:
            want_grad[start_in:start_in + count] = wt[start_out:start_out + count] / want_out.size
    np.testing.assert_allclose(np.asarray(got_grad), want_grad)


def test_filter_by_instag_needs_lod_tags():
    with fluid.program_guard(*_fresh()):
        x = fluid.data("ins", [-1, 3], "float32")
        t = fluid.data("tags", [-1, 1], "int64")
        with pytest.raises(Exception, match="LoD"):
            L.filter_by_instag(x, t, fluid.data("wanted", [-1], "int64"), False)


# -- SelectedRows helpers ---------------------------------------------------------------------------------
def test_selected_rows_helpers_pass_a_dense_tensor_through():
    xs = np.arange(12, dtype="float32").reshape(4, 3)
    main, startup = _fresh()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 3], "float32")
        a = L.merge_selected_rows(x)
        b = L.get_tensor_from_selected_rows(a)
    assert [op.type for op in main.global_block().ops] == ["merge_selected_rows", "get_tensor_from_selected_rows"]
    got_a, got_b = fluid.Executor().run(main, feed={"x": xs}, fetch_list=[a, b])
    np.testing.assert_array_equal(got_a, xs)
    np.testing.assert_array_equal(got_b, xs)
    assert tuple(b.shape) == (-1, 3)


# -- inplace_abn ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("act", [None, "leaky_relu", "elu"])
def test_inplace_abn_is_batch_norm_then_activation(act):
    rng = np.random.default_rng(5)
    xs = rng.normal(size=(4, 3, 2, 2)).astype("float32")
    wt = rng.uniform(0.5, 1.5, xs.shape).astype("float32")
    main, startup = _fresh()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 3, 2, 2], "float32")
        x.stop_gradient = False
        w = fluid.data("w", [-1, 3, 2, 2], "float32")
        y = L.inplace_abn(x, act=act, act_alpha=0.3, momentum=0.8,
                          moving_mean_name="abn_mean", moving_variance_name="abn_var")
        loss = L.reduce_sum(L.elementwise_mul(y, w))
    types = [op.type for op in main.global_block().ops]
    assert types[0] == "batch_norm" and (types[1] == act if act else types[1] == "elementwise_mul")
    forward = main.serialize()
    fluid.backward.append_backward(loss)
    fetch = [y.name, "x@GRAD", "abn_mean", "abn_var"]
    exe = fluid.Executor()
    exe.run(startup)
    params = paddle_oracle.persistable_values(main)
    ours = exe.run(main, feed={"x": xs, "w": wt}, fetch_list=fetch)
    theirs = _paddle_grads(forward, loss.name, {"x": xs, "w": wt}, fetch, params)
    for name, a, b in zip(fetch, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=name)
    # NumPy: normalized with the batch's statistics, then the activation.
    m, v = xs.mean((0, 2, 3), keepdims=True), xs.var((0, 2, 3), keepdims=True)
    z = (xs - m) / np.sqrt(v + 1e-5)
    want = {None: z, "leaky_relu": np.where(z > 0, z, 0.3 * z), "elu": np.where(z > 0, z, 0.3 * (np.exp(z) - 1))}[act]
    np.testing.assert_allclose(ours[0], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours[2], 0.2 * m.ravel(), rtol=1e-4, atol=1e-6)


# -- load -------------------------------------------------------------------------------------------------
def test_load_reads_what_save_vars_wrote_and_paddle_agrees(tmp_path):
    values = np.random.default_rng(6).normal(size=(3, 4)).astype("float32")
    main, startup = _fresh()
    with fluid.program_guard(main, startup):
        w = L.create_parameter([3, 4], "float32", name="saved_w")
    exe = fluid.Executor()
    exe.run(startup)
    fluid.global_scope().find_var("saved_w").get_tensor().set(values, fluid.CPUPlace())
    fluid.io.save_vars(exe, str(tmp_path), main, vars=[w])
    path = os.path.join(str(tmp_path), "saved_w")
    prog = fluid.Program()
    with fluid.program_guard(prog, fluid.Program()):
        out = L.create_tensor("float32", name="loaded")
        L.load(out, path)
        doubled = L.scale(out, 2.0)
    assert [op.type for op in prog.global_block().ops][0] == "load"
    got, twice = exe.run(prog, fetch_list=[out, doubled])
    np.testing.assert_array_equal(got, values)
    np.testing.assert_array_equal(twice, 2 * values)
    theirs, = paddle_oracle.run(prog.serialize(), {}, ["loaded"])
    np.testing.assert_array_equal(theirs, values)
    # Each run reads the file: new contents of the same shape are seen by the compiled step.
    with open(path, "wb") as f:
        write_tensor(f, values + 1)
    np.testing.assert_array_equal(exe.run(prog, fetch_list=[out])[0], values + 1)
    with open(path, "wb") as f:
        write_tensor(f, np.zeros((2, 2), "float32"))
    with pytest.raises(Exception, match="changed"):
        exe.run(prog, fetch_list=[out])


def test_load_reads_paddles_save_op_with_lod_and_as_fp16(tmp_path):
    data = np.arange(10, dtype="float64").reshape(5, 2)
    path = str(tmp_path / "t")
    sprog = paddle.static.Program()
    with paddle.static.program_guard(sprog):
        v = sprog.global_block().create_var(name="v", shape=[5, 2], dtype="float64", persistable=True, lod_level=1)
        sprog.global_block().append_op(type="save", inputs={"X": v}, attrs={"file_path": path})
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        t = scope.var("v").get_tensor()
        t.set(data, paddle.CPUPlace())
        t.set_recursive_sequence_lengths([[2, 3]])
        paddle.static.Executor(paddle.CPUPlace()).run(sprog)
    prog = fluid.Program()
    with fluid.program_guard(prog, fluid.Program()):
        out = prog.global_block().create_var("seq", (-1, 2), "float64", 1)
        L.load(out, path)
        half = prog.global_block().create_var("half", (5, 2), "float16", 0)
        L.load(half, path, load_as_fp16=True)
    got, got_half = fluid.Executor().run(prog, fetch_list=[out, half], return_numpy=False)
    np.testing.assert_array_equal(np.asarray(got), data)
    assert got.recursive_sequence_lengths() == [[2, 3]]
    assert np.asarray(got_half).dtype == np.float16
    np.testing.assert_array_equal(np.asarray(got_half), data.astype("float16"))


def test_load_errors_name_the_file(tmp_path):
    prog = fluid.Program()
    with fluid.program_guard(prog, fluid.Program()):
        out = L.create_tensor("float32", name="x")
        L.load(out, str(tmp_path / "missing"))
    with pytest.raises(Exception, match="missing"):
        fluid.Executor().run(prog, fetch_list=[out])
    path = tmp_path / "f64"
    with open(path, "wb") as f:
        write_tensor(f, np.zeros(3))
    prog = fluid.Program()
    with fluid.program_guard(prog, fluid.Program()):
        out = L.create_tensor("float32", name="x")
        L.load(out, str(path))
    with pytest.raises(Exception, match="float64"):
        fluid.Executor().run(prog, fetch_list=[out])


# -- SampleEmbeddingHelper --------------------------------------------------------------------------------
_V, _H = 6, 5


def _decode(helper_of, logits_scale: float, batch: int, steps: int = 3, seed: int = 11):
    main, startup = _fresh()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup):
        enc = fluid.data("enc", [None, _H], "float32")
        start = fluid.data("start", [None], "int64")
        embed = lambda ids: fluid.embedding(ids, size=[_V, _H], param_attr=fluid.ParamAttr(name="emb"))  # noqa: E731
        helper = helper_of(embed, start)
        decoder = L.BasicDecoder(L.GRUCell(_H), helper, output_fn=lambda h: L.scale(L.fc(
            h, size=_V, param_attr=fluid.ParamAttr(name="out_w"), bias_attr=False), logits_scale))
        outputs, _ = L.dynamic_decode(decoder, inits=enc, max_step_num=steps - 1)
    exe = fluid.Executor()
    exe.run(startup)
    enc_v = np.random.default_rng(9).normal(size=(batch, _H)).astype("float32")
    return exe.run(main, feed={"enc": enc_v, "start": np.zeros(batch, "int64")},
                   fetch_list=[outputs.cell_outputs, outputs.sample_ids])


def test_sample_embedding_helper_at_low_temperature_is_greedy_inside_dynamic_decode():
    logits, ids = _decode(lambda e, s: L.SampleEmbeddingHelper(e, s, end_token=99, softmax_temperature=1e-4), 1.0, 8)
    assert ids.shape == (8, 3)
    np.testing.assert_array_equal(ids, np.argmax(logits, -1))


def _sample(logits: np.ndarray, temperature, seed=None, program_seed=5):
    main, startup = _fresh()
    main.random_seed = program_seed
    with fluid.program_guard(main, startup):
        lg = fluid.data("lg", [-1, logits.shape[1]], "float32")
        start = fluid.data("start", [None], "int64")
        helper = L.SampleEmbeddingHelper(lambda i: i, start, 99, softmax_temperature=temperature, seed=seed)
        ids = helper.sample(None, lg, None)
        greedy = L.GreedyEmbeddingHelper(lambda i: i, start, 99).sample(None, lg, None)
    exe = fluid.Executor()
    exe.run(startup)
    return exe.run(main, feed={"lg": logits, "start": np.zeros(len(logits), "int64")}, fetch_list=[ids, greedy])


def test_sample_embedding_helper_draws_from_the_softmax():
    batch, temperature = 4000, 2.0
    logits = np.random.default_rng(12).normal(scale=3.0, size=(batch, _V)).astype("float32")
    ids, greedy = _sample(logits, temperature)
    assert ids.dtype == np.int64 and ids.shape == (batch,)
    probs = np.exp(logits / temperature)
    probs /= probs.sum(-1, keepdims=True)
    # Each entry's id is one draw from its own softmax: the counts per id match the summed
    # probabilities within a few standard deviations, and the draws are not the argmax.
    counts = np.bincount(ids, minlength=_V)
    expected = probs.sum(0)
    sd = np.sqrt((probs * (1 - probs)).sum(0))
    assert np.all(np.abs(counts - expected) < 5 * sd + 1), (counts, expected)
    assert np.mean(ids != greedy) > 0.2
    # Relative to each entry's own probabilities: the mean probability of the drawn ids is
    # E[Σ p²], not the argmax's (a draw that ignored the logits would give 1/V).
    drawn = probs[np.arange(batch), ids].mean()
    want = (probs ** 2).sum(-1).mean()
    assert abs(drawn - want) < 5 * probs[np.arange(batch), ids].std() / np.sqrt(batch)
    np.testing.assert_array_equal(_sample(logits, temperature)[0], ids)      # the program's seed fixes them
    assert np.mean(_sample(logits, temperature, program_seed=6)[0] != ids) > 0.2
    tiny, greedy = _sample(logits, 1e-4, seed=3)
    np.testing.assert_array_equal(tiny, greedy)                               # temperature -> 0: greedy
