"""LoD values at run time: feeding, bucketing, sequence_pool against Paddle, the seed's inputs."""

import math

import jax
import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer


POOLS = ["sum", "average", "sqrt", "max", "last", "first"]


def _lod_tensor(data, lengths):
    t = fj.LoDTensor(np.asarray(data))
    t.set_recursive_sequence_lengths(lengths)
    return t


def _pool_program(pool, width=3, lod_level=1, pad_value=0.0):
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", dims=width, lod_level=lod_level, stop_gradient=False)
        out = layer.sequence_pool(x, pool, pad_value=pad_value)
        loss = layer.mean(layer.elementwise_mul(out, out))
        grads = fj.append_backward(loss)
        del grads
    return main, x, out, loss


def _paddle_pool(pool, data, lengths, pad_value=0.0):
    import paddle

    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, data.shape[1]], "float32", lod_level=len(lengths))
        x.stop_gradient = False
        out = paddle.static.nn.sequence_pool(x, pool, pad_value=pad_value)
        loss = paddle.mean(paddle.multiply(out, out))
        paddle.static.append_backward(loss)
    place = paddle.CPUPlace()
    exe = paddle.static.Executor(place)
    t = paddle.base.create_lod_tensor(data, lengths, place)
    got = exe.run(main, feed={"x": t}, fetch_list=[out, loss, "x@GRAD"], return_numpy=False)
    return [np.array(v) for v in got], got[0].lod()


@pytest.mark.parametrize("pool", POOLS)
def test_sequence_pool_matches_paddle_with_an_empty_sequence(pool):
    rng = np.random.default_rng(0)
    lengths = [[3, 0, 1, 4]]
    data = rng.standard_normal((8, 3)).astype(np.float32)
    main, x, out, loss = _pool_program(pool, pad_value=0.5)
    exe = fj.Executor()
    ours = exe.run(main, feed={"x": _lod_tensor(data, lengths)}, fetch_list=[out, loss, "x@GRAD"])
    theirs, _ = _paddle_pool(pool, data, lengths, pad_value=0.5)
    for a, b, what in zip(ours, theirs, ("Out", "loss", "X@GRAD")):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"{pool} {what}")


@pytest.mark.parametrize("pool", ["sum", "max", "last"])
def test_two_levels_pool_to_one_level_like_paddle(pool):
    rng = np.random.default_rng(1)
    lengths = [[2, 1], [3, 1, 2]]                    # 2 paragraphs: 2 and 1 sentences; 3 sentences
    data = rng.standard_normal((6, 4)).astype(np.float32)
    main, x, out, loss = _pool_program(pool, width=4, lod_level=2)
    out_t, loss_v = fj.Executor().run(main, feed={"x": _lod_tensor(data, lengths)}, fetch_list=[out, loss],
                                      return_numpy=False)
    theirs, lod = _paddle_pool(pool, data, lengths)
    np.testing.assert_allclose(np.asarray(out_t), theirs[0], rtol=1e-5)
    assert out_t.lod() == lod == [[0, 2, 3]]
    np.testing.assert_allclose(np.asarray(loss_v), theirs[1], rtol=1e-5)


@jax.default_matmul_precision("float32")   # GPUs would use TF32, whose sums differ with the shape
def test_padding_never_reaches_a_result():
    """The same sequences alone and inside a larger, differently padded batch give the same rows."""
    rng = np.random.default_rng(2)
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        words = layer.data("w", dims=5, lod_level=1)
        hidden = layer.fc(words, 4, activation="tanh")              # acts on the padded rows too
        pooled = layer.sequence_pool(hidden, "average")
        total = layer.mean(hidden)                                  # a LoD-aware reduction
    exe = fj.Executor()
    exe.run(startup)
    seqs = [rng.standard_normal((n, 5)).astype(np.float32) for n in (3, 5)]
    extra = [rng.standard_normal((n, 5)).astype(np.float32) for n in (9, 1, 7)]

    def run(batch):
        data = np.concatenate(batch)
        return exe.run(main, feed={"w": _lod_tensor(data, [[len(s) for s in batch]])}, fetch_list=[pooled, total])

    alone, alone_mean = run(seqs)                                    # 8 rows: bucket 8
    mixed, _ = run(seqs + extra)                                     # 25 rows: bucket 32
    np.testing.assert_allclose(mixed[:2], alone, rtol=1e-6, atol=1e-7)
    hidden_rows = np.tanh(np.concatenate(seqs) @ np.asarray(fj.global_scope().find_var("fc_0.w_0").get_tensor())
                          + np.asarray(fj.global_scope().find_var("fc_0.b_0").get_tensor()))
    np.testing.assert_allclose(alone_mean, hidden_rows.mean(), rtol=1e-5)


