"""Fluid 1.6–1.8's cell API, written as a Fluid script would: ``layers.GRUCell`` / ``LSTMCell``,
``layers.rnn(cell, ...)`` (masking by ``sequence_length``, reverse, time-major, nested states).

Oracles: a NumPy/JAX transcription of Fluid 1.8's rules (the basic GRU/LSTM units, ``rnn``'s
mask that holds a finished row's states) with the same
parameters; ``jax.grad`` of that transcription for gradients; Paddle 2.6.2 running the same
program bytes for the forward of ``rnn`` (its ``recurrent``, ``matmul``, ``sequence_mask`` and
``flip`` kernels).
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
