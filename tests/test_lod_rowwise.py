"""A LoD value is a tensor too (issue 28 item 5): row-wise and per-feature ops take it, treat its
rows as rows, compute their statistics over the real rows only (a bucket's padding rows never
enter batch_norm's batch mean and variance, nor its moving statistics) and pass the LoD on.
Checked against Paddle 2.6.2 running the same program bytes with a LoDTensor feed."""

import numpy as np
import pytest

import fluidjax as fluid
import fluidjax as fj

import paddle_oracle as po

# 5 frames in 2 utterances: padded to a bucket of 8 rows inside the step
LENGTHS = [[2, 3]]


def _frames(rng, rows=5, width=4):
    return (rng.standard_normal((rows, width)) * 3 + 1).astype("float32")


def _run_both(main, startup, feed, lods, fetch):
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    params = po.persistable_values(main, scope)
    ours_feed = {n: fluid.create_lod_tensor(v, lods[n], fluid.CPUPlace()) if n in lods else v
                 for n, v in feed.items()}
    ours = exe.run(main, feed=ours_feed, fetch_list=fetch, scope=scope, return_numpy=False)
    theirs = po.run_lod(main.serialize(), feed, fetch, params, lods=lods)
    return ours, theirs, scope


def _close(ours, theirs, rtol=1e-4, atol=1e-5):
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=rtol, atol=atol)


