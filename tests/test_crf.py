"""Whole programs with the CRF layers: a tiny LoD tagger (embedding → fc → linear_chain_crf, with
crf_decoding sharing its transitions and chunk_eval) trained in fluidjax and in Paddle 2.6.2 from
the same parameters on the same random batches; the layers' errors; padding never reaching a CRF
cost or gradient."""

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer
from fluidjax.ir.errors import ShapeError

VOCAB, TAGS, CHUNK_TYPES = 20, 5, 2          # IOB: 2 chunk types x 2 tags + "outside" = 5 tags
LR = 0.1


def _lod(data, lengths):
    t = fj.LoDTensor(np.asarray(data))
    t.set_recursive_sequence_lengths([list(lengths)])
    return t


def _tagger():
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        words = layer.data("word", dims=1, dtype="int64", lod_level=1)
        target = layer.data("target", dims=1, dtype="int64", lod_level=1)
        emb = layer.embedding(words, size=[VOCAB, 8])
        hidden = layer.fc(emb, 16, activation="tanh")
        emission = layer.fc(hidden, TAGS)
        cost = layer.linear_chain_crf(emission, target, param_attr=fj.ParamAttr(name="crfw"))
        loss = layer.mean(cost)
        path = layer.crf_decoding(emission, param_attr=fj.ParamAttr(name="crfw"))
        metrics = layer.chunk_eval(path, target, "IOB", CHUNK_TYPES)
    return main, startup, loss, cost, path, metrics


def _batches(count, seed=5):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        lengths = rng.integers(0, 7, 5)
        lengths[0] = max(lengths[0], 1)
        lengths[2] = 0                                       # an empty sentence in every batch
        rows = int(lengths.sum())
        yield (lengths.tolist(), rng.integers(0, VOCAB, (rows, 1)).astype("int64"),
               rng.integers(0, TAGS, (rows, 1)).astype("int64"))


def test_tagger_trains_like_paddle():
    import paddle
    import paddle_oracle as po

    main, startup, loss, cost, path, metrics = _tagger()
    startup.random_seed = 7          # the same initial parameters whatever ran before
    forward_bytes = main.serialize()
    with fj.program_guard(main, startup):
        fj.optimizer.SGD(learning_rate=LR).minimize(loss)
    scope = fj.Scope()
    exe = fj.Executor()
    exe.run(startup, scope=scope)
    params = {p.name: np.asarray(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
    assert params["crfw"].shape == (TAGS + 2, TAGS)

    pd_main = po.parse(forward_bytes)
    pd_startup = paddle.static.Program()
    with paddle.static.program_guard(pd_main, pd_startup):
        paddle.optimizer.SGD(learning_rate=LR).minimize(pd_main.global_block().var(loss.name))
    pd_scope, place = paddle.static.Scope(), paddle.CPUPlace()
    pd_exe = paddle.static.Executor(place)
    with paddle.static.scope_guard(pd_scope):
        pd_exe.run(pd_startup)                                      # the learning-rate variable
        for name, value in params.items():
            pd_scope.var(name).get_tensor().set(value, place)

    emission = main.global_block().ops[[op.type for op in main.global_block().ops].index("linear_chain_crf")]
    emission = emission.input("Emission")[0]
    fetch = [loss.name, cost.name, path.name] + [m.name for m in metrics] + [emission]
    losses = []
    for lengths, words, tags in _batches(6):
        ours = exe.run(main, feed={"word": _lod(words, lengths), "target": _lod(tags, lengths)},
                       fetch_list=fetch, scope=scope)
        with paddle.static.scope_guard(pd_scope):
            crfw = po.scope_values(pd_scope, ["crfw"])["crfw"]      # what this step decodes with
            theirs = pd_exe.run(pd_main, fetch_list=fetch, return_numpy=False, feed={
                "word": paddle.base.create_lod_tensor(words, [lengths], place),
                "target": paddle.base.create_lod_tensor(tags, [lengths], place)})
        theirs = [np.array(t) for t in theirs]
        np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-4, err_msg="mean CRF cost")
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-4, atol=1e-5, err_msg="per-sequence cost")
        assert ours[1][2, 0] == 0.0                                 # the empty sentence costs nothing
        np.testing.assert_allclose(ours[-1], theirs[-1], rtol=1e-4, atol=1e-5, err_msg="emission")
        if not np.array_equal(ours[2], theirs[2]):
            # Two paths within float32 rounding of each other's score (a near-tie) may be decoded
            # either way; each decoded path must still score the best (the score of the other).
            _assert_tied_paths(np.asarray(ours[2]).ravel(), np.asarray(theirs[2]).ravel(), theirs[-1], crfw,
                               lengths)
            continue                  # the metrics follow the path
        for a, b, what in zip(ours[3:-1], theirs[3:-1], ["precision", "recall", "f1", "infer", "label", "correct"]):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, err_msg=what)
        losses.append(float(ours[0]))
    assert losses[-1] < losses[0]                                   # it learns
    with paddle.static.scope_guard(pd_scope):
        final = po.scope_values(pd_scope, ["crfw"])["crfw"]
    np.testing.assert_allclose(np.asarray(scope.find_var("crfw").get_tensor()), final, rtol=1e-4, atol=1e-5)


