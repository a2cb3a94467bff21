"""Mechanisms the PaddlePaddle/models corpus' NLP scripts needed (docs/fluid1.md, "Corpus"),
each checked against Paddle 2.6.2 running the same program bytes where Paddle has the op, else
against NumPy."""

from __future__ import annotations

import os
import warnings

import jax  # noqa: F401  (before paddle)
import numpy as np
import pytest

import fluidjax as fluid
import paddle_oracle as po
from fluidjax.ir.errors import ParameterMismatchError, TensorFormatError, UnsafeFormatError


def _programs():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    return main, startup


# -- 1. fluid.save / fluid.load / load_program_state / set_program_state -------------------------
def _trained(hidden=3):
    """An fc + Adam program after its startup and one step, in the global scope."""
    main, startup = _programs()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", shape=[4], dtype="float32")
        loss = fluid.layers.mean(fluid.layers.fc(x, hidden))
        fluid.optimizer.Adam(learning_rate=0.1).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    feed = {"x": np.arange(8, dtype="float32").reshape(2, 4)}
    exe.run(main, feed=feed, fetch_list=[loss])
    return main, exe, feed, loss


def _values(program, predicate):
    scope = fluid.global_scope()
    return {v.name: np.asarray(scope.find_var(v.name).get_tensor()).copy()
            for v in program.list_vars() if predicate(v)}


def test_save_then_load_restores_parameters_and_optimizer_state(tmp_path):
    """fluid.save writes .pdparams/.pdopt/.pdmodel (no pickle: fluidjax's state file); a load
    after more training puts back every parameter and every Adam moment / beta pow / lr."""
    main, exe, feed, loss = _trained()
    saved = _values(main, fluid.io.is_persistable)
    path = str(tmp_path / "ckpt" / "step_1")
    fluid.save(main, path)
    for suffix in (".pdparams", ".pdopt", ".pdmodel"):
        with open(path + suffix, "rb") as f:
            assert f.read(2)[:1] != b"\x80"          # never a pickle
    exe.run(main, feed=feed, fetch_list=[loss])
    assert any(not np.array_equal(saved[n], v) for n, v in _values(main, fluid.io.is_persistable).items())
    fluid.load(main, path, exe)
    restored = _values(main, fluid.io.is_persistable)
    assert restored.keys() == saved.keys() and any("moment" in n for n in saved)
    for name in saved:
        np.testing.assert_array_equal(restored[name], saved[name], err_msg=name)
    state = fluid.io.load_program_state(path)
    assert state.keys() == saved.keys()
    # the .pdmodel is the program Fluid would write: Paddle parses it and runs its forward
    import paddle
    with open(path + ".pdmodel", "rb") as f:
        parsed = paddle.static.Program.parse_from_string(f.read())
    assert [op.type for op in parsed.global_block().ops] == [op.type for op in main.global_block().ops]


def test_load_program_state_then_set_program_state_on_a_partial_program(tmp_path):
    """The test program (parameters, no optimizer state) takes what it has of the state; names
    it lacks are reported with a warning (Fluid's behaviour), and its forward equals Paddle's
    on the same program bytes with the loaded parameters."""
    main, exe, feed, loss = _trained()
    path = str(tmp_path / "m")
    fluid.save(main, path)
    params = _values(main, fluid.io.is_parameter)
    test_prog = main.clone(for_test=True)
    state = fluid.io.load_program_state(path + ".pdparams")   # a suffix is accepted, as in Fluid
    for name in params:
        np.testing.assert_array_equal(state[name], params[name])
    state = {n: v + 1.0 for n, v in state.items()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fluid.io.set_program_state(test_prog, state)
    scope = fluid.global_scope()
    for name in params:
        np.testing.assert_array_equal(np.asarray(scope.find_var(name).get_tensor()), params[name] + 1.0)
    ours, = exe.run(test_prog, feed=feed, fetch_list=[loss])
    theirs, = po.run(test_prog.serialize(), feed, [loss.name], {n: params[n] + 1.0 for n in params})
    np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-5)
    # a program without the optimizer's moments: those names are left over (not in main's clone?)
    leftover = set(state) - {v.name for v in test_prog.list_vars() if fluid.io.is_persistable(v)}
    assert not leftover or any("not set" in str(w.message) for w in caught)


def test_load_refuses_a_state_of_another_shape_and_changes_nothing(tmp_path):
    main, exe, feed, loss = _trained(hidden=3)
    path = str(tmp_path / "m")
    fluid.save(main, path)
    other, exe2, _, _ = _trained(hidden=5)
    before = _values(other, fluid.io.is_persistable)
    with pytest.raises(ParameterMismatchError, match=r"has shape \[3\], the program.s variable is \[5\]"):
        fluid.load(other, path, exe2)
    after = _values(other, fluid.io.is_persistable)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name])
    state = fluid.io.load_program_state(path)
    with pytest.raises(ParameterMismatchError, match="needs shape"):
        fluid.io.set_program_state(other, state)


