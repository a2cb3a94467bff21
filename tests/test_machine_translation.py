"""The Fluid book's ``machine_translation`` chapter, scaled down: an encoder (embedding, fc,
``dynamic_lstm``, last step) and a ``DynamicRNN`` decoder whose memory starts from the encoding
(``memory(init=context, need_reorder=True)``), trained with Adam. Paddle parses the same forward
bytes, appends its own backward and Adam, starts from the same parameters and trains on the same
batches: the per-step losses agree."""

from __future__ import annotations

import jax  # (before paddle)
import numpy as np

import fluidjax as fj
from fluidjax import layer

SRC_DICT, TRG_DICT, EMB, HID = 30, 20, 8, 9      # LSTM width 9: Paddle 2.6.2's float32 AVX lstm_grad (width 8) is wrong
STEPS, BATCH, LR = 8, 3, 0.05


def _model():
    src = layer.data("src_word_id", dims=1, dtype="int64", lod_level=1)
    src_emb = layer.embedding(src, [SRC_DICT, EMB])
    fc1 = layer.fc(src_emb, HID * 4, activation="tanh")
    lstm_hidden, _ = layer.dynamic_lstm(fc1, HID * 4)
    context = layer.sequence_last_step(lstm_hidden)

    trg = layer.data("target_language_word", dims=1, dtype="int64", lod_level=1)
    trg_emb = layer.embedding(trg, [TRG_DICT, EMB])
    rnn = layer.DynamicRNN()
    with rnn.block():
        word = rnn.step_input(trg_emb)
        pre_state = rnn.memory(init=context, need_reorder=True)
        state = layer.fc([word, pre_state], HID, activation="tanh")
        score = layer.fc(state, TRG_DICT, activation="softmax")
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
