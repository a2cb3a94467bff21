"""LoD tensor arrays (lod_rank_table, max_sequence_len, lod_tensor_to_array, array_to_lod_tensor,
reorder_lod_tensor_by_rank, shrink_rnn_memory) and Fluid 1.x's DynamicRNN, checked against
Paddle 2.6.2 running the same program bytes, against a NumPy reference and finite differences."""

import jax  # (before paddle)
import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer

LENGTHS = [[2, 4, 1, 3, 4]]          # ties (stable order); Paddle's reorder fails on an empty sequence


def _lod_tensor(data, lengths):
    t = fj.LoDTensor(np.asarray(data))
    t.set_recursive_sequence_lengths(lengths)
    return t


def _run_here(main, startup, feed, lods, fetch, return_numpy=True):
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    fj_feed = {k: _lod_tensor(v, lods[k]) if k in lods else v for k, v in feed.items()}
    return exe.run(main, feed=fj_feed, fetch_list=fetch, scope=scope, return_numpy=return_numpy), scope


def _run_paddle(main, feed, lods, fetch, params=None):
    import paddle_oracle as po

    return po.run_lod(main.serialize(), feed, fetch, params, lods=lods)


def _rows(rows, width, seed=0, dtype="float32"):
    return np.random.default_rng(seed).uniform(-1, 1, (rows, width)).astype(dtype)


def _rank(lengths):
    """Paddle's rank table: indices by length, longest first, ties in order (stable)."""
    order = sorted(range(len(lengths)), key=lambda k: -lengths[k])
    return order, [lengths[k] for k in order]


# -- the LoD-array ops -----------------------------------------------------------------------------
def _array_program():
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", dims=3, lod_level=1)
        h = layer.data("h", dims=2)
        table = layer.lod_rank_table(x)
        longest = layer.max_sequence_len(table)
        arr = layer.lod_tensor_to_array(x, table)
        back = layer.array_to_lod_tensor(arr, table)
        step1 = layer.array_read(arr, layer.fill_constant([1], "int64", 1))
        count = layer.array_length(arr)
        reordered = layer.reorder_lod_tensor_by_rank(x, table)
        h_ranked = layer.reorder_lod_tensor_by_rank(h, table)
        shrunk = layer.shrink_memory(h_ranked, layer.fill_constant([1], "int64", 2), table)
    fetch = [longest, back, step1, count, reordered, h_ranked, shrunk]
    return main, startup, [v.name for v in fetch]


