"""The ragged recurrence of ``lstm`` / ``gru`` / ``lstmp`` (``lowering/ops/_ragged.py``): sequences sorted
by length, phases of a shrinking static active batch, so the work follows the real tokens.

Checked: the sequences run in Paddle's sequence2batch order and every phase holds the running ones; forward and gradients of
``dynamic_lstm`` (peepholes or not, reverse), ``dynamic_gru`` (reverse, origin_mode) against Paddle
2.6.2 running the same program bytes and against the padded loop it replaced
(``recurrent_lod.RAGGED = False``); ``dynamic_lstmp`` (Paddle 2.6 has no kernel) against that loop
and a NumPy transcription of Fluid 1.8's equations; batches with empty sequences, one sequence,
equal lengths, and more sequences than the finest levels.
"""

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer
from fluidjax.lowering.ops import recurrent_lod
from fluidjax.lowering.ops._ragged import _sorted_sequences, batch_levels

LENGTHS = {
    "empty": [3, 0, 5, 1, 4],
    "one": [6],
    "equal": [4, 4, 4, 4],
    "many": [7, 0, 2, 9, 9, 1, 5, 3, 8, 0, 6, 4, 2, 11, 1, 3, 7, 5, 10, 2],   # 20: levels with gaps
}


def _lod_tensor(data, lengths):
    t = fj.LoDTensor(np.asarray(data))
    t.set_recursive_sequence_lengths(lengths)
    return t


# -- the layout ----------------------------------------------------------------------------------
@pytest.mark.parametrize("count", [1, 5, 8, 9, 20, 64, 100, 256])
def test_batch_levels_descend_from_the_count_to_one_with_bounded_gaps(count):
    levels = batch_levels(count)
    assert levels[0] == count and levels[-1] == 1
    assert all(a > b for a, b in zip(levels, levels[1:]))
    bound = max(1, (1 << (count - 1).bit_length()) // 8)
    assert all(a - b <= bound for a, b in zip(levels, levels[1:]))
    assert len(levels) <= 8 + (count - 1).bit_length()


@pytest.mark.parametrize("case", sorted(LENGTHS))
def test_sequences_run_in_paddles_batch_order_and_each_phase_holds_the_running_ones(case):
    """Longest first (ties in sequence order, as a stable sort); each phase's width holds every
    sequence still running during it, and the last phase ends at the longest length."""
    lengths = LENGTHS[case]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    levels = batch_levels(len(lengths))
    order, first, end, length, ends = (np.asarray(v) for v in _sorted_sequences(offsets, levels))
    assert order.tolist() == sorted(range(len(lengths)), key=lambda s: -lengths[s])
    assert first.tolist() == offsets[:-1][order].tolist() and end.tolist() == offsets[1:][order].tolist()
    running = [sum(n > t for n in lengths) for t in range(max(lengths))]
    start = 0
    for width, stop in zip(levels, ends):
        assert all(running[t] <= width for t in range(start, max(start, stop)))
        start = max(start, stop)
    assert start == max(lengths)


# -- the ops against Paddle and the padded loop -------------------------------------------------------
def _program(kind, opts, width=5, size=3):
    main, startup = fj.Program(), fj.Program()
    startup.random_seed = 11                   # the same parameters in every run of the startup
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        words = layer.data("words", dims=width, lod_level=1, stop_gradient=False)
        if kind == "lstm":
            out, _ = layer.dynamic_lstm(layer.fc(words, 4 * size), 4 * size, **opts)
            params = ["lstm_0.w_0", "lstm_0.b_0"]
        elif kind == "gru":
            out = layer.dynamic_gru(layer.fc(words, 3 * size), size, **opts)
            params = ["gru_0.w_0", "gru_0.b_0"]
        else:
            out, _ = layer.dynamic_lstmp(layer.fc(words, 4 * size), 4 * size, 2, **opts)
            params = ["lstmp_0.w_0", "lstmp_0.w_1", "lstmp_0.b_0"]
        loss = layer.mean(layer.sequence_pool(out, "sum")) + layer.mean(layer.sequence_pool(out, "max"))
        fj.append_backward(loss)
    fetch = [out.name, loss.name, "words@GRAD", "fc_0.w_0@GRAD"] + [p + "@GRAD" for p in params]
    return main, startup, fetch


def _feed(lengths, width=5, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (sum(lengths), width)).astype(np.float32)


def _run(main, startup, lengths, fetch, ragged=True):
    """Run with the ragged recurrence (or the padded loop); the startup's parameters and the scope."""
    saved = recurrent_lod.RAGGED
    recurrent_lod.RAGGED = ragged
    try:
        exe, scope = fj.Executor(), fj.Scope()
        exe.run(startup, scope=scope)
        out = exe.run(main, feed={"words": _lod_tensor(_feed(lengths), [lengths])}, fetch_list=fetch, scope=scope)
    finally:
        recurrent_lod.RAGGED = saved
    return out, scope


def _paddle(main, lengths, fetch, scope):
    import paddle_oracle as po

    return po.run(main.serialize(), {"words": _feed(lengths)}, fetch, po.persistable_values(main, scope),
                  lods={"words": [lengths]})


# every option and every kind of batch at least once (each row compiles two steps and runs Paddle)
CONFIGS = [
    ("lstm", {}, "many"), ("lstm", {"use_peepholes": False}, "empty"), ("lstm", {"is_reverse": True}, "one"),
    ("lstm", {"use_peepholes": False, "is_reverse": True}, "many"), ("lstm", {}, "equal"),
    ("gru", {}, "empty"), ("gru", {"is_reverse": True}, "many"), ("gru", {"origin_mode": True, "is_reverse": True}, "equal"),
    ("gru", {"origin_mode": True}, "one"),
]


@pytest.mark.parametrize("kind, opts, case", [
    pytest.param(*c, id=f"{c[0]}-{'-'.join(c[1]) or 'default'}-{c[2]}", marks=() if i in (0, 6) else pytest.mark.slow)
    for i, c in enumerate(CONFIGS)])   # the many-sequence lstm and gru rows always; the rest are slow
def test_ragged_recurrence_equals_paddle_and_the_padded_loop(kind, opts, case):
    lengths = LENGTHS[case]
    main, startup, fetch = _program(kind, opts)
    ours, scope = _run(main, startup, lengths, fetch)
    padded, _ = _run(main, startup, lengths, fetch, ragged=False)
    theirs = _paddle(main, lengths, fetch, scope)
    for name, a, b, c in zip(fetch, ours, padded, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=f"{name} (padded loop)")
        np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-6, err_msg=f"{name} (Paddle)")


