"""Fluid 1.6–1.8's cell API, written as a Fluid script would: ``layers.GRUCell`` / ``LSTMCell``,
``layers.rnn(cell, ...)`` (masking by ``sequence_length``, reverse, time-major, nested states),
``layers.BeamSearchDecoder`` + ``layers.dynamic_decode``.

Oracles: a NumPy/JAX transcription of Fluid 1.8's rules (the basic GRU/LSTM units, ``rnn``'s
mask that holds a finished row's states, the beam search step and ``gather_tree``) with the same
parameters; ``jax.grad`` of that transcription for gradients; Paddle 2.6.2 running the same
program bytes for the forward of ``rnn`` (its ``recurrent``, ``matmul``, ``sequence_mask`` and
``flip`` kernels); Paddle 2.6.2's own ``BeamSearchDecoder`` + ``dynamic_decode`` (Fluid 1.8's
code, moved to ``paddle.nn``) over the same GRU unit and parameters.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fluidjax as fluid
from fluidjax import layers
from fluidjax.ir.errors import ShapeError

import paddle_oracle as po  # noqa: E402  (imports paddle after fluidjax)

_B, _T, _D, _H = 3, 5, 4, 6


# -- the reference: Fluid 1.8's rules in jax.numpy ---------------------------------------------------
def _sigmoid(x):
    return 1.0 / (1.0 + jnp.exp(-x))


def _gru_step(p, prefix):
    def step(x, h):
        gates = _sigmoid(jnp.concatenate([x, h], 1) @ p[prefix + ".w_0"] + p[prefix + ".b_0"])
        r, u = jnp.split(gates, 2, axis=1)
        c = jnp.tanh(jnp.concatenate([x, r * h], 1) @ p[prefix + ".w_1"] + p[prefix + ".b_1"])
        new = u * h + (1 - u) * c
        return new, new
    return step


def _lstm_step(p, prefix, forget_bias=1.0):
    def step(x, state):
        h, c = state
        gates = jnp.concatenate([x, h], 1) @ p[prefix + ".w_0"] + p[prefix + ".b_0"]
        i, j, f, o = jnp.split(gates, 4, axis=1)
        c2 = c * _sigmoid(f + forget_bias) + _sigmoid(i) * jnp.tanh(j)
        h2 = jnp.tanh(c2) * _sigmoid(o)
        return h2, [h2, c2]
    return step


def _ref_rnn(step, xs, state, lengths=None, reverse=False):
    """Fluid's rnn over batch-major xs [B, T, D]: states hold past a row's length, outputs are
    the cell's (not masked); returns (outputs [B, T, ...], final states)."""
    steps = xs.shape[1]
    outs = [None] * steps
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        out, new = step(xs[:, t], state)
        if lengths is not None:
            m = (t < lengths).astype(xs.dtype)[:, None]
            new = jax.tree_util.tree_map(lambda n, o: n * m + o * (1 - m), new, state)
        outs[t], state = out, new
    return jnp.stack(outs, axis=1), state


def _params(program, rng, scope=None):
    """Random values for every parameter of ``program`` (biases too), set in the scope."""
    scope = scope or fluid.global_scope()
    values = {}
    for p in program.all_parameters():
        values[p.name] = rng.uniform(-0.5, 0.5, p.shape).astype(p.dtype)
        scope.var(p.name).get_mutable(fluid.LoDTensor).set(values[p.name])
    return values