def check_lod_array_ops_match_paddle():
    """Every LoD-array op in one program, run here and by Paddle: values, LoD, row counts."""
    main, startup, fetch = _array_program()
    lengths = LENGTHS[0]
    xs, hs = _rows(sum(lengths), 3), _rows(len(lengths), 2, seed=1)
    feed, lods = {"x": xs, "h": hs}, {"x": LENGTHS}
    ours, _ = _run_here(main, startup, feed, lods, fetch, return_numpy=False)
    theirs = _run_paddle(main, feed, lods, fetch)
    longest, back, step1, count, reordered, h_ranked, shrunk = ours
    order, ranked = _rank(lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    assert int(np.asarray(longest)[0]) == max(lengths) == int(np.array(theirs[0])[0])
    # array_to_lod_tensor(lod_tensor_to_array(x)) is x, with x's LoD
    np.testing.assert_array_equal(np.asarray(back), np.array(theirs[1]))
    np.testing.assert_array_equal(np.asarray(back), xs)
    assert back.lod() == theirs[1].lod() == [offsets.tolist()]
    # step 1: row 1 of each sequence longer than 1, in rank order (Paddle: exactly those rows; here
    # one row per sequence, the real ones first and zeros after)
    expect = np.stack([xs[offsets[k] + 1] for k, n in zip(order, ranked) if n > 1])
    np.testing.assert_array_equal(np.array(theirs[2]), expect)
    np.testing.assert_array_equal(np.asarray(step1)[:len(expect)], expect)
    assert not np.asarray(step1)[len(expect):].any()
    assert int(np.asarray(count)[0]) == int(np.array(theirs[3])[0]) == max(lengths)
    np.testing.assert_array_equal(np.asarray(reordered), np.array(theirs[4]))
    assert reordered.lod() == theirs[4].lod() == [np.concatenate([[0], np.cumsum(ranked)]).tolist()]
    np.testing.assert_array_equal(np.asarray(h_ranked), hs[order])
    np.testing.assert_array_equal(np.asarray(h_ranked), np.array(theirs[5]))
    running = sum(n > 2 for n in ranked)
    np.testing.assert_array_equal(np.array(theirs[6]), hs[order][:running])
    np.testing.assert_array_equal(np.asarray(shrunk)[:running], hs[order][:running])
    assert not np.asarray(shrunk)[running:].any()


def test_lod_array_ops_match_paddle():
    check_lod_array_ops_match_paddle()


# -- DynamicRNN ------------------------------------------------------------------------------------
HIDDEN = 4


def _drnn_program(dtype="float32", boot=False):
    """h_t = tanh([x_t, h_{t-1}] · W + b) per sequence; loss = mean of every step's h."""
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", dims=3, lod_level=1, dtype=dtype, stop_gradient=False)
        h0 = layer.data("h0", dims=HIDDEN, dtype=dtype, stop_gradient=False) if boot else None
        drnn = layer.DynamicRNN()
        with drnn.block():
            word = drnn.step_input(x)
            if boot:
                prev = drnn.memory(init=h0, need_reorder=True)
            else:
                prev = drnn.memory(shape=[HIDDEN], value=0.0, dtype=dtype)
            hidden = layer.fc([word, prev], HIDDEN, activation="tanh")
            drnn.update_memory(prev, hidden)
            drnn.output(hidden)
        out = drnn()
        loss = layer.mean(out)
    return main, startup, out, loss


def _reference(xs, lengths, params, h0=None):
    """The same RNN in JAX, sequence by sequence: (outputs in x's row order, loss)."""
    import jax.numpy as jnp

    w_x, w_h, b = params
    outs, start = [], 0
    for k, n in enumerate(lengths):
        h = jnp.zeros((HIDDEN,), xs.dtype) if h0 is None else h0[k]
        for t in range(n):
            h = jnp.tanh(xs[start + t] @ w_x + h @ w_h + b)
            outs.append(h)
        start += n
    out = jnp.stack(outs)
    return out, jnp.mean(out)


def _param_names(main):
    names = sorted(p.name for p in main.all_parameters())
    weights = [n for n in names if ".w_" in n]
    bias = [n for n in names if ".b_" in n]
    return weights + bias


def check_dynamic_rnn_matches_paddle_and_numpy(boot=False):
    """DynamicRNN's output equals a per-sequence JAX RNN and Paddle running the same bytes."""
    main, startup, out, loss = _drnn_program(boot=boot)
    lengths = LENGTHS[0]
    xs = _rows(sum(lengths), 3, seed=3)
    feed, lods = {"x": xs}, {"x": LENGTHS}
    if boot:
        feed["h0"] = _rows(len(lengths), HIDDEN, seed=4)
    (ours, ours_loss), scope = _run_here(main, startup, feed, lods, [out.name, loss.name], return_numpy=False)
    import paddle_oracle as po

    params = po.persistable_values(main, scope)
    theirs = _run_paddle(main, feed, lods, [out.name, loss.name], params)
    ref, ref_loss = _reference(xs, lengths, [params[n] for n in _param_names(main)], feed.get("h0"))
    np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ours), np.array(theirs[0]), rtol=1e-5, atol=1e-6)
    assert ours.lod() == theirs[0].lod() == [np.concatenate([[0], np.cumsum(lengths)]).tolist()]
    np.testing.assert_allclose(np.asarray(ours_loss), np.array(theirs[1]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("boot", [False, True], ids=["zero-memory", "boot-memory"])
def test_dynamic_rnn_matches_paddle_and_numpy(boot):
    check_dynamic_rnn_matches_paddle_and_numpy(boot)


@pytest.mark.parametrize("boot", [False, True], ids=["zero-memory", "boot-memory"])
def test_dynamic_rnn_gradients_match_jax_and_paddle(boot):
    """Gradients of the weights, the bias, x (and the boot memory) from fluidjax's backward equal
    jax.grad of the reference RNN and Paddle's own backward of the same forward program."""
    import jax.numpy as jnp

    main, startup, out, loss = _drnn_program("float64", boot=boot)
    forward = main.serialize()
    fj.append_backward(loss)
    lengths = LENGTHS[0]
    xs = _rows(sum(lengths), 3, seed=5, dtype="float64")
    feed, lods = {"x": xs}, {"x": LENGTHS}
    if boot:
        feed["h0"] = _rows(len(lengths), HIDDEN, seed=6, dtype="float64")
    names = _param_names(main)
    wanted = names + ["x"] + (["h0"] if boot else [])
    fetch = [n + "@GRAD" for n in wanted]
    ours, scope = _run_here(main, startup, feed, lods, fetch)
    import paddle_oracle as po

    params = po.persistable_values(main, scope)

    def loss_of(w_x, w_h, b, x, h0):
        return _reference(x, lengths, [w_x, w_h, b], h0)[1]

    args = [jnp.asarray(params[n]) for n in names] + [jnp.asarray(xs), jnp.asarray(feed["h0"]) if boot else None]
    argnums = (0, 1, 2, 3, 4) if boot else (0, 1, 2, 3)
    expect = jax.grad(loss_of, argnums=argnums)(*args)
    for name, got, want in zip(wanted, ours, expect):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-7, atol=1e-10, err_msg=name)

    import paddle

    prog = po.parse(forward)
    with paddle.static.program_guard(prog):
        paddle.static.append_backward(prog.global_block().var(loss.name))
    theirs = po.run(prog, feed, fetch, params, lods=lods)
    for name, got, want in zip(wanted, ours, theirs):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-7, atol=1e-10, err_msg=name)