def test_load_of_a_truncated_state_file_is_a_typed_error(tmp_path):
    main, exe, _, _ = _trained()
    path = str(tmp_path / "m")
    fluid.save(main, path)
    data = open(path + ".pdparams", "rb").read()
    with open(path + ".pdparams", "wb") as f:
        f.write(data[:-5])
    with pytest.raises(TensorFormatError, match="truncated"):
        fluid.load(main, path, exe)


def test_a_paddle_pdparams_pickle_is_refused_and_the_documented_conversion_works(tmp_path):
    """Paddle 2.6.2's paddle.static.save writes pickles: fluidjax refuses them (UnsafeFormatError,
    never unpickling) and says how to convert; the conversion it names (Paddle's
    load_program_state -> numpy.savez -> numpy.load(allow_pickle=False) -> set_program_state)
    gives fluidjax Paddle's values."""
    import paddle
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[4], dtype="float32")
        out = fluid.layers.fc(x, 3)
    pmain = paddle.static.Program.parse_from_string(main.serialize())
    pstart = paddle.static.Program.parse_from_string(startup.serialize())
    pscope = paddle.static.Scope()
    pexe = paddle.static.Executor(paddle.CPUPlace())
    path = str(tmp_path / "paddle_model")
    with paddle.static.scope_guard(pscope):
        pexe.run(pstart)
        paddle.static.save(pmain, path)
        expected = {v.name: np.array(pscope.find_var(v.name).get_tensor())
                    for v in pmain.list_vars() if v.persistable and v.name not in ("feed", "fetch")}
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    with pytest.raises(UnsafeFormatError, match="load_program_state.*allow_pickle=False"):
        fluid.load(main, path, exe)
    with pytest.raises(UnsafeFormatError):
        fluid.io.load_program_state(path)
    # the conversion the message names, the Paddle half in the trusted (this) process
    npz = str(tmp_path / "state.npz")
    np.savez(npz, **paddle.static.load_program_state(path))
    fluid.io.set_program_state(main, dict(np.load(npz, allow_pickle=False)))
    feed = {"x": np.ones((2, 4), "float32")}
    ours, = exe.run(main, feed=feed, fetch_list=[out])
    theirs, = po.run(main.serialize(), feed, [out.name], expected)
    np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-6)


def test_load_falls_back_to_save_persistables_directories(tmp_path):
    """Without a .pdparams, fluid.load / load_program_state read save_persistables' directory,
    as Fluid 1.8 does (the scripts' --init_checkpoint of older checkpoints)."""
    main, exe, feed, loss = _trained()
    saved = _values(main, fluid.io.is_persistable)
    folder = str(tmp_path / "persist")
    fluid.io.save_persistables(exe, folder, main)
    exe.run(main, feed=feed, fetch_list=[loss])
    fluid.load(main, folder, exe)
    restored = _values(main, fluid.io.is_persistable)
    for name in saved:
        np.testing.assert_array_equal(restored[name], saved[name])
    state = fluid.io.load_program_state(folder)
    assert set(state) == set(saved)
    assert not os.path.exists(folder + ".pdparams")


