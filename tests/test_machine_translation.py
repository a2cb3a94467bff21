"""The Fluid book's ``machine_translation`` chapter, scaled down: an encoder (embedding, fc,
``dynamic_lstm``, last step) and a ``DynamicRNN`` decoder whose memory starts from the encoding
(``memory(init=context, need_reorder=True)``), trained with Adam. Paddle parses the same forward
bytes, appends its own backward and Adam, starts from the same parameters and trains on the same
batches: the per-step losses agree. Then the book's generation program (the same encoder and
decoder parameters, a ``While`` loop of ``beam_search`` steps with beam 4 that stops when every
beam has ended, ``beam_search_decode``) decodes the same ids in both systems."""

from __future__ import annotations

import jax  # (before paddle)
import numpy as np

import fluidjax as fj
from fluidjax import layer

SRC_DICT, TRG_DICT, EMB, HID = 30, 20, 8, 9      # LSTM width 9: Paddle 2.6.2's float32 AVX lstm_grad (width 8) is wrong
STEPS, BATCH, LR = 8, 3, 0.05
BEAM, MAX_LEN, START_ID, END_ID = 4, 10, 0, 1


def _encoder():
    src = layer.data("src_word_id", dims=1, dtype="int64", lod_level=1)
    src_emb = layer.embedding(src, [SRC_DICT, EMB], param_attr=fj.ParamAttr(name="src_emb"))
    fc1 = layer.fc(src_emb, HID * 4, activation="tanh", param_attr=fj.ParamAttr(name="enc_w"),
                   bias_attr=fj.ParamAttr(name="enc_b"))
    lstm_hidden, _ = layer.dynamic_lstm(fc1, HID * 4, param_attr=fj.ParamAttr(name="lstm_w"),
                                        bias_attr=fj.ParamAttr(name="lstm_b"))
    return layer.sequence_last_step(lstm_hidden)


def _decoder_step(word_emb, pre_state, state_first=False):
    """The decoder's new state (shared by training and generation). Generation puts the state
    first, as the book does, so that the new state has no LoD (``fc`` takes its first input's)."""
    inputs, names = [word_emb, pre_state], ["dec_w_word", "dec_w_state"]
    if state_first:
        inputs, names = inputs[::-1], names[::-1]
    return layer.fc(inputs, HID, activation="tanh", param_attr=[fj.ParamAttr(name=n) for n in names],
                    bias_attr=fj.ParamAttr(name="dec_b"))


def _scores(state):
    return layer.fc(state, TRG_DICT, activation="softmax", param_attr=fj.ParamAttr(name="out_w"),
                    bias_attr=fj.ParamAttr(name="out_b"))


def _trg_embedding(ids):
    return layer.embedding(ids, [TRG_DICT, EMB], param_attr=fj.ParamAttr(name="trg_emb"))


def _model():
    context = _encoder()
    trg = layer.data("target_language_word", dims=1, dtype="int64", lod_level=1)
    trg_emb = _trg_embedding(trg)
    rnn = layer.DynamicRNN()
    with rnn.block():
        word = rnn.step_input(trg_emb)
        pre_state = rnn.memory(init=context, need_reorder=True)
        state = _decoder_step(word, pre_state)
        score = _scores(state)
        rnn.update_memory(pre_state, state)
        rnn.output(score)
    prediction = rnn()
    label = layer.data("target_language_next_word", dims=1, dtype="int64", lod_level=1)
    loss = layer.mean(layer.cross_entropy(prediction, label))
    return loss