# -- cells and rnn ----------------------------------------------------------------------------------
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("time_major", [False, True])
def test_gru_rnn_with_sequence_length_matches_fluids_rule(reverse, time_major):
    rng = np.random.default_rng(1)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [_T, None, _D] if time_major else [None, _T, _D], "float32")
        lengths = fluid.data("lengths", [None], "int64")
        cell = layers.GRUCell(hidden_size=_H)
        out, last = layers.rnn(cell, x, sequence_length=lengths, time_major=time_major, is_reverse=reverse)
    assert out.shape == ((_T, -1, _H) if time_major else (-1, _T, _H)) and last.shape == (-1, _H)
    exe = fluid.Executor()
    exe.run(startup)
    p = _params(main, rng)
    assert sorted(p) == ["GRUCell/BasicGRUUnit_0.b_0", "GRUCell/BasicGRUUnit_0.b_1",
                         "GRUCell/BasicGRUUnit_0.w_0", "GRUCell/BasicGRUUnit_0.w_1"]
    xs = rng.normal(size=(_B, _T, _D)).astype("float32")
    lens = np.array([_T, 2, 1])
    feed = {"x": xs.transpose(1, 0, 2) if time_major else xs, "lengths": lens}
    got_out, got_last = exe.run(main, feed=feed, fetch_list=[out, last])
    want_out, want_last = _ref_rnn(_gru_step(p, "GRUCell/BasicGRUUnit_0"), xs, jnp.zeros((_B, _H)), lens, reverse)
    np.testing.assert_allclose(got_out, np.asarray(want_out).transpose(1, 0, 2) if time_major else want_out,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_last, want_last, rtol=1e-5, atol=1e-5)
    # Past a row's end its final state is the one of its last real step (row 1: step 1 forward,
    # step 0 backward after two reverse steps 1, 0).
    _, held = _ref_rnn(_gru_step(p, "GRUCell/BasicGRUUnit_0"), xs[:, :2], jnp.zeros((_B, _H)), None, reverse)
    np.testing.assert_allclose(got_last[1], held[1], rtol=1e-5, atol=1e-5)
    # Paddle 2.6.2 runs the same program bytes to the same values.
    theirs = po.run(main.serialize(), feed, [out.name, last.name], p)
    np.testing.assert_allclose(theirs[0], got_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(theirs[1], got_last, rtol=1e-5, atol=1e-6)


def test_lstm_rnn_nested_states_initial_states_and_kwargs():
    """LSTMCell's [h, c] states, given initial states, a custom cell taking a keyword argument."""
    rng = np.random.default_rng(2)

    class Scaled(layers.RNNCell):                      # no super().__init__, as the book's cell
        def __init__(self):
            self.lstm = layers.LSTMCell(_H, forget_bias=0.5)

        def call(self, inputs, states, gain):
            out, new = self.lstm(inputs, states)
            return layers.elementwise_mul(out, gain), new

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, _T, _D], "float32")
        h0 = fluid.data("h0", [None, _H], "float32")
        c0 = fluid.data("c0", [None, _H], "float32")
        gain = fluid.data("gain", [_H], "float32")
        lengths = fluid.data("lengths", [None], "int32")
        out, (last_h, last_c) = layers.rnn(Scaled(), x, initial_states=[h0, c0], sequence_length=lengths, gain=gain)
    exe = fluid.Executor()
    exe.run(startup)
    p = _params(main, rng)
    feed = {"x": rng.normal(size=(_B, _T, _D)).astype("float32"), "h0": rng.normal(size=(_B, _H)).astype("float32"),
            "c0": rng.normal(size=(_B, _H)).astype("float32"), "gain": rng.normal(size=_H).astype("float32"),
            "lengths": np.array([3, _T, 0], "int32")}
    got = exe.run(main, feed=feed, fetch_list=[out, last_h, last_c])
    lstm = _lstm_step(p, "LSTMCell/BasicLSTMUnit_0", forget_bias=0.5)

    def step(x, state):
        o, new = lstm(x, state)
        return o * feed["gain"], new

    want_out, (want_h, want_c) = _ref_rnn(step, feed["x"], [feed["h0"], feed["c0"]], feed["lengths"])
    for g, w in zip(got, (want_out, want_h, want_c)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    # A row of length 0 keeps its initial states.
    np.testing.assert_allclose(got[1][2], feed["h0"][2], rtol=1e-6)
    np.testing.assert_allclose(got[2][2], feed["c0"][2], rtol=1e-6)


def test_cells_emit_fluids_basic_unit_ops():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, _D], "float32")
        h = fluid.data("h", [None, _H], "float32")
        c = fluid.data("c", [None, _H], "float32")
        gru_out, gru_new = layers.GRUCell(_H)(x, h)
        n = len(main.global_block().ops)
        lstm_out, (lstm_h, lstm_c) = layers.LSTMCell(_H)(x, [h, c])
    assert gru_out is gru_new and lstm_out is lstm_h
    types = [op.type for op in main.global_block().ops]
    assert types[:n] == ["concat", "matmul", "elementwise_add", "sigmoid", "split", "elementwise_mul", "concat",
                         "matmul", "elementwise_add", "tanh", "elementwise_mul", "scale", "elementwise_mul",
                         "elementwise_add"]
    assert types[n:n + 4] == ["concat", "matmul", "elementwise_add", "split"]
    shapes = {p.name: p.shape for p in main.all_parameters()}
    assert shapes == {"GRUCell/BasicGRUUnit_0.w_0": (_D + _H, 2 * _H), "GRUCell/BasicGRUUnit_0.w_1": (_D + _H, _H),
                      "GRUCell/BasicGRUUnit_0.b_0": (2 * _H,), "GRUCell/BasicGRUUnit_0.b_1": (_H,),
                      "LSTMCell/BasicLSTMUnit_0.w_0": (_D + _H, 4 * _H), "LSTMCell/BasicLSTMUnit_0.b_0": (4 * _H,)}
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        named = layers.GRUCell(_H, param_attr=fluid.ParamAttr(name="g"), bias_attr=fluid.ParamAttr(name="gb"))
        named(fluid.data("x", [None, _D], "float32"), fluid.data("h", [None, _H], "float32"))
        assert sorted(p.name for p in fluid.default_main_program().all_parameters()) == \
            ["g_candidate", "g_gate", "gb_candidate", "gb_gate"]