@pytest.mark.parametrize("reduce", ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"])
def test_reductions_over_the_rows_of_a_lod_value_see_the_real_rows_only(reduce):
    """reduce_* over the row dimension of a LoD value (padded to its bucket, the padding rows
    made non-zero by exp) equals NumPy's over the real rows, and so does its gradient (finite
    differences of NumPy's); over the other dimensions the rows keep their LoD."""
    rng = np.random.default_rng(5)
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        words = layer.data("w", dims=3, lod_level=1)
        words.stop_gradient = False
        rows = layer.exp(words)                                   # padding rows: exp(0) = 1, not 0
        fn = getattr(layer, reduce)
        over_all, over_rows = fn(rows), fn(rows, dim=0)
        per_row = fn(rows, dim=1)                                 # one value per row: keeps the LoD
        fj.backward.append_backward(layer.elementwise_add(layer.reduce_sum(over_rows), over_all))
    exe = fj.Executor()
    exe.run(startup)
    data = rng.uniform(-1, 1, (5, 3)).astype(np.float32)          # 5 rows: bucket 8
    got = exe.run(main, feed={"w": _lod_tensor(data, [[2, 3]])},
                  fetch_list=[over_all, over_rows, per_row, "w@GRAD"], return_numpy=False)
    npfn = {"reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max, "reduce_min": np.min,
            "reduce_prod": np.prod}[reduce]
    e = np.exp(data.astype(np.float64))
    np.testing.assert_allclose(np.asarray(got[0]), npfn(e), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(got[1]), npfn(e, axis=0), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(got[2]), npfn(e, axis=1), rtol=1e-5)
    assert got[2].recursive_sequence_lengths() == [[2, 3]]

    def loss(x):
        ex = np.exp(x)
        return npfn(ex, axis=0).sum() + npfn(ex)

    eps, fd = 1e-6, np.zeros_like(e)
    for i in np.ndindex(*e.shape):
        d = np.zeros_like(e)
        d[i] = eps
        fd[i] = (loss(data + d) - loss(data - d)) / (2 * eps)
    np.testing.assert_allclose(np.asarray(got[3]), fd, rtol=2e-3, atol=1e-4)


def test_an_epoch_of_random_lengths_compiles_logarithmically_often():
    rng = np.random.default_rng(3)
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        words = layer.data("w", dims=2, lod_level=1)
        out = layer.sequence_pool(words, "sum")
    exe = fj.Executor()
    longest = 0
    for _ in range(60):
        lengths = rng.integers(1, 40, size=8)
        longest = max(longest, int(lengths.sum()))
        data = np.ones((int(lengths.sum()), 2), np.float32)
        got, = exe.run(main, feed={"w": _lod_tensor(data, [lengths.tolist()])}, fetch_list=[out])
        np.testing.assert_array_equal(got[:, 0], lengths)
    assert exe.trace_count <= math.ceil(math.log2(longest)) + 1


@jax.default_matmul_precision("float32")
def test_seed_paragraph_and_video_inputs_run():
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        paragraph = layer.data("paragraph", lod_level=2, input_size=60)
        sentences = layer.sequence_pool(paragraph, "sum")                  # words -> sentences
        paragraphs = layer.sequence_pool(sentences, "average")            # sentences -> paragraphs
        p_out = layer.fc(paragraphs, 8)
        video = layer.data("video", lod_level=1, input_size=48)
        v_out = layer.fc(layer.sequence_pool(video, "max"), 8)
    assert sentences.lod_level == 1 and paragraphs.lod_level == 0
    exe = fj.Executor()
    exe.run(startup)
    rng = np.random.default_rng(4)
    para = _lod_tensor(rng.standard_normal((9, 60)).astype(np.float32), [[2, 1], [3, 4, 2]])
    vid = _lod_tensor(rng.standard_normal((5, 48)).astype(np.float32), [[2, 3]])
    a, b = exe.run(main, feed={"paragraph": para, "video": vid}, fetch_list=[p_out, v_out])
    assert a.shape == (2, 8) and b.shape == (2, 8)
    data = np.asarray(para)
    expected = np.stack([(data[0:3].sum(0) + data[3:7].sum(0)) / 2, data[7:9].sum(0)])
    w = np.asarray(fj.global_scope().find_var("fc_0.w_0").get_tensor())
    bias = np.asarray(fj.global_scope().find_var("fc_0.b_0").get_tensor())
    np.testing.assert_allclose(a, expected @ w + bias, rtol=1e-4, atol=1e-5)


def test_lod_feeds_are_checked_by_name():
    x = layer.data("x", dims=2, lod_level=1)
    out = layer.sequence_pool(x, "sum")
    exe = fj.Executor()
    # Fluid's rule: a dense array is a tensor without LoD; the op that needs sequences refuses it
    with pytest.raises(fj.FluidJaxError, match="sequence_pool needs a LoD input"):
        exe.run(feed={"x": np.ones((3, 2), np.float32)}, fetch_list=[out])
    two = fj.LoDTensor(np.ones((3, 2), np.float32))
    two.set_recursive_sequence_lengths([[1], [3]])
    with pytest.raises(fj.FeedError, match="'x'.*2 LoD level"):
        exe.run(feed={"x": two}, fetch_list=[out])
    with pytest.raises((fj.FeedError, ValueError), match="ends at offset 2, but the data has 3 rows"):
        bad = fj.LoDTensor(np.ones((3, 2), np.float32))          # refused here, or at the run
        bad.set_lod([[0, 2]])
        exe.run(feed={"x": bad}, fetch_list=[out])


# -- the sequence layers in whole programs ---------------------------------------------------------
def _run_in_paddle(main, feed, lods, fetch, params):
    import paddle_oracle as po

    return po.run(main.serialize(), feed, fetch, params, lods=lods)


def _text_conv_program(vocab=20, width=6):
    """Embedding -> sequence_conv -> row_conv -> max pool -> fc softmax -> cross entropy (Fluid's text CNN)."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        words = layer.data("words", dims=1, dtype="int64", lod_level=1)
        label = layer.data("label", dims=1, dtype="int64")
        emb = layer.embedding(words, size=[vocab, width])
        conv = layer.sequence_conv(emb, num_filters=5, filter_size=3, act="tanh")
        ahead = layer.row_conv(conv, future_context_size=1, activation="relu")
        pooled = layer.sequence_pool(ahead, "max")
        prob = layer.fc(pooled, 3, activation="softmax")
        loss = layer.mean(layer.cross_entropy(prob, label))
        fj.append_backward(loss)
    return main, startup, emb, conv, ahead, loss


def test_text_conv_layers_match_paddle():
    """sequence_conv, row_conv and a max pool over embedded LoD ids: outputs, loss and the
    parameters' gradients equal Paddle's run of the same serialized program."""
    rng = np.random.default_rng(1)
    lengths = [[4, 1, 6, 3]]                    # row_conv's kernel refuses empty sequences
    ids = rng.integers(0, 20, (14, 1)).astype(np.int64)
    label = rng.integers(0, 3, (4, 1)).astype(np.int64)
    main, startup, emb, conv, ahead, loss = _text_conv_program()
    exe = fj.Executor()
    scope = fj.Scope()
    exe.run(startup, scope=scope)
    params = {p.name: np.asarray(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
    fetch = [conv.name, ahead.name, loss.name] + [p + "@GRAD" for p in sorted(params)]
    ours = exe.run(main, feed={"words": _lod_tensor(ids, lengths), "label": label}, fetch_list=fetch, scope=scope)
    theirs = _run_in_paddle(main, {"words": ids, "label": label}, {"words": lengths}, fetch, params)
    for name, a, b in zip(fetch, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6, err_msg=name)


def _layout_program():
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", dims=2, lod_level=1, stop_gradient=False)
        pad_value = layer.fill_constant([1], "float32", 0.0)
        padded, length = layer.sequence_pad(x, pad_value)
        back = layer.sequence_unpad(padded, length)
        sliced = layer.sequence_slice(back, layer.fill_constant([4, 1], "int64", 0),
                                      layer.elementwise_min(layer.reshape(length, [-1, 1]),
                                                            layer.fill_constant([4, 1], "int64", 2)))
        conv = layer.sequence_conv(sliced, num_filters=3, filter_size=2, bias_attr=False)
        pooled = layer.sequence_pool(conv, "sum")
        loss = layer.mean(layer.elementwise_mul(pooled, pooled))
        fj.append_backward(loss)
    return main, startup, back, sliced, pooled, loss


def test_padding_never_reaches_the_layout_ops():
    """pad -> unpad -> slice -> conv -> pool: a batch alone and inside a larger, differently padded
    batch gives the same per-sequence rows and the same gradient rows; and Paddle agrees."""
    rng = np.random.default_rng(2)
    main, startup, back, sliced, pooled, loss = _layout_program()
    exe = fj.Executor()
    scope = fj.Scope()
    exe.run(startup, scope=scope)
    small_lengths = [3, 0, 2, 1]
    small = rng.standard_normal((6, 2)).astype(np.float32)
    # The same first three sequences, then a long fourth: 25 rows, a bigger bucket, a longer pad.
    big_lengths = [3, 0, 2, 20]
    big = np.concatenate([small[:5], rng.standard_normal((20, 2)).astype(np.float32)])
    fetch = [back.name, sliced.name, pooled.name, "x@GRAD"]
    alone = exe.run(main, feed={"x": _lod_tensor(small, [small_lengths])}, fetch_list=fetch, scope=scope)
    together = exe.run(main, feed={"x": _lod_tensor(big, [big_lengths])}, fetch_list=fetch, scope=scope)
    np.testing.assert_array_equal(alone[0][:5], together[0][:5])          # unpadded rows of sequences 0-2
    np.testing.assert_array_equal(alone[1][:4], together[1][:4])          # their slices (2 + 0 + 2 rows)
    # their pooled rows: XLA may sum a differently sized batch in another order (an ulp); a leak
    # of padding would differ by far more
    np.testing.assert_allclose(alone[2][:3], together[2][:3], rtol=1e-6, atol=1e-7)
    # their gradient rows (the same: an ulp or two of summation order, 1.8e-6 relative seen in a
    # clean-clone run; a leak of padding would differ by far more)
    np.testing.assert_allclose(alone[3][:5], together[3][:5], rtol=1e-5, atol=1e-8)
    params = {p.name: np.asarray(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
    theirs = _run_in_paddle(main, {"x": small}, {"x": [small_lengths]}, fetch, params)
    for name, a, b in zip(fetch, alone, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)


def test_sequence_layers_build_their_lod_levels():
    """Each layer's result has the lod_level Paddle gives it, known when the program is built."""
    with fj.program_guard(fj.Program(), fj.Program()):
        x = layer.data("x", dims=4, lod_level=1)
        ids = layer.data("ids", dims=1, dtype="int64", lod_level=1)
        plain = layer.data("plain", dims=4)
        img = layer.data("img", shape=[1, 5, 5])
        assert layer.sequence_conv(x, 3, activation="relu").lod_level == 1
        assert layer.sequence_expand(x, x).lod_level == 1
        assert layer.sequence_expand(plain, x).lod_level == 0
        out, length = layer.sequence_pad(x, layer.fill_constant([1], "float32", 0.0), maxlen=7)
        assert (out.lod_level, out.shape, length.dtype) == (0, (-1, 7, 4), "int64")
        assert layer.sequence_unpad(out, length).lod_level == 1
        assert layer.sequence_mask(length, maxlen=7).shape == (-1, 7)
        assert layer.sequence_reshape(x, 2).shape == (-1, 2)
        assert layer.sequence_enumerate(ids, 3).shape == (-1, 3)
        assert layer.lod_reset(plain, target_lod=[0, 2]).lod_level == 1
        assert layer.lod_append(x, [0, 1, 2]).lod_level == 2
        seq = layer.im2sequence(img, filter_size=2, stride=1)
        assert (seq.lod_level, seq.shape) == (1, (-1, 4))
        assert layer.row_conv(x, 2).lod_level == 1
        with pytest.raises(ValueError, match="activation"):
            layer.sequence_conv(x, 3, act="relu", activation="tanh")


def test_sizes_that_are_data_give_clear_errors():
    """A mask width that is data cannot shape a compiled step: a clear error says to give maxlen;
    learned padding without its PaddingData rows is refused when the op is built."""
    from fluidjax.ir.errors import OpRuntimeError, ShapeError

    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        lengths = layer.data("lengths", dims=1, dtype="int64")
        mask = layer.sequence_mask(layer.reshape(lengths, [-1]))
    with pytest.raises(OpRuntimeError, match="maxlen"):
        fj.Executor().run(main, feed={"lengths": np.array([[2], [3]], np.int64)}, fetch_list=[mask], scope=fj.Scope())
    with fj.program_guard(fj.Program(), fj.Program()):
        x = layer.data("x", dims=2, lod_level=1)
        w = layer.data("w", dims=2)
        out = layer.data("out", dims=2)
        block = fj.default_main_program().global_block()
        with pytest.raises(ShapeError, match="PaddingData of shape \\[2, 2\\]"):
            block.append_op("sequence_conv", {"X": x, "Filter": w}, {"Out": out},
                            {"contextLength": 3, "contextStart": -1, "paddingTrainable": True})


def test_sequence_mask_with_its_width_known_matches_numpy():
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        lengths = layer.data("lengths", shape=[], dtype="int64")
        mask = layer.sequence_mask(lengths, maxlen=5, dtype="float32")
    got, = fj.Executor().run(main, feed={"lengths": np.array([2, 0, 5], np.int64)}, fetch_list=[mask], scope=fj.Scope())
    np.testing.assert_array_equal(got, (np.arange(5)[None, :] < np.array([2, 0, 5])[:, None]).astype(np.float32))


def test_im2sequence_layer_with_real_image_sizes():
    """input_image_size keeps each image's patches inside its real size (Paddle's inference use)."""
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        img = layer.data("img", shape=[1, 3, 4])
        sizes = layer.data("sizes", dims=2)
        seq = layer.im2sequence(img, filter_size=2, input_image_size=sizes)
    x = np.arange(24, dtype=np.float32).reshape(2, 1, 3, 4)
    got, = fj.Executor().run(main, feed={"img": x, "sizes": np.array([[2, 3], [3, 2]], np.float32)},
                             fetch_list=[seq], scope=fj.Scope(), return_numpy=False)
    assert got.recursive_sequence_lengths() == [[2, 2]]
    np.testing.assert_array_equal(np.asarray(got), [[0, 1, 4, 5], [1, 2, 5, 6], [12, 13, 16, 17], [16, 17, 20, 21]])


def test_layout_ops_keep_compilations_logarithmic():
    """Outputs sized from the inputs' buckets (expand, pad, unpad, slice, erase) keep an epoch of
    random lengths at ⌈log2(longest)⌉ + 1 compilations, and every batch's results stay exact."""
    rng = np.random.default_rng(5)
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        ids = layer.data("ids", dims=1, dtype="int64", lod_level=1)
        erased = main.global_block().create_var("erased", (-1, 1), "int64", 1)
        main.global_block().append_op("sequence_erase", {"X": ids}, {"Out": erased}, {"tokens": [3]})
        kept = layer.sequence_pool(layer.cast(erased, "float32"), "sum")
        state = layer.data("state", dims=2)
        expanded = layer.sequence_expand(state, ids)
        padded, length = layer.sequence_pad(layer.cast(ids, "float32"), layer.fill_constant([1], "float32", 0.0))
        back = layer.sequence_pool(layer.sequence_unpad(padded, length), "sum")
    exe = fj.Executor()
    longest = 0
    for _ in range(40):
        lengths = rng.integers(0, 30, size=6)
        longest = max(longest, int(lengths.sum()))
        data = rng.integers(0, 4, (int(lengths.sum()), 1)).astype(np.int64)
        st = rng.standard_normal((6, 2)).astype(np.float32)
        got = exe.run(main, feed={"ids": _lod_tensor(data, [lengths.tolist()]), "state": st},
                      fetch_list=[kept, expanded, back])
        seqs = np.split(data[:, 0], np.cumsum(lengths)[:-1])
        sums = np.array([s.sum() for s in seqs], np.float32)
        np.testing.assert_array_equal(got[0][:, 0], [s[s != 3].sum() for s in seqs])
        np.testing.assert_array_equal(got[1], np.repeat(st, lengths, axis=0))
        np.testing.assert_array_equal(got[2][:, 0], sums)
    assert exe.trace_count <= math.ceil(math.log2(longest)) + 1


def test_rows_after_expanding_a_plain_tensor_keep_their_count():
    """fc and mean after sequence_expand of a plain tensor: Paddle's rows and loss exactly, not the
    step's padded bound (the attention pattern of Fluid's machine translation model)."""
    rng = np.random.default_rng(6)
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        state = layer.data("state", dims=3, stop_gradient=False)
        words = layer.data("words", dims=3, lod_level=1)
        expanded = layer.sequence_expand(state, words)
        hidden = layer.fc(expanded, 4, activation="tanh")
        loss = layer.mean(hidden)
        fj.append_backward(loss)
    exe = fj.Executor()
    scope = fj.Scope()
    exe.run(startup, scope=scope)
    lengths = [[2, 0, 3]]
    feed = {"state": rng.standard_normal((3, 3)).astype(np.float32),
            "words": rng.standard_normal((5, 3)).astype(np.float32)}
    fetch = [hidden.name, loss.name, "state@GRAD"]
    ours = exe.run(main, feed={**feed, "words": _lod_tensor(feed["words"], lengths)}, fetch_list=fetch, scope=scope)
    params = {p.name: np.asarray(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
    theirs = _run_in_paddle(main, feed, {"words": lengths}, fetch, params)
    assert ours[0].shape == (5, 4)
    for name, a, b in zip(fetch, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_persistable_variable_assigned_a_sequence_holds_its_rows_and_lod(tmp_path):
    """assign of a LoD value to a global (persistable) variable: the scope holds the real rows and
    the LoD (as Paddle's scope does), so it reads, saves and loads back; the next run works."""
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = fj.data("x", [None, 2], "float32", lod_level=1)
        keep = layer.create_global_var([1, 2], 0.0, "float32", persistable=True, name="keep")
        layer.assign(layer.scale(x, 2.0), output=keep)
        total = layer.reduce_sum(x)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    data = np.arange(6, dtype="float32").reshape(3, 2)                 # 3 rows: padded to a bucket of 4
    for _ in range(2):
        got, = exe.run(main, feed={"x": _lod_tensor(data, [[2, 1]])}, fetch_list=[total], scope=scope)
        assert float(got) == data.sum()
        held = scope.find_var("keep").get_tensor()
        np.testing.assert_array_equal(np.array(held), 2 * data)
        assert held.recursive_sequence_lengths() == [[2, 1]]
    fj.io.save_persistables(exe, str(tmp_path), main_program=main, scope=scope)
    loaded = fj.Scope()
    fj.io.load_persistables(exe, str(tmp_path), main_program=main, scope=loaded)
    np.testing.assert_array_equal(np.array(loaded.find_var("keep").get_tensor()), 2 * data)