def _batches(seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(STEPS):
        src_len = rng.integers(1, 6, BATCH).tolist()
        trg_len = rng.integers(1, 6, BATCH).tolist()
        yield ({"src_word_id": rng.integers(0, SRC_DICT, (sum(src_len), 1)).astype("int64"),
                "target_language_word": rng.integers(0, TRG_DICT, (sum(trg_len), 1)).astype("int64"),
                "target_language_next_word": rng.integers(0, TRG_DICT, (sum(trg_len), 1)).astype("int64")},
               {"src_word_id": [src_len], "target_language_word": [trg_len], "target_language_next_word": [trg_len]})


@jax.default_matmul_precision("float32")
def test_machine_translation_trains_like_paddle():
    import paddle

    import paddle_oracle as po

    main, startup = fj.Program(), fj.Program()
    startup.random_seed = 5
    with fj.program_guard(main, startup):
        loss = _model()
    forward = main.serialize()
    test_program = main.clone(for_test=True)
    with fj.program_guard(main, startup):
        fj.optimizer.Adam(learning_rate=LR).minimize(loss)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    params = {p.name: np.asarray(scope.find_var(p.name).get_tensor()).copy()
              for p in main.global_block().all_parameters()}
    batches = list(_batches())
    ours = []
    for values, lods in batches:
        feed = {k: fj.create_lod_tensor(v, lods[k]) for k, v in values.items()}
        ours.append(float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]))

    pd_main = po.parse(forward)
    pd_startup = paddle.static.Program()
    with paddle.static.program_guard(pd_main, pd_startup):
        paddle.optimizer.Adam(learning_rate=LR).minimize(pd_main.global_block().var(loss.name))
    pd_scope, place = paddle.static.Scope(), paddle.CPUPlace()
    with paddle.static.scope_guard(pd_scope):
        paddle.static.Executor(place).run(pd_startup)
        for n, v in params.items():
            pd_scope.var(n).get_tensor().set(np.ascontiguousarray(v), place)
    theirs = [float(po.run(pd_main, values, [loss.name], scope=pd_scope, lods=lods)[0]) for values, lods in batches]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, err_msg="per-step losses")
    first = {k: fj.create_lod_tensor(v, batches[0][1][k]) for k, v in batches[0][0].items()}
    after = float(exe.run(test_program, feed=first, fetch_list=[loss], scope=scope)[0])
    assert after < ours[0], f"did not learn: the first batch's loss went from {ours[0]} to {after}"

    for values, lods in batches[:2]:
        ids, lod, steps = _generate_like_paddle(scope, values, lods)
        assert lod[0] == [BEAM * i for i in range(BATCH + 1)]      # BEAM sentences per source
        assert 2 <= steps <= MAX_LEN and ids.size > BATCH * BEAM


def _generator():
    """The book's ``decode`` (``beam_decoder.while_beam_decoder``) with the trained encoder and
    decoder parameters: beam ``BEAM``, at most ``MAX_LEN`` steps."""
    from beam_decoder import while_beam_decoder

    def step(pre_ids, expanded, pre_score):
        state = _decoder_step(_trg_embedding(pre_ids), expanded, state_first=True)
        return state, _scores(layer.lod_reset(state, pre_score))

    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        context = _encoder()
        init_ids = layer.data("init_ids", dims=1, dtype="int64", lod_level=2)
        init_scores = layer.data("init_scores", dims=1, lod_level=2)
        ids, scores, counter = while_beam_decoder(context, init_ids, init_scores, step, MAX_LEN, BEAM, END_ID)
    return main, [ids.name, scores.name, counter.name]


def _generate_like_paddle(scope, values, lods):
    """Decode ``values`` with the generator in fluidjax and in Paddle (the same parameters, read
    from ``scope``): the same sentences, scores and LoD; returns fluidjax's (ids, lod, steps)."""
    import paddle_oracle as po

    program, fetch = _generator()
    sources = len(lods["src_word_id"][0])
    feed = {"src_word_id": values["src_word_id"], "init_ids": np.full((sources, 1), START_ID, "int64"),
            "init_scores": np.zeros((sources, 1), "float32")}
    feed_lods = {"src_word_id": lods["src_word_id"], "init_ids": [[1] * sources] * 2,
                 "init_scores": [[1] * sources] * 2}
    ours_feed = {k: fj.create_lod_tensor(v, feed_lods[k]) for k, v in feed.items()}
    ours = fj.Executor().run(program, feed=ours_feed, fetch_list=fetch, scope=scope, return_numpy=False)
    theirs = po.run_lod(program.serialize(), feed, fetch, po.persistable_values(program, scope), lods=feed_lods)
    np.testing.assert_array_equal(np.asarray(ours[0]).reshape(-1), np.array(theirs[0]).reshape(-1))
    np.testing.assert_allclose(np.asarray(ours[1]).reshape(-1), np.array(theirs[1]).reshape(-1), rtol=1e-4, atol=1e-5)
    assert ours[0].lod() == [list(level) for level in theirs[0].lod()]
    assert int(np.asarray(ours[2])[0]) == int(np.array(theirs[2])[0]), "the loop ran a different number of steps"
    return np.asarray(ours[0]).reshape(-1), ours[0].lod(), int(np.asarray(ours[2])[0])