def test_get_initial_states():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [_T, None, _D], "float32")
        gru = layers.GRUCell(_H)
        h = gru.get_initial_states(batch_ref=x, batch_dim_idx=1)
        h_c = layers.LSTMCell(_H).get_initial_states(batch_ref=[x], batch_dim_idx=1, init_value=0.5)
        custom = gru.get_initial_states(x, shape=[[2], [-1, 3, 4]], dtype=["float64", "int64"], batch_dim_idx=1)
    assert h.shape == (-1, _H) and [s.shape for s in h_c] == [(-1, _H), (-1, _H)]
    assert [s.dtype for s in custom] == ["float64", "int64"] and custom[1].shape == (-1, 3, 4)
    got = fluid.Executor().run(main, feed={"x": np.zeros((_T, 7, _D), "float32")}, fetch_list=[h, *h_c, *custom])
    assert [g.shape for g in got] == [(7, _H), (7, _H), (7, _H), (7, 2), (7, 3, 4)]
    assert np.all(got[1] == 0.5) and np.all(got[0] == 0)
    with pytest.raises(NotImplementedError, match="state_shape"):
        layers.RNNCell().get_initial_states(x)


def test_rnn_gradients_match_jax_grad_of_the_reference():
    rng = np.random.default_rng(3)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, _T, _D], "float32")
        x.stop_gradient = False
        h0 = fluid.data("h0", [None, _H], "float32")
        h0.stop_gradient = False
        lengths = fluid.data("lengths", [None], "int64")
        w_out = fluid.data("w_out", [None, _T, _H], "float32")
        w_last = fluid.data("w_last", [None, _H], "float32")
        out, last = layers.rnn(layers.GRUCell(_H), x, initial_states=h0, sequence_length=lengths, is_reverse=True)
        loss = layers.reduce_sum(out * w_out) + layers.reduce_sum(last * w_last)
        fluid.append_backward(loss)
    exe = fluid.Executor()
    exe.run(startup)
    p = _params(main, rng)
    feed = {"x": rng.normal(size=(_B, _T, _D)).astype("float32"), "h0": rng.normal(size=(_B, _H)).astype("float32"),
            "lengths": np.array([2, _T, 4]), "w_out": rng.normal(size=(_B, _T, _H)).astype("float32"),
            "w_last": rng.normal(size=(_B, _H)).astype("float32")}
    names = sorted(p)
    got = exe.run(main, feed=feed, fetch_list=[n + "@GRAD" for n in names] + ["x@GRAD", "h0@GRAD"])

    def ref_loss(params, xs, h):
        o, f = _ref_rnn(_gru_step(params, "GRUCell/BasicGRUUnit_0"), xs, h, feed["lengths"], reverse=True)
        return jnp.sum(o * feed["w_out"]) + jnp.sum(f * feed["w_last"])

    g_params, g_x, g_h = jax.grad(ref_loss, argnums=(0, 1, 2))(p, feed["x"], feed["h0"])
    for name, g in zip(names, got):
        np.testing.assert_allclose(g, g_params[name], rtol=1e-4, atol=1e-5, err_msg=name)
    np.testing.assert_allclose(got[-2], g_x, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[-1], g_h, rtol=1e-4, atol=1e-5)


