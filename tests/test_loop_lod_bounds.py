"""Row capacities inside a ``while`` body follow the data (docs/reliability.md, "Bounds").

The book's beam decoder assigns ``sequence_expand(encoder_out, selected_ids)`` back to
``encoder_out`` every step. Its output had room for (prefix rows) × (X's padded rows): at the
book's batch 64, 256 × 512 rows of width 1,024 for each of two such variables, and the step
took about 100 s and gigabytes. Each output sequence is a copy of one of X's, so (prefix rows) ×
(a bound on X's longest sequence) rows suffice; for a loop variable that bound is its fed
value's bucketed longest sequence, checked on every iteration's value, and a run whose data
passes it is done again with the bound grown (or fails with a typed error past the cap).
"""

from __future__ import annotations

import jax  # noqa: F401  (before paddle)
import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer
from fluidjax.ir import registry


class _Shapes:
    """Record the traced output rows of an op type (its JAX rule wrapped while the block runs)."""

    def __init__(self, op_type: str) -> None:
        self.opdef, self.rows = registry.get(op_type), []

    def __enter__(self):
        self.compute = compute = self.opdef.compute

        def wrapped(ctx):
            out = compute(ctx)
            x = ctx.input("X")
            if getattr(x, "offsets", None) is not None and ctx.op.block.find_var(ctx.op.input("X")[0]).lod_level:
                self.rows.append((ctx.op.output("Out")[0], out["Out"].data.shape[0]))
            return out
        object.__setattr__(self.opdef, "compute", wrapped)
        return self

    def __exit__(self, *exc):
        object.__setattr__(self.opdef, "compute", self.compute)


SOURCES, BEAM, DICT, HID, MAX_LEN = 8, 4, 40, 8, 3


def _attention_decoder():
    """The book's ``infer_decoder`` (08.machine_translation/train.py), small: a bidirectional GRU
    encoder, attention over ``encoder_out`` and ``encoder_out_proj``, both re-expanded to the live
    prefixes and assigned back every step."""
    fluid = fj
    main, startup = fj.Program(), fj.Program()
    startup.random_seed = main.random_seed = 3
    with fj.program_guard(main, startup):
        src = fluid.layers.data(name="src", shape=[1], dtype="int64", lod_level=1)
        emb = fluid.layers.embedding(input=src, size=[DICT, HID])
        fwd = fluid.layers.dynamic_gru(input=fluid.layers.fc(emb, HID * 3, bias_attr=False), size=HID)
        bwd = fluid.layers.dynamic_gru(input=fluid.layers.fc(emb, HID * 3, bias_attr=False), size=HID,
                                       is_reverse=True)
        encoder_out = fluid.layers.concat([fwd, bwd], axis=1)
        last = fluid.layers.fc(fluid.layers.sequence_last_step(encoder_out), HID, act="tanh")
        encoder_proj = fluid.layers.fc(encoder_out, HID, bias_attr=False)
        max_len = fluid.layers.fill_constant([1], "int64", MAX_LEN)
        counter = fluid.layers.zeros([1], "int64")
        init_ids = fluid.layers.data(name="init_ids", shape=[1], dtype="int64", lod_level=2)
        init_scores = fluid.layers.data(name="init_scores", shape=[1], dtype="float32", lod_level=2)
        ids_array = fluid.layers.array_write(init_ids, i=counter)
        scores_array = fluid.layers.array_write(init_scores, i=counter)
        state_array = fluid.layers.array_write(last, i=counter)
        cond = fluid.layers.less_than(counter, max_len)
        loop = fluid.layers.While(cond)
        with loop.block():
            pre_ids = fluid.layers.array_read(ids_array, counter)
            pre_score = fluid.layers.array_read(scores_array, counter)
            pre_state = fluid.layers.array_read(state_array, counter)
            word = fluid.layers.embedding(input=pre_ids, size=[DICT, HID])
            state_proj = fluid.layers.fc(pre_state, HID, bias_attr=False)
            mixed = fluid.layers.elementwise_add(encoder_proj, fluid.layers.sequence_expand(state_proj, encoder_proj))
            weights = fluid.layers.sequence_softmax(fluid.layers.fc(mixed, 1, bias_attr=False))
            scaled = fluid.layers.elementwise_mul(encoder_out, fluid.layers.reshape(weights, [-1]), axis=0)
            context = fluid.layers.sequence_pool(scaled, "sum")
            gates = fluid.layers.fc([word, context], HID * 3, bias_attr=False)
            state = fluid.layers.gru_unit(gates, pre_state, HID * 3)[0]
            prob = fluid.layers.fc(state, DICT, act="softmax")
            top_scores, top_ids = fluid.layers.topk(prob, k=BEAM)
            accu = fluid.layers.elementwise_add(fluid.layers.log(top_scores),
                                                fluid.layers.reshape(pre_score, [-1]), axis=0)
            accu = fluid.layers.lod_reset(accu, y=pre_ids)
            sel_ids, sel_scores = fluid.layers.beam_search(pre_ids, pre_score, top_ids, accu, BEAM, end_id=1)
            fluid.layers.increment(counter, 1, in_place=True)
            fluid.layers.array_write(sel_ids, array=ids_array, i=counter)
            fluid.layers.array_write(sel_scores, array=scores_array, i=counter)
            fluid.layers.array_write(fluid.layers.sequence_expand(state, sel_ids), array=state_array, i=counter)
            fluid.layers.assign(fluid.layers.sequence_expand(encoder_out, sel_ids), encoder_out)
            fluid.layers.assign(fluid.layers.sequence_expand(encoder_proj, sel_ids), encoder_proj)
            fluid.layers.logical_and(fluid.layers.less_than(counter, max_len),
                                     fluid.layers.logical_not(fluid.layers.is_empty(sel_ids)), out=cond)
        ids, scores = fluid.layers.beam_search_decode(ids_array, scores_array, BEAM, end_id=1)
    return main, startup, ids, scores


