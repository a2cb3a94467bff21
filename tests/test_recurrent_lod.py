"""The recurrent layers (dynamic_lstm, dynamic_gru, gru_unit, lstm_unit) against Paddle 2.6.2 running the
same program, padding invariance of the LoD recurrences, and their build-time errors.

The ops themselves (every attribute, gradients, float64 finite differences) are rows of the
op-test table (``tests/optable/recurrent_cases.py``); these tests check what the layers add:
parameters of the right shapes wired into Paddle's slots, training gradients through a model.
"""

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer

LENGTHS = [[3, 0, 5, 1, 4]]             # an empty sequence among them


def _lod_tensor(data, lengths):
    t = fj.LoDTensor(np.asarray(data))
    t.set_recursive_sequence_lengths(lengths)
    return t


def _run_both(main, startup, feed, lods, fetch):
    """Run ``main`` in fluidjax and, serialized, in Paddle from the same parameters."""
    import paddle_oracle as po

    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    fj_feed = {k: _lod_tensor(v, lods[k]) if k in lods else v for k, v in feed.items()}
    ours = exe.run(main, feed=fj_feed, fetch_list=fetch, scope=scope)
    theirs = po.run(main.serialize(), feed, fetch, po.persistable_values(main, scope), lods=lods)
    return ours, theirs


def _words(rows, width=5, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (rows, width)).astype(np.float32)


@pytest.mark.parametrize("use_peepholes, is_reverse, with_states", [
    (True, False, False), (False, True, False), (True, True, True)])