def test_seed_spelling_of_rnn_still_builds_a_static_rnn():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [_T, None, _D], "float32")

        def step(word, prev):
            h = layers.elementwise_add(layers.fc(word, _H), prev)
            return h, [h]

        by_keyword = layers.rnn(step_net=step, inputs=[x], memories=[dict(shape=[-1, _H], batch_ref=x)])
        by_position = layers.rnn(step, [x], [dict(shape=[-1, _H], batch_ref=x)])
    assert by_keyword.shape == by_position.shape == (_T, -1, _H)
    assert [op.type for op in main.global_block().ops].count("recurrent") == 2
    with pytest.raises(TypeError, match="RNNCell"):
        layers.rnn(step, [x], sequence_length=x)


def test_rnn_misuse_is_a_clear_error():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data("x", [None, _T, _D], "float32")
        with pytest.raises(TypeError, match="RNNCell"):
            layers.rnn(object(), x)
        with pytest.raises(ShapeError, match="sequence_length"):
            layers.rnn(layers.GRUCell(_H), x, sequence_length=x)

        class Bad(layers.RNNCell):
            state_shape = [_H]

            def call(self, inputs, states):
                return inputs, [states, states]

        with pytest.raises(ValueError, match="structure"):
            layers.rnn(Bad(), x)
        with pytest.raises(ShapeError, match="input_size"):
            layers.GRUCell(_H)(fluid.data("y", [None, _D, 2], "float32"), fluid.data("h", [None, _H], "float32"))


# -- a seq2seq model trains ------------------------------------------------------------------------
_V, _E = 12, 8


def _seq2seq(src, src_len, trg):
    emb = lambda ids, name: fluid.embedding(ids, size=[_V, _E], param_attr=fluid.ParamAttr(name=name))  # noqa: E731
    _, enc_last = layers.rnn(layers.GRUCell(_H), emb(src, "src_emb"), sequence_length=src_len)
    dec_init = layers.fc(enc_last, size=_H, act="tanh")
    dec_out, _ = layers.rnn(layers.GRUCell(_H), emb(trg, "trg_emb"), initial_states=dec_init)
    return layers.fc(dec_out, size=_V, num_flatten_dims=2, param_attr=fluid.ParamAttr(name="out_w"))


def test_gru_encoder_decoder_trains():
    rng = np.random.default_rng(4)
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 5
    with fluid.program_guard(main, startup):
        src = fluid.data("src", [None, None], "int64")
        src_len = fluid.data("src_len", [None], "int64")
        trg = fluid.data("trg", [None, None], "int64")
        trg_len = fluid.data("trg_len", [None], "int64")
        label = fluid.data("label", [None, None], "int64")
        logits = _seq2seq(src, src_len, trg)
        loss = layers.softmax_with_cross_entropy(logits, layers.unsqueeze(label, [2]))
        steps = layers.slice(layers.shape(trg), axes=[0], starts=[1], ends=[2])       # shape(trg)[1]
        mask = layers.sequence_mask(trg_len, maxlen=steps, dtype="float32")
        avg = layers.reduce_sum(layers.squeeze(loss, [2]) * mask) / layers.reduce_sum(mask)
        fluid.optimizer.Adam(learning_rate=0.02).minimize(avg)
    exe = fluid.Executor()
    exe.run(startup)
    src_v = rng.integers(2, _V, (4, 7))
    trg_v = rng.integers(2, _V, (4, 6))
    feed = {"src": src_v, "src_len": np.array([7, 5, 3, 6]), "trg": trg_v, "trg_len": np.array([6, 4, 6, 2]),
            "label": np.roll(trg_v, -1, axis=1)}
    losses = [float(exe.run(main, feed=feed, fetch_list=[avg])[0]) for _ in range(12)]
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.7 * losses[0], losses


# -- beam search decoding ----------------------------------------------------------------------------
_BEAM, _START, _END = 3, 0, 1


def _beam_program(max_step_num, cell_kind="gru"):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        enc = fluid.data("enc", [None, _H], "float32")
        cell = layers.GRUCell(_H) if cell_kind == "gru" else layers.LSTMCell(_H)
        inits = enc if cell_kind == "gru" else [enc, enc]
        decoder = layers.BeamSearchDecoder(
            cell, start_token=_START, end_token=_END, beam_size=_BEAM,
            embedding_fn=lambda ids: fluid.embedding(ids, size=[_V, _E], param_attr=fluid.ParamAttr(name="emb")),
            output_fn=lambda h: layers.fc(h, size=_V, num_flatten_dims=2, param_attr=fluid.ParamAttr(name="out_w"),
                                          bias_attr=fluid.ParamAttr(name="out_b")))
        ids, states, lengths = layers.dynamic_decode(decoder, inits=inits, max_step_num=max_step_num,
                                                     return_length=True)
    return main, startup, ids, states, lengths