def _path_score(path, emission, crfw):
    """A tag path's CRF score: start, emissions, transitions, end (crfw rows 0, 1 and 2...)."""
    score = crfw[0, path[0]] + crfw[1, path[-1]] + emission[np.arange(len(path)), path].sum()
    return score + sum(crfw[2 + a, b] for a, b in zip(path[:-1], path[1:]))


def _assert_tied_paths(ours, theirs, emission, crfw, lengths):
    start = 0
    for n in lengths:
        a, b = ours[start:start + n], theirs[start:start + n]
        if n and not np.array_equal(a, b):
            sa, sb = _path_score(a, emission[start:start + n], crfw), _path_score(b, emission[start:start + n], crfw)
            assert abs(sa - sb) <= 1e-5 * max(1.0, abs(sb)), (a, b, sa, sb)
        start += n


def test_crf_cost_and_gradient_ignore_padding_and_batch_mates():
    """A sequence's cost and gradients are the same alone and inside a batch padded differently."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        emission = layer.data("emission", dims=TAGS, lod_level=1, stop_gradient=False)
        target = layer.data("target", dims=1, dtype="int64", lod_level=1)
        cost = layer.linear_chain_crf(emission, target, param_attr=fj.ParamAttr(name="crfw"))
        fj.append_backward(layer.mean(cost))
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, TAGS)).astype("float32")
    y = rng.integers(0, TAGS, (5, 1)).astype("int64")
    fetch = [cost.name, "emission@GRAD"]
    alone_cost, alone_grad = exe.run(main, feed={"emission": _lod(x, [5]), "target": _lod(y, [5])},
                                     fetch_list=fetch, scope=scope)
    # The same sequence between others (7 + 5 + 0 + 6 = 18 rows, padded to 32 inside the step).
    other = rng.normal(size=(13, TAGS)).astype("float32") * 50           # large rows must not leak
    xs = np.concatenate([other[:7], x, other[7:]])
    ys = np.concatenate([np.zeros((7, 1), "int64"), y, np.ones((6, 1), "int64")])
    lengths = [7, 5, 0, 6]
    costs, grads = exe.run(main, feed={"emission": _lod(xs, lengths), "target": _lod(ys, lengths)},
                           fetch_list=fetch, scope=scope)
    np.testing.assert_allclose(costs[1], alone_cost[0], rtol=1e-6)
    assert costs[2, 0] == 0.0
    # The loss is the mean over sequences: 4 in the batch, 1 alone.
    np.testing.assert_allclose(np.asarray(grads)[7:12] * 4, np.asarray(alone_grad), rtol=1e-5, atol=1e-7)
    assert np.asarray(grads).shape == (18, TAGS) and np.isfinite(np.asarray(grads)).all()


def test_layer_errors_name_the_problem():
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        emission = layer.data("emission", dims=TAGS, lod_level=1)
        target = layer.data("target", dims=1, dtype="int64", lod_level=1)
        with pytest.raises(ValueError, match="no parameter named 'nope'"):
            layer.crf_decoding(emission, param_attr=fj.ParamAttr(name="nope"))
        with pytest.raises(ValueError, match="param_attr must name"):
            layer.crf_decoding(emission, param_attr=None)
        with pytest.raises(ShapeError, match=r"\[batch, max_len, tags\]"):
            layer.linear_chain_crf(emission, target, length=layer.data("n", shape=[], dtype="int64"))
        plain = layer.data("plain", dims=1, dtype="int64")
        with pytest.raises(ShapeError, match="Label must be a LoD tensor"):
            layer.linear_chain_crf(emission, plain)
        with pytest.raises(ValueError, match="both input_length and label_length"):
            layer.edit_distance(target, target, input_length=layer.data("hl", shape=[], dtype="int64"))


def test_edit_distance_layer_erases_ignored_tokens():
    """ignored_tokens go through sequence_erase, as in Fluid (NumPy Levenshtein as the oracle)."""
    from fluidjax.ir import registry

    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        hyp = layer.data("hyp", dims=1, dtype="int64", lod_level=1)
        ref = layer.data("ref", dims=1, dtype="int64", lod_level=1)
        if not registry.has("sequence_erase"):
            with pytest.raises(NotImplementedError, match="sequence_erase"):
                layer.edit_distance(hyp, ref, ignored_tokens=[0])
            return
        distance, count = layer.edit_distance(hyp, ref, normalized=False, ignored_tokens=[0, 9])
    hyps = [[1, 0, 2, 3], [0, 0], [4, 9, 5]]
    refs = [[1, 2, 4], [7], [5, 4, 0]]
    out, n = fj.Executor().run(main, feed={
        "hyp": _lod(np.concatenate(hyps).reshape(-1, 1).astype("int64"), [len(h) for h in hyps]),
        "ref": _lod(np.concatenate(refs).reshape(-1, 1).astype("int64"), [len(r) for r in refs])},
        fetch_list=[distance, count], scope=fj.Scope())

    def levenshtein(a, b):
        d = np.arange(len(b) + 1)
        for i, t in enumerate(a, 1):
            prev, d[0] = d.copy(), i
            for j, u in enumerate(b, 1):
                d[j] = min(prev[j] + 1, d[j - 1] + 1, prev[j - 1] + (t != u))
        return d[-1]

    keep = lambda s: [t for t in s if t not in (0, 9)]  # noqa: E731
    assert int(np.asarray(n)[0]) == 3
    np.testing.assert_array_equal(np.asarray(out)[:, 0], [levenshtein(keep(h), keep(r)) for h, r in zip(hyps, refs)])


def test_padded_form_with_lengths_agrees_with_the_lod_form():
    """The same sequences as LoD rows and as a padded batch with lengths: same costs, same paths
    (each form is checked against Paddle in the op table; this ties the layers' two forms)."""
    lengths = [4, 0, 2, 5]
    width, rows = max(lengths), sum(lengths)
    rng = np.random.default_rng(2)
    x = rng.normal(size=(rows, TAGS)).astype("float32")
    y = rng.integers(0, TAGS, (rows, 1)).astype("int64")
    padded_x = np.zeros((len(lengths), width, TAGS), "float32")
    padded_y = np.zeros((len(lengths), width), "int64")
    start = 0
    for n, length in enumerate(lengths):
        padded_x[n, :length], padded_y[n, :length] = x[start:start + length], y[start:start + length, 0]
        start += length
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        e = layer.data("e", dims=TAGS, lod_level=1)
        t = layer.data("t", dims=1, dtype="int64", lod_level=1)
        pe = layer.data("pe", shape=[width, TAGS])
        pt = layer.data("pt", shape=[width], dtype="int64")
        n = layer.data("n", shape=[], dtype="int64")
        attr = fj.ParamAttr(name="crfw")
        cost = layer.linear_chain_crf(e, t, param_attr=attr)
        path = layer.crf_decoding(e, param_attr=attr)
        padded_cost = layer.linear_chain_crf(pe, pt, param_attr=attr, length=n)
        padded_path = layer.crf_decoding(pe, param_attr=attr, length=n)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    a, p, pa, pp = exe.run(main, scope=scope, fetch_list=[cost, path, padded_cost, padded_path], feed={
        "e": _lod(x, lengths), "t": _lod(y, lengths), "pe": padded_x, "pt": padded_y,
        "n": np.asarray(lengths, "int64")})
    np.testing.assert_allclose(a, pa, rtol=1e-6)
    assert pp.shape == (len(lengths), width)
    np.testing.assert_array_equal(np.concatenate([pp[k, :length] for k, length in enumerate(lengths)]), p[:, 0])
    assert not pp[1].any() and not pp[0, 4:].any()                       # 0 past each length


def test_out_of_range_labels_are_index_errors_and_computed_lod_ids_are_checked_on_real_rows():
    main, startup, loss, cost, path, metrics = _tagger()
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    words = _lod(np.arange(5).reshape(5, 1), [2, 3])
    # chunk_eval reads crf_decoding's computed (LoD) path: checked inside the step, on real rows.
    ok = exe.run(main, feed={"word": words, "target": _lod(np.full((5, 1), TAGS - 1), [2, 3])},
                 fetch_list=[loss, metrics[0]], scope=scope)
    assert np.isfinite(ok[0]).all()
    with pytest.raises(fj.IndexOutOfRangeError, match="linear_chain_crf.*Label.*7"):
        exe.run(main, feed={"word": words, "target": _lod(np.array([[0], [1], [7], [2], [3]]), [2, 3])},
                fetch_list=[loss], scope=scope)