def test_batch_norm_of_frames_trains_on_the_real_rows_like_paddle():
    """A speech model normalises frames with batch_norm over all frames of all utterances:
    forward, the moving statistics and the gradients match Paddle's, and the LoD is passed on."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), fj.unique_name.guard():
        x = fluid.layers.data("x", shape=[4], dtype="float32", lod_level=1)
        h = fluid.layers.fc(x, 3)
        bn = fluid.layers.batch_norm(h, momentum=0.8)
        pooled = fluid.layers.sequence_pool(bn, "sum")
        loss = fluid.layers.mean(fluid.layers.square(pooled - 1.0))
        fluid.backward.append_backward(loss)
    assert bn.lod_level == 1
    block = main.global_block()
    bn_op = next(op for op in block.ops if op.type == "batch_norm")
    mean_out, var_out = bn_op.output("MeanOut")[0], bn_op.output("VarianceOut")[0]
    fetch = [bn.name, loss.name, "fc_0.w_0@GRAD", "fc_0.b_0@GRAD", bn_op.input("Scale")[0] + "@GRAD",
             bn_op.input("Bias")[0] + "@GRAD", mean_out, var_out]
    feed = {"x": _frames(np.random.default_rng(0))}
    ours, theirs, _ = _run_both(main, startup, feed, {"x": LENGTHS}, fetch)
    assert ours[0].recursive_sequence_lengths() == LENGTHS                       # ShareLoD
    assert theirs[0].recursive_sequence_lengths() == LENGTHS
    _close(ours, theirs)        # the moving statistics too: those of the 5 real frames, not 8 rows
    assert np.array(ours[0]).shape == (5, 3)


def test_batch_norm_statistics_ignore_the_padding_rows():
    """The same 5 frames alone and inside a larger, differently padded batch: the frames' own
    batch statistics, never the padding's (NumPy)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fj.unique_name.guard():
        x = fluid.layers.data("x", shape=[4], dtype="float32", lod_level=1)
        bn = fluid.layers.batch_norm(x, epsilon=1e-5, param_attr=fluid.ParamAttr(
            initializer=fluid.initializer.Constant(1.0)), bias_attr=fluid.ParamAttr(
            initializer=fluid.initializer.Constant(0.0)))
    frames = _frames(np.random.default_rng(1))
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    out, = exe.run(main, feed={"x": fluid.create_lod_tensor(frames, LENGTHS, fluid.CPUPlace())},
                   fetch_list=[bn], return_numpy=False)
    mean, var = frames.mean(0), frames.var(0)
    np.testing.assert_allclose(np.array(out), (frames - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
    assert out.recursive_sequence_lengths() == LENGTHS


def test_row_wise_ops_take_a_lod_value_like_paddle():
    """layer_norm, fc, softmax, activations, elementwise ops, matmul, dropout (inference) and concat
    along features on a LoD value: the rows as Paddle computes them, the LoD passed on."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup), fj.unique_name.guard():
        x = fluid.layers.data("x", shape=[4], dtype="float32", lod_level=1)
        ln = fluid.layers.layer_norm(x)
        h = fluid.layers.fc(ln, 6, act="relu")
        sm = fluid.layers.softmax(h)
        both = fluid.layers.concat([sm, ln], axis=1)                  # along features
        scaled = fluid.layers.elementwise_mul(both, fluid.layers.sigmoid(both))
        w = fluid.layers.create_parameter([10, 3], "float32", name="mm_w")
        mm = fluid.layers.matmul(scaled, w)
        dr = fluid.layers.dropout(mm, 0.3, is_test=True)
        out = fluid.layers.tanh(dr)
    for v in (ln, h, sm, both, scaled, mm, out):
        assert v.lod_level == 1, v.name
    feed = {"x": _frames(np.random.default_rng(2))}
    fetch = [ln.name, h.name, sm.name, both.name, mm.name, out.name]
    ours, theirs, _ = _run_both(main, startup, feed, {"x": LENGTHS}, fetch)
    for a in ours:
        assert a.recursive_sequence_lengths() == LENGTHS and np.array(a).shape[0] == 5
    _close(ours, theirs)


def test_the_refusal_of_other_row_mixing_ops_stays():
    """Ops whose statistics are not declared row statistics still refuse a LoD input."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fj.unique_name.guard():
        x = fluid.layers.data("x", shape=[4], dtype="float32", lod_level=1)
        idx = fluid.layers.argmax(x, axis=0)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    with pytest.raises(fj.OpRuntimeError, match="padding rows"):
        exe.run(main, feed={"x": fluid.create_lod_tensor(_frames(np.random.default_rng(3)), LENGTHS,
                                                         fluid.CPUPlace())}, fetch_list=[idx])


# -- issue 28 item 12: a DynamicRNN memory holding a LoD encoder output -----------------------------
def _lod_memory_decoder():
    """encoder: embedding + dynamic_lstm over a LoD source; decoder: DynamicRNN over a LoD target
    with static_input(encoder), memory(init=encoder_last) and a LoD memory initialised from the
    encoder's states (updated each step). Returns (main, startup, loss, forward program bytes)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 11
    with fluid.program_guard(main, startup), fj.unique_name.guard():
        src = fluid.layers.data("src", shape=[1], dtype="int64", lod_level=1)
        trg = fluid.layers.data("trg", shape=[1], dtype="int64", lod_level=1)
        lab = fluid.layers.data("lab", shape=[1], dtype="int64", lod_level=1)
        emb = fluid.layers.embedding(src, size=[20, 8])
        enc, _ = fluid.layers.dynamic_lstm(fluid.layers.fc(emb, 16), size=16)
        enc_last = fluid.layers.sequence_last_step(enc)
        temb = fluid.layers.embedding(trg, size=[20, 8])
        rnn = fluid.layers.DynamicRNN()
        with rnn.block():
            word = rnn.step_input(temb)
            ctx = rnn.static_input(enc)
            states = rnn.memory(init=enc, need_reorder=True)      # a LoD memory
            hidden = rnn.memory(init=enc_last, need_reorder=True)
            pooled = fluid.layers.sequence_pool(states, "max")
            attended = fluid.layers.sequence_pool(ctx, "average")
            h = fluid.layers.fc([word, hidden, pooled, attended], 4, act="tanh")
            rnn.update_memory(states, fluid.layers.fc(states, 4, act="tanh"))
            rnn.update_memory(hidden, h)
            rnn.output(fluid.layers.fc(h, 20, act="softmax"))
        loss = fluid.layers.mean(fluid.layers.cross_entropy(rnn(), lab))
    return main, startup, loss, main.serialize()


_DECODER_FEED = {"src": np.array([[1], [2], [3], [4], [5]], "int64"),
                 "trg": np.array([[1], [2], [3], [4]], "int64"), "lab": np.array([[2], [3], [4], [5]], "int64")}


def _lod_feed(lengths):
    return {k: fluid.create_lod_tensor(v, lengths[k], fluid.CPUPlace()) for k, v in _DECODER_FEED.items()}


@pytest.mark.slow
def test_a_decoder_whose_memory_holds_the_encoder_sequences_has_paddles_gradients():
    """Its while_grad failed inside JAX ("unexpected tree structure": an array of LoD elements was
    differentiated as a LoD value). The loss and the decoder's gradients match Paddle 2.6.2 running
    the same forward bytes with Paddle's own backward; the encoder's are checked by finite
    differences below (Paddle's disagree with finite differences there)."""
    import paddle

    main, startup, loss, forward = _lod_memory_decoder()
    with fluid.program_guard(main, startup):
        fluid.backward.append_backward(loss)
    lengths = {"src": [[2, 3]], "trg": [[1, 3]], "lab": [[1, 3]]}
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    decoder = ["embedding_1.w_0", "fc_1.w_0", "fc_1.w_1", "fc_1.w_2", "fc_1.w_3", "fc_1.b_0", "fc_2.w_0",
               "fc_2.b_0", "fc_3.w_0", "fc_3.b_0"]
    fetch = [loss.name] + [n + "@GRAD" for n in decoder]
    ours = exe.run(main, feed=_lod_feed(lengths), fetch_list=fetch, scope=scope)
    pd_main = po.parse(forward)
    with paddle.static.program_guard(pd_main, paddle.static.Program()):
        paddle.static.append_backward(pd_main.global_block().var(loss.name))
    theirs = po.run(pd_main, _DECODER_FEED, fetch, po.persistable_values(main, scope), lods=lengths)
    for name, a, b in zip(fetch, ours, theirs):
        np.testing.assert_allclose(np.array(a).reshape(-1), np.array(b).reshape(-1), rtol=1e-4, atol=1e-6,
                                   err_msg=name)


@pytest.mark.slow
def test_the_lod_memory_gradient_with_unequal_lengths_matches_finite_differences():
    """Target lengths [1, 3]: the LoD memory shrinks to the running sequences. The gradients of the
    encoder's parameters (reached through the LoD memory, the static input and the boot state) are
    central finite differences of the loss. (Paddle 2.6.2's backward of this program gives other
    encoder gradients, its forward and decoder gradients agree: checked by hand, its encoder
    gradients disagree with finite differences too.)"""
    main, startup, loss, forward = _lod_memory_decoder()
    fwd = fj.Program.parse_from_string(forward)
    with fluid.program_guard(main, startup):
        fluid.backward.append_backward(loss)
    lengths = {"src": [[2, 3]], "trg": [[1, 3]], "lab": [[1, 3]]}
    feed = _lod_feed(lengths)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    names = ["embedding_0.w_0", "fc_0.w_0", "lstm_0.w_0", "lstm_0.b_0"]
    grads = exe.run(main, feed=feed, fetch_list=[n + "@GRAD" for n in names], scope=scope)
    for name, grad in zip(names, grads):
        tensor = scope.find_var(name).get_tensor()
        base = np.array(tensor).copy()
        grad = np.array(grad)
        for idx in [np.unravel_index(np.argmax(np.abs(grad)), base.shape)]:     # (max pooling: no kinks)
            def loss_at(value):
                moved = base.copy()
                moved[idx] = value
                tensor.set(moved, fluid.CPUPlace())
                return float(np.array(exe.run(fwd, feed=feed, fetch_list=[loss.name], scope=scope)[0]).reshape(-1)[0])
            eps = 1e-2
            fd = (loss_at(base[idx] + eps) - loss_at(base[idx] - eps)) / (2 * eps)
            tensor.set(base, fluid.CPUPlace())
            assert grad[idx] == pytest.approx(fd, rel=3e-3, abs=2e-4), (name, idx)