def _np_beam_search(p, enc, max_step_num, step_fn, state):
    """Fluid 1.8's BeamSearchDecoder + dynamic_decode in NumPy (float64); returns the
    backtracked ids [batch, steps, beam] and the lengths [batch, beam]."""
    batch = enc.shape[0]
    tile = lambda a: np.repeat(a[:, None], _BEAM, axis=1)                         # noqa: E731
    state = [tile(s) for s in state]
    log_probs = np.tile(np.array([[0.0] + [-1e9] * (_BEAM - 1)]), (batch, 1))
    finished = np.zeros((batch, _BEAM), bool)
    lengths = np.zeros((batch, _BEAM), np.int64)
    tokens = np.full((batch, _BEAM), _START)
    all_ids, all_parents = [], []
    for _ in range(max_step_num + 1):
        flat = [s.reshape(batch * _BEAM, -1) for s in state]
        out, new = step_fn(p["emb"][tokens].reshape(batch * _BEAM, -1), flat)
        logits = (out @ p["out_w"] + p["out_b"]).reshape(batch, _BEAM, _V)
        z = logits - logits.max(-1, keepdims=True)
        step_lp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        noend = np.full(_V, -1e9)
        noend[_END] = 0.0
        step_lp = np.where(finished[..., None], noend, step_lp)
        scores = (step_lp + log_probs[..., None]).reshape(batch, -1)
        top = np.argsort(-scores, axis=1, kind="stable")[:, :_BEAM]
        parents, tokens = top // _V, top % _V
        rows = np.arange(batch)[:, None]
        log_probs = scores[rows, top]
        state = [n.reshape(batch, _BEAM, -1)[rows, parents] for n in new]
        prev_finished = finished[rows, parents]
        lengths = lengths[rows, parents] + ~prev_finished
        finished = prev_finished | (tokens == _END)
        all_ids.append(tokens)
        all_parents.append(parents)
        if finished.all():
            break
    ids, parents = np.array(all_ids), np.array(all_parents)            # [steps, batch, beam]
    out = np.empty_like(ids)
    out[-1] = ids[-1]
    parent = parents[-1]
    for t in range(len(ids) - 2, -1, -1):
        out[t] = np.take_along_axis(ids[t], parent, axis=1)
        parent = np.take_along_axis(parents[t], parent, axis=1)
    return out.transpose(1, 0, 2), lengths


def _np_gru(p, prefix):
    sig = lambda v: 1 / (1 + np.exp(-v))                                          # noqa: E731

    def step(x, state):
        h = state[0]
        g = sig(np.concatenate([x, h], 1) @ p[prefix + ".w_0"] + p[prefix + ".b_0"])
        r, u = np.split(g, 2, axis=1)
        c = np.tanh(np.concatenate([x, r * h], 1) @ p[prefix + ".w_1"] + p[prefix + ".b_1"])
        new = u * h + (1 - u) * c
        return new, [new]
    return step


def _paddle_beam_search(p, enc, max_step_num, prefix="GRUCell/BasicGRUUnit_0"):
    """The same decoder in Paddle 2.6.2: ``paddle.nn.BeamSearchDecoder`` + ``dynamic_decode`` in
    static mode (Fluid 1.8's code, moved) over a cell doing Fluid's GRU unit with our parameters."""
    import paddle

    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        enc_v = paddle.static.data("enc", [None, _H], "float32")
        params = {n: paddle.static.create_parameter(list(v.shape), "float32", name=n) for n, v in p.items()}

        class Cell(paddle.nn.RNNCellBase):
            def forward(self, x, h):
                gates = paddle.nn.functional.sigmoid(
                    paddle.matmul(paddle.concat([x, h], 1), params[prefix + ".w_0"]) + params[prefix + ".b_0"])
                r, u = paddle.split(gates, 2, axis=1)
                c = paddle.tanh(paddle.matmul(paddle.concat([x, r * h], 1), params[prefix + ".w_1"])
                                + params[prefix + ".b_1"])
                new = u * h + (1 - u) * c
                return new, new

        decoder = paddle.nn.BeamSearchDecoder(
            Cell(), _START, _END, _BEAM, embedding_fn=lambda ids: paddle.nn.functional.embedding(ids, params["emb"]),
            output_fn=lambda h: paddle.matmul(h, params["out_w"]) + params["out_b"])
        ids, _, lengths = paddle.nn.dynamic_decode(decoder, inits=enc_v, max_step_num=max_step_num,
                                                   return_length=True)
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        for name, value in p.items():
            scope.var(name).get_tensor().set(value, paddle.CPUPlace())
        return paddle.static.Executor(paddle.CPUPlace()).run(main, feed={"enc": enc}, fetch_list=[ids, lengths])