# -- 2. a dense array fed to a lod_level > 0 variable ----------------------------------------------
def test_a_dense_array_fed_to_a_lod_level_2_variable_is_a_tensor_without_lod():
    """The Fluid 1.4 transformer's py_reader declares src_word with lod_level 2 and yields dense
    [batch, len, 1] arrays: Fluid took them as tensors without LoD (row-wise ops run); Paddle
    2.6.2 runs the same program bytes the same way. An op that needs sequences refuses, typed."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        w = fluid.layers.data("w", shape=[-1, 5, 1], dtype="int64", lod_level=2, append_batch_size=False)
        e = fluid.layers.embedding(w, size=[20, 4])
        s = fluid.layers.reduce_sum(e, dim=[1, 2])
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.global_scope()
    exe.run(startup)
    ids = (np.arange(10).reshape(2, 5, 1) * 3 % 20).astype("int64")
    ours, = exe.run(main, feed={"w": ids}, fetch_list=[s])
    params = {v.name: np.asarray(scope.find_var(v.name).get_tensor()) for v in main.list_vars() if v.persistable
              and v.name not in ("feed", "fetch")}
    theirs, = po.run(main.serialize(), {"w": ids}, [s.name], params)
    np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-5)
    # an op that needs the sequences: both refuse a dense feed
    main2, startup2 = _programs()
    with fluid.program_guard(main2, startup2):
        q = fluid.layers.data("q", shape=[3], dtype="float32", lod_level=1)
        pooled = fluid.layers.sequence_pool(q, "sum")
    dense = {"q": np.ones((4, 3), "float32")}
    with pytest.raises(fluid.FluidJaxError, match="LoD"):
        exe.run(main2, feed=dense, fetch_list=[pooled])
    with pytest.raises(Exception):
        po.run(main2.serialize(), dense, [pooled.name])



# -- 3. fluid.contrib.decoder.beam_search_decoder: InitState, StateCell, TrainingDecoder -----------
def _decoder_program():
    """rnn_search's training decoder, small: the encoder's first row (reordered) boots h, a zero
    cell state c; each step attends by pooling the static encoder rows and updates h, c."""
    from fluidjax.contrib.decoder.beam_search_decoder import InitState, StateCell, TrainingDecoder
    main, startup = _programs()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        src = fluid.layers.data("src", shape=[3], dtype="float32", lod_level=1)
        trg = fluid.layers.data("trg", shape=[2], dtype="float32", lod_level=1)
        label = fluid.layers.data("label", shape=[1], dtype="int64", lod_level=1)
        enc = fluid.layers.fc(src, 4, act="tanh")
        boot = fluid.layers.fc(fluid.layers.sequence_pool(enc, "first"), 4, act="tanh")
        cell0 = fluid.layers.fill_constant_batch_size_like(boot, shape=[-1, 4], value=0.0, dtype="float32")
        cell = StateCell(inputs={"x": None, "enc": None}, states={"h": InitState(init=boot, need_reorder=True),
                                                                   "c": InitState(init=cell0)}, out_state="h")

        @cell.state_updater
        def updater(state_cell):
            x, enc_rows = state_cell.get_input("x"), state_cell.get_input("enc")
            prev_h, prev_c = state_cell.get_state("h"), state_cell.get_state("c")
            context = fluid.layers.sequence_pool(enc_rows, "sum")
            c = prev_c + fluid.layers.fc(fluid.layers.concat([x, prev_h, context], axis=1), 4, act="tanh")
            state_cell.set_state("h", fluid.layers.tanh(c))
            state_cell.set_state("c", c)

        decoder = TrainingDecoder(cell)
        with decoder.block():
            word = decoder.step_input(trg)
            enc_rows = decoder.static_input(enc)
            decoder.state_cell.compute_state(inputs={"x": word, "enc": enc_rows})
            h = decoder.state_cell.get_state("h")
            decoder.state_cell.update_states()
            decoder.output(fluid.layers.fc(h, 5, act="softmax"))
        prob = decoder()
        loss = fluid.layers.mean(fluid.layers.cross_entropy(prob, label))
    return main, startup, prob, loss


def test_training_decoder_equals_paddle_on_the_same_program():
    """The program a TrainingDecoder builds (DynamicRNN: while, rank table, tensor arrays) runs
    in Paddle 2.6.2 as it is, and both give the same per-step probabilities and loss."""
    main, startup, prob, loss = _decoder_program()
    rng = np.random.RandomState(3)
    src_len, trg_len = [3, 1, 4], [2, 4, 1]
    feed = {"src": rng.rand(sum(src_len), 3).astype("float32"), "trg": rng.rand(sum(trg_len), 2).astype("float32"),
            "label": rng.randint(0, 5, (sum(trg_len), 1)).astype("int64")}
    lods = {"src": [src_len], "trg": [trg_len], "label": [trg_len]}
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    scope = fluid.global_scope()
    params = {v.name: np.asarray(scope.find_var(v.name).get_tensor()) for v in main.list_vars()
              if v.persistable and v.name not in ("feed", "fetch") and scope.find_var(v.name) is not None}
    ours = exe.run(main, feed={k: fluid.create_lod_tensor(v, lods[k], fluid.CPUPlace()) for k, v in feed.items()},
                   fetch_list=[prob, loss])
    theirs = po.run(main.serialize(), feed, [prob.name, loss.name], params, lods=lods)
    assert np.asarray(ours[0]).shape == (sum(trg_len), 5)
    np.testing.assert_allclose(np.asarray(ours[0]), theirs[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ours[1]).reshape(-1), theirs[1].reshape(-1), rtol=1e-5)


def test_state_cell_and_decoder_misuse_are_refused():
    from fluidjax.contrib.decoder.beam_search_decoder import BeamSearchDecoder, InitState, StateCell
    with pytest.raises(ValueError, match="init_boot"):
        InitState()
    with pytest.raises(ValueError, match="out_state"):
        StateCell(inputs={}, states={"h": InitState(init=fluid.layers.data("b", shape=[2]))}, out_state="c")
    with pytest.raises(fluid.NotOfferedError, match="dynamic_decode"):
        BeamSearchDecoder(state_cell=None, init_ids=None, init_scores=None, target_dict_dim=3, word_dim=2)