@pytest.mark.parametrize("opts, case", [
    ({}, "many"), pytest.param({}, "one", marks=pytest.mark.slow),
    ({"is_reverse": True, "use_peepholes": False, "cell_clip": 0.3, "proj_clip": 0.5, "proj_activation": "identity"},
     "empty"),
    pytest.param({"is_reverse": True}, "equal", marks=pytest.mark.slow)])
def test_ragged_lstmp_equals_the_padded_loop_and_fluids_equations(opts, case):
    from optable.lstmp_cases import _lstmp_ref

    lengths = LENGTHS[case]
    main, startup, fetch = _program("lstmp", opts)
    ours, scope = _run(main, startup, lengths, fetch + ["fc_0.tmp_1"])
    padded, _ = _run(main, startup, lengths, fetch, ragged=False)
    for name, a, b in zip(fetch, ours, padded):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=f"{name} (padded loop)")
    op = next(o for o in main.global_block().ops if o.type == "lstmp")
    values = {slot: np.asarray(scope.find_var(op.inputs[slot][0]).get_tensor())
              for slot in ("Weight", "ProjWeight", "Bias")}
    ref = _lstmp_ref(lengths)({"Input": ours[-1], **values}, dict(op.attrs))
    np.testing.assert_allclose(ours[0], ref["Projection"], rtol=1e-5, atol=1e-6)


def test_ragged_lstm_with_initial_states_equals_paddle_and_the_padded_loop():
    lengths, size = [5, 2, 7, 1, 3, 3, 6, 4, 2, 8], 3
    main, startup = fj.Program(), fj.Program()
    startup.random_seed = 11
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        words = layer.data("words", dims=5, lod_level=1, stop_gradient=False)
        h0 = layer.data("h0", dims=size, stop_gradient=False)
        c0 = layer.data("c0", dims=size, stop_gradient=False)
        out, _ = layer.dynamic_lstm(layer.fc(words, 4 * size), 4 * size, h_0=h0, c_0=c0, is_reverse=True)
        loss = layer.mean(layer.sequence_pool(out, "last"))
        fj.append_backward(loss)
    rng = np.random.default_rng(3)
    states = {k: rng.uniform(-1, 1, (len(lengths), size)).astype(np.float32) for k in ("h0", "c0")}
    fetch = [out.name, loss.name, "words@GRAD", "h0@GRAD", "c0@GRAD", "lstm_0.w_0@GRAD", "lstm_0.b_0@GRAD"]
    results = []
    for ragged in (True, False):
        recurrent_lod.RAGGED, saved = ragged, recurrent_lod.RAGGED
        try:
            exe, scope = fj.Executor(), fj.Scope()
            exe.run(startup, scope=scope)
            results.append(exe.run(main, feed={"words": _lod_tensor(_feed(lengths), [lengths]), **states},
                                   fetch_list=fetch, scope=scope))
        finally:
            recurrent_lod.RAGGED = saved
    import paddle_oracle as po

    theirs = po.run(main.serialize(), {"words": _feed(lengths), **states}, fetch,
                    po.persistable_values(main, scope), lods={"words": [lengths]})
    for name, a, b, c in zip(fetch, results[0], results[1], theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=f"{name} (padded loop)")
        np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-6, err_msg=f"{name} (Paddle)")


def test_one_compilation_for_batches_of_one_bucket():
    """The phases' boundaries are data: batches of other lengths in the same buckets reuse the step."""
    main, startup, fetch = _program("lstm", {})
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(7)
    before = exe.trace_count
    for _ in range(4):
        lengths = rng.integers(5, 9, 8).tolist()            # 40..64 rows, longest 5..8: one bucket each
        exe.run(main, feed={"words": _lod_tensor(_feed(lengths), [lengths])}, fetch_list=fetch[:2], scope=scope)
    assert exe.trace_count - before == 1