@pytest.mark.parametrize("end_bias,max_step_num", [(0.0, 6), (2.5, 30)], ids=["capped", "every-beam-ends"])
def test_beam_search_decoder_matches_numpy_beam_search(end_bias, max_step_num):
    rng = np.random.default_rng(6)
    main, startup, ids, _, lengths = _beam_program(max_step_num)
    exe = fluid.Executor()
    exe.run(startup)
    p = _params(main, rng)
    p["out_b"][_END] += end_bias                 # make beams end before the bound (or not)
    fluid.global_scope().var("out_b").get_mutable(fluid.LoDTensor).set(p["out_b"])
    enc = rng.normal(size=(4, _H)).astype("float32")
    got_ids, got_lengths = exe.run(main, feed={"enc": enc}, fetch_list=[ids, lengths])
    p64 = {k: v.astype(np.float64) for k, v in p.items()}
    want_ids, want_lengths = _np_beam_search(p64, enc.astype(np.float64), max_step_num,
                                             _np_gru(p64, "GRUCell/BasicGRUUnit_0"), [enc.astype(np.float64)])
    steps = want_ids.shape[1]
    assert got_ids.shape == (4, max_step_num + 1, _BEAM)
    np.testing.assert_array_equal(got_ids[:, :steps], want_ids)
    np.testing.assert_array_equal(got_lengths, want_lengths)
    # Steps after every beam ended (Fluid's loop stops there) hold end_token.
    assert np.all(got_ids[:, steps:] == _END)
    # Paddle 2.6.2's BeamSearchDecoder (Fluid's, moved to paddle.nn) decodes the same.
    paddle_ids, paddle_lengths = _paddle_beam_search(p, enc, max_step_num)
    assert paddle_ids.shape == (4, steps, _BEAM)
    np.testing.assert_array_equal(got_ids[:, :steps], paddle_ids)
    np.testing.assert_array_equal(got_lengths, paddle_lengths)
    if end_bias:
        assert steps < max_step_num + 1          # the loop did stop early
    else:
        assert steps == max_step_num + 1


def test_beam_search_with_lstm_cell_states_and_time_major_output():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        enc = fluid.data("enc", [None, _H], "float32")
        cell = layers.LSTMCell(_H)
        decoder = layers.BeamSearchDecoder(cell, _START, _END, _BEAM,
                                           embedding_fn=lambda ids: fluid.embedding(ids, size=[_V, _E]),
                                           output_fn=lambda h: layers.fc(h, size=_V, num_flatten_dims=2))
        ids, states = layers.dynamic_decode(decoder, inits=[enc, enc], max_step_num=4, output_time_major=True)
    exe = fluid.Executor()
    exe.run(startup)
    got = exe.run(main, feed={"enc": np.ones((2, _H), "float32")},
                  fetch_list=[ids, states.cell_states[0], states.cell_states[1], states.log_probs])
    assert got[0].shape == (5, 2, _BEAM) and got[1].shape == got[2].shape == (2, _BEAM, _H)
    assert np.all(np.diff(got[3], axis=1) <= 0)          # beams stay sorted by score


def test_tile_beam_merge_with_batch():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [None, None, 2], "float32")
        tiled = layers.BeamSearchDecoder.tile_beam_merge_with_batch(x, 3)
    xs = np.arange(2 * 4 * 2, dtype="float32").reshape(2, 4, 2)
    got, = fluid.Executor().run(main, feed={"x": xs}, fetch_list=[tiled])
    np.testing.assert_array_equal(got, np.repeat(xs, 3, axis=0))