def test_dynamic_rnn_gradient_is_a_scan_bounded_by_the_longest_sequence(monkeypatch):
    """The backward of a DynamicRNN's ``while`` is a scan over the rank table's bound on the
    longest sequence: linear in the steps. Before, it recomputed every step's input from the
    loop's start (T(T+1)/2 body runs: 2,048 steps took 7.5 s a training step instead of 0.19 s on
    the CPU). Here the recomputing path fails if taken; the gradients still equal jax.grad's and
    Paddle's."""
    from fluidjax.lowering.ops import while_loop

    def refuse(*args, **kwargs):
        raise AssertionError("the DynamicRNN's gradient took the quadratic recomputing path")

    monkeypatch.setattr(while_loop, "_grad_recompute", refuse)
    test_dynamic_rnn_gradients_match_jax_and_paddle(boot=True)


def test_dynamic_rnn_static_input_matches_paddle():
    """A step reading a LoD static input (reordered like the sequences, shrunk to the running
    ones, pooled per sequence): outputs and Paddle's backward's gradients agree."""
    import paddle_oracle as po

    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", dims=3, lod_level=1, dtype="float64", stop_gradient=False)
        enc = layer.data("enc", dims=HIDDEN, lod_level=1, dtype="float64", stop_gradient=False)
        drnn = layer.DynamicRNN()
        with drnn.block():
            word = drnn.step_input(x)
            memory = drnn.static_input(enc)
            prev = drnn.memory(shape=[HIDDEN], value=0.0, dtype="float64")
            pooled = layer.sequence_pool(memory, "sum")
            hidden = layer.fc([word, prev], HIDDEN, activation="tanh") + pooled
            drnn.update_memory(prev, hidden)
            drnn.output(hidden)
        out = drnn()
        loss = layer.mean(out)
    forward = main.serialize()
    fj.append_backward(loss)
    lengths, enc_lengths = LENGTHS[0], [[1, 3, 2, 2, 1]]
    feed = {"x": _rows(sum(lengths), 3, seed=7, dtype="float64"),
            "enc": _rows(sum(enc_lengths[0]), HIDDEN, seed=8, dtype="float64")}
    lods = {"x": LENGTHS, "enc": enc_lengths}
    fetch = [out.name, "x@GRAD", "enc@GRAD"] + [n + "@GRAD" for n in _param_names(main)]
    ours, scope = _run_here(main, startup, feed, lods, fetch)
    params = po.persistable_values(main, scope)
    import paddle

    prog = po.parse(forward)
    with paddle.static.program_guard(prog):
        paddle.static.append_backward(prog.global_block().var(loss.name))
    theirs = po.run(prog, feed, fetch, params, lods=lods)
    for name, a, b in zip(fetch, ours, theirs):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-7, atol=1e-10, err_msg=name)


def test_dynamic_rnn_with_an_empty_sequence_and_bucket_padding_matches_numpy():
    """An empty sequence among others, rows padded to a larger bucket: the output has x's LoD and
    each sequence's steps are the reference RNN's; the empty one contributes nothing."""
    main, startup, out, loss = _drnn_program()
    lengths = [3, 0, 5, 1]
    xs = _rows(sum(lengths), 3, seed=9)
    (ours,), scope = _run_here(main, startup, {"x": xs}, {"x": [lengths]}, [out.name], return_numpy=False)
    import paddle_oracle as po

    params = po.persistable_values(main, scope)
    ref, _ = _reference(xs, lengths, [params[n] for n in _param_names(main)])
    np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=1e-5, atol=1e-6)
    assert ours.lod() == [[0, 3, 3, 8, 9]]


def test_dynamic_rnn_misuse_is_a_clear_error():
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", dims=3, lod_level=1)
        plain = layer.data("p", dims=3)
        drnn = layer.DynamicRNN()
        with pytest.raises(ValueError, match="inside rnn.block"):
            drnn.step_input(x)
        with pytest.raises(ValueError, match="only be read after"):
            drnn()
        with drnn.block():
            with pytest.raises(TypeError, match="LoD tensor"):
                drnn.step_input(plain)
            with pytest.raises(ValueError, match="step_input should be invoked before"):
                drnn.memory(shape=[4])
            word = drnn.step_input(x)
            with pytest.raises(ValueError, match="invoke memory before update_memory"):
                drnn.update_memory(word, word)
            drnn.output(word)
        with pytest.raises(ValueError, match="only be invoked once"):
            with drnn.block():
                pass
