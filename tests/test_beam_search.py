"""``beam_search`` on random LoD beams against Paddle 2.6.2's kernel: selected ids and scores,
their two-level LoD, and ``parent_idx`` (plain rows whose count is data), for random numbers of
sources and prefixes, beam sizes, finished prefixes and both score modes."""

import jax  # noqa: F401  (before paddle)
import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer


def _program(width, beam_size, end_id, is_accumulated, with_ids):
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        pre_ids = layer.data("pre_ids", dims=1, dtype="int64")
        pre_scores = layer.data("pre_scores", dims=1)
        ids = layer.data("ids", dims=width, dtype="int64") if with_ids else None
        scores = layer.data("scores", dims=width, lod_level=2)
        outs = layer.beam_search(pre_ids, pre_scores, ids, scores, beam_size, end_id,
                                 is_accumulated=is_accumulated, return_parent_idx=True)
    return main, [v.name for v in outs]


@pytest.mark.parametrize("seed", range(6))
def test_beam_search_matches_paddle_on_random_beams(seed):
    import paddle_oracle as po

    rng = np.random.default_rng(seed)
    sources = int(rng.integers(1, 4))
    prefixes = [int(rng.integers(1, 4)) for _ in range(sources)]
    rows, width = sum(prefixes), int(rng.integers(2, 6))
    beam_size, end_id = int(rng.integers(1, 4)), 0
    is_accumulated, with_ids = bool(seed % 2), seed % 3 != 2
    main, fetch = _program(width, beam_size, end_id, is_accumulated, with_ids)
    # distinct scores (Paddle's tie order is an artifact of its insertion; see beam_search_cases.py)
    scores = rng.permutation(rows * width).reshape(rows, width).astype("float32") / (rows * width) + 0.01
    if is_accumulated:
        scores = np.log(scores)
    feed = {"pre_ids": rng.integers(0, 3, (rows, 1)).astype("int64"),     # some finished (0)
            "pre_scores": -rng.permutation(rows).reshape(rows, 1).astype("float32") / rows,
            "scores": scores}
    if with_ids:
        feed["ids"] = rng.integers(0, 10, (rows, width)).astype("int64")
    lods = {"scores": [prefixes, [1] * rows]}
    tensor = fj.LoDTensor(scores)
    tensor.set_recursive_sequence_lengths(lods["scores"])
    ours = fj.Executor().run(main, feed={**feed, "scores": tensor}, fetch_list=fetch, scope=fj.Scope(),
                             return_numpy=False)
    theirs = po.run_lod(main.serialize(), feed, fetch, lods=lods)
    for name, a, b in zip(fetch, ours, theirs):
        np.testing.assert_array_equal(np.asarray(a).reshape(-1), np.array(b).reshape(-1), err_msg=name)
    for a, b in zip(ours[:2], theirs[:2]):
        assert a.lod() == [list(level) for level in b.lod()]


# Four steps of two source sentences, beam 2 (offsets): step 0 the start words; step 1 two
# candidates per source; step 2 source 0's second beam ends (end_id 0); step 3 source 0 is pruned
# (no candidates), so its sentences start at step 2, source 1's at step 3.
DECODE_STEPS = [
    ([[0, 1, 2], [0, 1, 2]], [1, 1], [0.0, 0.0]),
    ([[0, 1, 2], [0, 2, 4]], [3, 5, 7, 2], [-0.1, -0.5, -0.3, -0.2]),
    ([[0, 2, 4], [0, 1, 2, 4, 4]], [4, 0, 6, 8], [-0.4, -0.6, -0.5, -0.35]),
    ([[0, 2, 4], [0, 0, 0, 1, 2]], [9, 10], [-0.6, -0.7]),
]


def _lengths(offsets):
    return [[b - a for a, b in zip(level, level[1:])] for level in offsets]