def test_dynamic_decode_needs_a_bound():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        enc = fluid.data("enc", [None, _H], "float32")
        decoder = layers.BeamSearchDecoder(layers.GRUCell(_H), _START, _END, _BEAM)
        with pytest.raises(ValueError, match="max_step_num is required"):
            layers.dynamic_decode(decoder, inits=enc)


def _teacher_forced(use_decoder: bool):
    """x -> GRU with teacher forcing (BasicDecoder + TrainingHelper in dynamic_decode, or rnn)
    -> mean square of the outputs, with its backward; the same parameter names either way."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, _T, _D], "float32")
        lengths = fluid.data("lengths", [None], "int64")
        h0 = fluid.data("h0", [None, _H], "float32")
        cell = layers.GRUCell(_H)
        if use_decoder:
            decoder = layers.BasicDecoder(cell, layers.TrainingHelper(x, lengths))
            outputs, final, decoded = layers.dynamic_decode(decoder, inits=h0, max_step_num=_T - 1,
                                                            impute_finished=True, return_length=True)
            out, extra = outputs.cell_outputs, [outputs.sample_ids, decoded]
        else:
            out, final = layers.rnn(cell, x, initial_states=h0, sequence_length=lengths)
            extra = []
        loss = layers.reduce_mean(layers.square(out)) + layers.reduce_mean(final)
        fluid.append_backward(loss)
    return main, startup, [out, final, loss] + extra


def test_basic_decoder_with_training_helper_is_rnn_with_teacher_forcing():
    """With impute_finished, a TrainingHelper decoder is Fluid's rnn with lengths: the same
    outputs (states held past a row's end, outputs not masked), final states and gradients."""
    rng = np.random.default_rng(7)
    feed = {"x": rng.normal(size=(_B, _T, _D)).astype("float32"), "lengths": np.array([_T, 3, 1]),
            "h0": rng.normal(size=(_B, _H)).astype("float32")}
    results = []
    for use_decoder in (True, False):
        main, startup, fetch = _teacher_forced(use_decoder)
        scope = fluid.Scope()
        exe = fluid.Executor()
        exe.run(startup, scope=scope)
        p = _params(main, np.random.default_rng(0), scope)
        names = sorted(p)
        results.append(exe.run(main, feed=feed, fetch_list=fetch + [n + "@GRAD" for n in names], scope=scope))
    (out, final, loss, ids, decoded, *grads), (want_out, want_final, want_loss, *want_grads) = results
    assert out.shape == (_B, _T, _H) and ids.shape == (_B, _T)
    np.testing.assert_array_equal(decoded, [_T, 3, 1])
    np.testing.assert_array_equal(ids, np.argmax(want_out, axis=-1))
    for got, want in zip([out, final, loss] + grads, [want_out, want_final, want_loss] + want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_basic_decoder_greedy_matches_numpy():
    rng = np.random.default_rng(8)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        enc = fluid.data("enc", [None, _H], "float32")
        start = fluid.data("start", [None], "int64")
        helper = layers.GreedyEmbeddingHelper(
            lambda ids: fluid.embedding(ids, size=[_V, _E], param_attr=fluid.ParamAttr(name="emb")), start, _END)
        decoder = layers.BasicDecoder(layers.GRUCell(_H), helper, output_fn=lambda h: layers.fc(
            h, size=_V, param_attr=fluid.ParamAttr(name="out_w"), bias_attr=fluid.ParamAttr(name="out_b")))
        outputs, _ = layers.dynamic_decode(decoder, inits=enc, max_step_num=7)
    exe = fluid.Executor()
    exe.run(startup)
    p = _params(main, rng)
    enc_v = rng.normal(size=(4, _H)).astype("float32")
    ids, = exe.run(main, feed={"enc": enc_v, "start": np.zeros(4, "int64")}, fetch_list=[outputs.sample_ids])
    step = _np_gru(p, "GRUCell/BasicGRUUnit_0")
    h, tokens, finished, want = enc_v, np.zeros(4, int), np.zeros(4, bool), []
    for _ in range(8):
        out, (h,) = step(p["emb"][tokens], [h])
        tokens = np.argmax(out @ p["out_w"] + p["out_b"], axis=-1)
        want.append(tokens)
        finished |= tokens == _END
        if finished.all():
            break
    want = np.array(want).T
    np.testing.assert_array_equal(ids[:, :want.shape[1]], want)
    assert np.all(ids[:, want.shape[1]:] == 0)             # past the loop's end: zeros (Fluid stops there)