def test_dynamic_lstm_trains_like_paddle(use_peepholes, is_reverse, with_states):
    lengths = [[3, 2, 5, 1, 4]] if with_states else LENGTHS   # Paddle's H0 gradient is wrong beside an empty sequence
    count, hidden_size = len(lengths[0]), 4
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        words = layer.data("words", dims=5, lod_level=1)
        states = {}
        if with_states:
            states = {"h_0": layer.data("h0", dims=hidden_size, stop_gradient=False),
                      "c_0": layer.data("c0", dims=hidden_size, stop_gradient=False)}
        proj = layer.fc(words, 4 * hidden_size)
        hidden, cell = layer.dynamic_lstm(proj, 4 * hidden_size, use_peepholes=use_peepholes,
                                          is_reverse=is_reverse, **states)
        loss = layer.mean(layer.sequence_pool(hidden, "max"))
        fj.append_backward(loss)
    assert hidden.shape == cell.shape == (-1, hidden_size) and hidden.lod_level == cell.lod_level == 1
    block = main.global_block()
    weight = block.var("lstm_0.w_0")
    bias = block.var("lstm_0.b_0")
    assert weight.shape == (hidden_size, 4 * hidden_size)
    assert bias.shape == (1, (7 if use_peepholes else 4) * hidden_size)
    rows = sum(lengths[0])
    feed = {"words": _words(rows)}
    if with_states:
        rng = np.random.default_rng(1)
        feed.update(h0=rng.uniform(-1, 1, (count, hidden_size)).astype(np.float32),
                    c0=rng.uniform(-1, 1, (count, hidden_size)).astype(np.float32))
    fetch = [hidden.name, cell.name, loss.name, "lstm_0.w_0@GRAD", "lstm_0.b_0@GRAD", "fc_0.w_0@GRAD"]
    if with_states:
        fetch += ["h0@GRAD", "c0@GRAD"]
    ours, theirs = _run_both(main, startup, feed, {"words": lengths}, fetch)
    for name, a, b in zip(fetch, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("origin_mode, with_state", [(False, False), (True, True)])
def test_dynamic_gru_trains_like_paddle(origin_mode, with_state):
    size = 4
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        words = layer.data("words", dims=5, lod_level=1)
        h0 = layer.data("h0", dims=size, stop_gradient=False) if with_state else None
        hidden = layer.dynamic_gru(layer.fc(words, 3 * size), size, is_reverse=True, h_0=h0,
                                   origin_mode=origin_mode)
        loss = layer.mean(layer.sequence_pool(hidden, "sum"))
        fj.append_backward(loss)
    assert hidden.shape == (-1, size) and hidden.lod_level == 1
    assert main.global_block().var("gru_0.w_0").shape == (size, 3 * size)
    feed = {"words": _words(sum(LENGTHS[0]))}
    fetch = [hidden.name, loss.name, "gru_0.w_0@GRAD", "gru_0.b_0@GRAD", "fc_0.w_0@GRAD"]
    if with_state:
        feed["h0"] = np.random.default_rng(2).uniform(-1, 1, (len(LENGTHS[0]), size)).astype(np.float32)
        fetch.append("h0@GRAD")
    ours, theirs = _run_both(main, startup, feed, {"words": LENGTHS}, fetch)
    for name, a, b in zip(fetch, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=name)


def test_gru_unit_layer_trains_like_paddle():
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", dims=5)
        prev = layer.data("prev", dims=4, stop_gradient=False)
        hidden, reset_prev, gate = layer.gru_unit(layer.fc(x, 12), prev, 12, origin_mode=True)
        loss = layer.mean(hidden)
        fj.append_backward(loss)
    assert hidden.shape == reset_prev.shape == (-1, 4) and gate.shape == (-1, 12)
    rng = np.random.default_rng(3)
    feed = {"x": rng.uniform(-1, 1, (6, 5)).astype(np.float32), "prev": rng.uniform(-1, 1, (6, 4)).astype(np.float32)}
    fetch = [hidden.name, reset_prev.name, gate.name, "gru_unit_0.w_0@GRAD", "gru_unit_0.b_0@GRAD", "prev@GRAD"]
    ours, theirs = _run_both(main, startup, feed, {}, fetch)
    for name, a, b in zip(fetch, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=name)


def test_lstm_unit_layer_is_fc_of_concat_then_the_cell():
    """lstm_unit is gone from Paddle 2.x: the layer's ops are checked, and its result against NumPy."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", dims=5)
        h_prev = layer.data("h", dims=3)
        c_prev = layer.data("c", dims=3)
        h, c = layer.lstm_unit(x, h_prev, c_prev, forget_bias=0.5)
    assert [op.type for op in main.global_block().ops] == ["concat", "mul", "elementwise_add", "lstm_unit"]
    assert h.shape == c.shape == (-1, 3)
    rng = np.random.default_rng(4)
    feed = {k: rng.uniform(-1, 1, (4, n)).astype(np.float32) for k, n in (("x", 5), ("h", 3), ("c", 3))}
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    h_out, c_out, w, b = exe.run(main, feed=feed, fetch_list=[h, c, "fc_0.w_0", "fc_0.b_0"], scope=scope)
    gates = np.concatenate([feed["x"], feed["h"]], axis=1) @ w + b
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    i, f, o, g = np.split(gates, 4, axis=1)
    expect_c = sig(f + 0.5) * feed["c"] + sig(i) * np.tanh(g)
    np.testing.assert_allclose(c_out, expect_c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h_out, sig(o) * np.tanh(expect_c), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_padding_and_batch_neighbours_never_change_a_sequence(kind):
    """A sequence alone and inside a larger, differently bucketed batch gives the same rows and the
    same gradient rows: neither padding nor longer neighbours reach it."""
    width = 8 if kind == "lstm" else 6
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        words = layer.data("words", dims=width, lod_level=1, stop_gradient=False)
        if kind == "lstm":
            out, _ = layer.dynamic_lstm(words, 8, is_reverse=True)
        else:
            out = layer.dynamic_gru(words, 2)
        loss = layer.reduce_sum(layer.sequence_pool(out, "sum"))
        fj.append_backward(loss)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(5)
    alone = rng.uniform(-1, 1, (3, width)).astype(np.float32)
    others = rng.uniform(-1, 1, (40, width)).astype(np.float32)
    small = exe.run(main, feed={"words": _lod_tensor(alone, [[3]])}, fetch_list=[out, "words@GRAD"], scope=scope)
    big_rows = np.concatenate([others[:17], alone, others[17:]])
    big = exe.run(main, feed={"words": _lod_tensor(big_rows, [[17, 0, 3, 23]])},
                  fetch_list=[out, "words@GRAD"], scope=scope)
    for a, b in zip(small, big):
        np.testing.assert_allclose(a, b[17:20], rtol=1e-6, atol=1e-7)


def test_recurrent_layers_refuse_bad_input_when_built():
    with fj.program_guard(fj.Program(), fj.Program()):
        plain = layer.data("plain", dims=8)
        seqs = layer.data("seqs", dims=8, lod_level=1)
        with pytest.raises(fj.ShapeError, match="lod_level 1"):
            layer.dynamic_lstm(plain, 8)
        with pytest.raises(fj.ShapeError, match=r"\[-1, 12\]"):
            layer.dynamic_lstm(seqs, 12)
        with pytest.raises(ValueError, match="multiple of 4"):
            layer.dynamic_lstm(seqs, 6)
        with pytest.raises(ValueError, match="together"):
            layer.dynamic_lstm(seqs, 8, h_0=plain)
        with pytest.raises(ValueError, match="gate_activation"):
            layer.dynamic_gru(layer.data("g", dims=6, lod_level=1), 2, gate_activation="softmax")
        with pytest.raises(fj.ShapeError, match=r"\[-1, 6\]"):
            layer.dynamic_gru(seqs, 2)


def test_an_initial_state_for_another_number_of_sequences_is_a_clear_error():
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        words = layer.data("words", dims=6, lod_level=1)
        h0 = layer.data("h0", dims=2)
        hidden = layer.dynamic_gru(words, 2, h_0=h0)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    feed = {"words": _lod_tensor(_words(5, width=6), [[2, 3]]), "h0": np.zeros((3, 2), np.float32)}
    with pytest.raises(fj.OpRuntimeError, match=r"H0 must be \[num_sequences, D\] = \[2, 2\]"):
        exe.run(main, feed=feed, fetch_list=[hidden], scope=scope)