def test_beam_search_decode_matches_paddle():
    import paddle_oracle as po

    main, startup = fj.Program(), fj.Program()
    feed, lods = {}, {}
    with fj.program_guard(main, startup):
        ids_array = layer.create_array("int64")
        scores_array = layer.create_array("float32")
        for t, (offsets, ids, scores) in enumerate(DECODE_STEPS):
            i = layer.fill_constant([1], "int64", t)
            layer.array_write(layer.data(f"ids_{t}", dims=1, dtype="int64", lod_level=2), i, ids_array)
            layer.array_write(layer.data(f"scores_{t}", dims=1, lod_level=2), i, scores_array)
            feed[f"ids_{t}"] = np.array(ids, "int64").reshape(-1, 1)
            feed[f"scores_{t}"] = np.array(scores, "float32").reshape(-1, 1)
            lods[f"ids_{t}"] = lods[f"scores_{t}"] = _lengths(offsets)
        sentence_ids, sentence_scores = layer.beam_search_decode(ids_array, scores_array, beam_size=2, end_id=0)
    fetch = [sentence_ids.name, sentence_scores.name]
    ours_feed = {}
    for name, value in feed.items():
        tensor = fj.LoDTensor(value)
        tensor.set_recursive_sequence_lengths(lods[name])
        ours_feed[name] = tensor
    ours = fj.Executor().run(main, feed=ours_feed, fetch_list=fetch, scope=fj.Scope(), return_numpy=False)
    theirs = po.run_lod(main.serialize(), feed, fetch, lods=lods)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(a).reshape(-1), np.array(b).reshape(-1))
        assert a.lod() == [list(level) for level in b.lod()]
    # traced by hand: source 0 from step 2 (1 3 4 and 1 5 0: its second beam ended), source 1
    # from step 3 (both its beams continue candidate 1 of step 1, id 7), best final score first
    np.testing.assert_array_equal(np.asarray(ours[0]).reshape(-1), [1, 3, 4, 1, 5, 0, 1, 7, 6, 9, 1, 7, 8, 10])
    assert ours[0].lod() == [[0, 2, 4], [0, 3, 6, 10, 14]]
    np.testing.assert_allclose(np.asarray(ours[1]).reshape(-1)[6:10], [0.0, -0.3, -0.5, -0.6])


def _decoder_program(steps, beam, vocab=12, hidden=6, end_id=0):
    """The book's generation decoder unrolled ``steps`` times: embedding and fc of the previous
    words and state, softmax, topk, accumulated log-scores, beam_search; each step's ids and scores
    written to arrays and decoded by beam_search_decode."""
    main, startup = fj.Program(), fj.Program()
    startup.random_seed = 3
    with fj.program_guard(main, startup):
        init_ids = layer.data("init_ids", dims=1, dtype="int64", lod_level=2)
        init_scores = layer.data("init_scores", dims=1, lod_level=2)
        context = layer.data("context", dims=hidden)
        ids_array, scores_array = layer.create_array("int64"), layer.create_array("float32")
        zero = layer.fill_constant([1], "int64", 0)
        layer.array_write(init_ids, zero, ids_array)
        layer.array_write(init_scores, zero, scores_array)
        pre_ids, pre_score, pre_state = init_ids, init_scores, context
        for t in range(steps):
            expanded = layer.sequence_expand(pre_state, pre_score)
            emb = layer.embedding(pre_ids, [vocab, hidden], param_attr=fj.ParamAttr(name="emb"))
            state = layer.fc([expanded, emb], hidden, activation="tanh",
                             param_attr=[fj.ParamAttr(name="w_state"), fj.ParamAttr(name="w_emb")],
                             bias_attr=fj.ParamAttr(name="b_state"))
            state_lod = layer.lod_reset(state, pre_score)
            score = layer.fc(state_lod, vocab, activation="softmax", param_attr=fj.ParamAttr(name="w_out"),
                             bias_attr=fj.ParamAttr(name="b_out"))
            top_scores, top_ids = layer.topk(score, beam)
            accu = layer.elementwise_add(layer.log(top_scores), pre_score, axis=0)
            pre_ids, pre_score = layer.beam_search(pre_ids, pre_score, top_ids, accu, beam, end_id)
            pre_state = state
            i = layer.fill_constant([1], "int64", t + 1)
            layer.array_write(pre_ids, i, ids_array)
            layer.array_write(pre_score, i, scores_array)
        out_ids, out_scores = layer.beam_search_decode(ids_array, scores_array, beam, end_id)
    return main, startup, [out_ids.name, out_scores.name]


def test_unrolled_beam_search_decoder_matches_paddle():
    import paddle_oracle as po

    sources, beam = 3, 2
    main, startup, fetch = _decoder_program(steps=3, beam=beam)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    lods = {"init_ids": [[1] * sources, [1] * sources], "init_scores": [[1] * sources, [1] * sources]}
    feed = {"init_ids": np.ones((sources, 1), "int64"), "init_scores": np.zeros((sources, 1), "float32"),
            "context": np.random.default_rng(0).uniform(-1, 1, (sources, 6)).astype("float32")}
    ours_feed = dict(feed)
    for name, lengths in lods.items():
        tensor = fj.LoDTensor(feed[name])
        tensor.set_recursive_sequence_lengths(lengths)
        ours_feed[name] = tensor
    ours = exe.run(main, feed=ours_feed, fetch_list=fetch, scope=scope, return_numpy=False)
    theirs = po.run_lod(main.serialize(), feed, fetch, po.persistable_values(main, scope), lods=lods)
    np.testing.assert_array_equal(np.asarray(ours[0]).reshape(-1), np.array(theirs[0]).reshape(-1))
    np.testing.assert_allclose(np.asarray(ours[1]).reshape(-1), np.array(theirs[1]).reshape(-1), rtol=1e-5, atol=1e-6)
    assert ours[0].lod() == [list(level) for level in theirs[0].lod()]
    assert ours[0].lod()[0] == [0, beam, 2 * beam, 3 * beam]