def _sources(lengths, seed=0):
    r = np.random.RandomState(seed)
    n = len(lengths)
    return {
        "src": fj.create_lod_tensor(r.randint(2, DICT, size=(sum(lengths), 1)).astype("int64"), [list(lengths)]),
        "init_ids": fj.create_lod_tensor(np.zeros((n, 1), "int64"), [[1] * n] * 2),
        "init_scores": fj.create_lod_tensor(np.zeros((n, 1), "float32"), [[1] * n] * 2),
    }


def test_beam_decoder_expands_encoder_out_to_prefixes_times_the_longest_source():
    """Before: 32 prefix rows × 64 padded source rows = 2,048 rows for ``sequence_expand(encoder_out,
    selected_ids)`` (and, carried, 32 × 2,048 inside the body). Now 32 × 16 (the bucket of the
    longest source, 12 words) everywhere. (The sentences were checked identical to the unbounded
    step's, bit for bit, at 8 and 64 sources when the bound was introduced.)"""
    main, startup, ids, scores = _attention_decoder()
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    lengths = [4, 12, 7, 9, 5, 11, 6, 8]                # 62 rows: padded to 64; longest 12: bucket 16
    feed = _sources(lengths)
    with _Shapes("sequence_expand") as seen:
        got = exe.run(main, feed=feed, fetch_list=[ids, scores], scope=scope, return_numpy=False)
    assert seen.rows and {rows for _, rows in seen.rows} == {SOURCES * BEAM * 16}, seen.rows
    assert exe.trace_count == 1                   # the bounds held: no run done again
    lod = got[0].lod()
    assert len(lod[0]) == SOURCES + 1 and lod[1][-1] == np.array(got[0]).shape[0] > 0


def _growing_loop():
    """A loop variable ``x`` (fed: four sequences of 2 rows, bound 2) whose body expands it by ``y``
    (lengths 1, 1, 1, 5) into ``out`` and then gives it the LoD ``t`` (lengths 1, 1, 1, 5) for the
    next iteration."""
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", dims=1, lod_level=1)
        y = layer.data("y", dims=1, lod_level=1)
        t = layer.data("t", shape=[5], dtype="int32", append_batch_size=False)
        out = layer.sequence_expand(x, y)
        i = layer.fill_constant([1], "int64", 0)
        n = layer.fill_constant([1], "int64", 2)
        cond = layer.less_than(i, n)
        loop = layer.While(cond)
        with loop.block():
            layer.assign(layer.sequence_expand(x, y), out)
            layer.assign(layer.lod_reset(x, y=t), x)
            layer.increment(i, in_place=True)
            layer.less_than(i, n, cond=cond)
    feed = {"x": fj.create_lod_tensor(np.arange(8, dtype="float32").reshape(8, 1), [[2, 2, 2, 2]]),
            "y": fj.create_lod_tensor(np.zeros((8, 1), "float32"), [[1, 1, 1, 5]]),
            "t": np.array([0, 1, 2, 3, 8], np.int32)}
    return main, startup, out, feed


def test_a_loop_variable_growing_past_its_bound_runs_again_with_the_bound_grown():
    """The second iteration expands a sequence of 5 rows 5 times where the loop assumed sequences of
    at most 2: the run is done again with the bound grown to 8, nothing committed first, and all 28
    rows are there (with the bound 2 the output had room for 8 × 2 = 16)."""
    main, startup, out, feed = _growing_loop()
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    got, = exe.run(main, feed=feed, fetch_list=[out], scope=scope, return_numpy=False)
    lengths, = got.recursive_sequence_lengths()
    assert lengths == [1, 1, 1, 5, 5, 5, 5, 5]
    np.testing.assert_array_equal(np.array(got).ravel(), [0, 1, 2] + [3, 4, 5, 6, 7] * 5)
    traces = exe.trace_count
    exe.run(main, feed=feed, fetch_list=[out], scope=scope)
    assert exe.trace_count == traces              # the grown bound is kept: no new trace


def test_a_loop_variable_bound_past_the_cap_is_a_typed_error():
    main, startup, out, feed = _growing_loop()
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    fj.set_flags({"FLAGS_max_array_room": 4})
    try:
        with pytest.raises(fj.BoundExceededError) as info:
            exe.run(main, feed=feed, fetch_list=[out], scope=scope)
    finally:
        fj.set_flags({"FLAGS_max_array_room": 1 << 20})
    err = info.value
    assert err.op_type == "while" and err.bound == 4 and __file__ in err.location
    assert "loop variable" in str(err) and "5 entries" in str(err), str(err)