def _while_decoder_program(max_len, beam, vocab=12, hidden=6, end_id=0):
    """:func:`_decoder_program` as Fluid's book writes it: one ``While`` step per word
    (``beam_decoder.while_beam_decoder``) with the same parameters."""
    from beam_decoder import while_beam_decoder

    def step(pre_ids, expanded, pre_score):
        emb = layer.embedding(pre_ids, [vocab, hidden], param_attr=fj.ParamAttr(name="emb"))
        state = layer.fc([expanded, emb], hidden, activation="tanh",
                         param_attr=[fj.ParamAttr(name="w_state"), fj.ParamAttr(name="w_emb")],
                         bias_attr=fj.ParamAttr(name="b_state"))
        score = layer.fc(layer.lod_reset(state, pre_score), vocab, activation="softmax",
                         param_attr=fj.ParamAttr(name="w_out"), bias_attr=fj.ParamAttr(name="b_out"))
        return state, score

    main, startup = fj.Program(), fj.Program()
    startup.random_seed = 3
    with fj.program_guard(main, startup):
        init_ids = layer.data("init_ids", dims=1, dtype="int64", lod_level=2)
        init_scores = layer.data("init_scores", dims=1, lod_level=2)
        context = layer.data("context", dims=hidden)
        out_ids, out_scores, counter = while_beam_decoder(context, init_ids, init_scores, step, max_len, beam, end_id)
    return main, startup, [out_ids.name, out_scores.name, counter.name]


@pytest.mark.parametrize("max_len", [3, 40])
def test_while_beam_search_decoder_matches_paddle(max_len):
    """The arrays' LoD elements change size inside the loop (one prefix per source at the first
    step, up to ``beam`` later), and with room for 40 steps every beam ends first: the loop stops
    on ``is_empty(selected_ids)`` after the same number of steps as Paddle's."""
    import paddle_oracle as po

    sources, beam = 3, 2
    main, startup, fetch = _while_decoder_program(max_len, beam)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    lods = {"init_ids": [[1] * sources, [1] * sources], "init_scores": [[1] * sources, [1] * sources]}
    feed = {"init_ids": np.ones((sources, 1), "int64"), "init_scores": np.zeros((sources, 1), "float32"),
            "context": np.random.default_rng(0).uniform(-1, 1, (sources, 6)).astype("float32")}
    ours_feed = {k: fj.create_lod_tensor(v, lods[k]) if k in lods else v for k, v in feed.items()}
    ours = exe.run(main, feed=ours_feed, fetch_list=fetch, scope=scope, return_numpy=False)
    theirs = po.run_lod(main.serialize(), feed, fetch, po.persistable_values(main, scope), lods=lods)
    np.testing.assert_array_equal(np.asarray(ours[0]).reshape(-1), np.array(theirs[0]).reshape(-1))
    np.testing.assert_allclose(np.asarray(ours[1]).reshape(-1), np.array(theirs[1]).reshape(-1), rtol=1e-5, atol=1e-6)
    assert ours[0].lod() == [list(level) for level in theirs[0].lod()]
    steps = int(np.asarray(ours[2])[0])
    assert steps == int(np.array(theirs[2])[0])
    if max_len == 3:
        assert steps == 3
        # the unrolled decoder of the same parameters (3 steps) gives the same sentences
        unrolled, unrolled_startup, unrolled_fetch = _decoder_program(steps=3, beam=beam)
        plain = exe.run(unrolled, feed=ours_feed, fetch_list=unrolled_fetch, scope=scope, return_numpy=False)
        np.testing.assert_array_equal(np.asarray(plain[0]), np.asarray(ours[0]))
    else:
        assert steps < max_len, "every beam should have ended before 40 steps"


def test_while_array_of_plain_elements_refuses_lod_elements():
    """A loop that writes a two-level LoD tensor into an array whose first element is plain is
    refused with a message naming the op, not run with the LoD silently dropped."""
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", dims=2)
        ids = layer.data("ids", dims=1, dtype="int64", lod_level=2)
        array = layer.create_array("float32")
        i = layer.zeros([1], "int64")
        layer.array_write(x, i, array)
        n = layer.fill_constant([1], "int64", 2)
        cond = layer.less_than(i, n)
        loop = layer.While(cond)
        with loop.block():
            emb = layer.embedding(ids, [10, 2])
            layer.increment(i, 1, in_place=True)
            layer.array_write(emb, i, array)
            layer.assign(layer.less_than(i, n), cond)
        out = layer.array_read(array, i)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": np.ones((3, 2), "float32"),
            "ids": fj.create_lod_tensor(np.ones((3, 1), "int64"), [[1, 1, 1], [1, 1, 1]])}
    with pytest.raises(fj.OpRuntimeError, match="write_to_array.*holds plain tensors; X is a LoD tensor"):
        exe.run(main, feed=feed, fetch_list=[out], scope=scope)
