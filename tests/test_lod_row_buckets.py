"""FLAGS_lod_row_buckets (``lod_value.row_bucket``): a fed LoD value's rows padded to a multiple of
an eighth (a ``k``-th) of an octave instead of the next power of two, above
``lod_value.FINE_ROWS_FROM`` rows.

Checked: the rule (never fewer rows than real, never more than the power of two, at most ``k``
row counts per octave, powers of two at or below the threshold); a model fed batches whose rows
fall in one octave compiles once per distinct row bucket, the rule's count; an LSTM model's
outputs, loss and gradients under ``k = 8`` equal the power-of-two run's (<= 1e-6) and Paddle
2.6.2's running the same program bytes; the fetched LoD value is cut to its real rows.
"""

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer
from fluidjax.lowering import lod_value
from fluidjax.lowering.lod_value import FINE_ROWS_FROM, bucket, row_bucket


@pytest.fixture
def row_buckets():
    before = fj.get_flags("FLAGS_lod_row_buckets")
    yield lambda k: fj.set_flags({"FLAGS_lod_row_buckets": k})
    fj.set_flags(before)


def test_default_is_the_power_of_two():
    from fluidjax.lowering import flags
    assert flags._DEFAULTS["FLAGS_lod_row_buckets"] == 1
    assert all(row_bucket(n) == bucket(n) for n in (0, 1, 5, 1000, 1025, 3360, 6720, 8193))


def test_the_flag_takes_positive_integers_only(row_buckets):
    for bad in (0, -1, 1.5, "x", True):
        with pytest.raises(ValueError):
            row_buckets(bad)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8, 16])
def test_rule_bounds_the_rows_and_the_buckets_per_octave(k):
    for m in range(0, 15):
        lo, hi = (1 << m), (1 << (m + 1))
        ns = range(lo + 1, hi + 1)
        sizes = {row_bucket(n, k) for n in ns}
        for n in ns:
            r = row_bucket(n, k)
            assert n <= r <= bucket(n)
            if n <= FINE_ROWS_FROM:
                assert r == bucket(n)
            elif k > 1:
                assert r - n < (hi // 2) / k + 1, (n, r)          # less than one step of padding
        assert len(sizes) <= (1 if hi <= FINE_ROWS_FROM else max(1, k)), (m, k, sorted(sizes))
    assert row_bucket(6720, 8) == 7168 and row_bucket(3360, 8) == 3584 and row_bucket(6720, 1) == 8192


def _lod_tensor(data, lengths):
    t = fj.LoDTensor(np.asarray(data))
    t.set_recursive_sequence_lengths([list(lengths)])
    return t


def test_compiles_once_per_row_bucket_and_results_match_the_power_of_two(row_buckets):
    """An fc model, batches of 8 sequences whose rows fall in (1024, 2048] and whose longest is in
    (128, 256]: one compilation with powers of two, one per distinct row bucket with k = 4, the
    same losses and gradients."""
    main, startup = fj.Program(), fj.Program()
    startup.random_seed = 3
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", dims=4, lod_level=1, stop_gradient=False)
        h = layer.fc(layer.fc(x, 8, act="tanh"), 8)
        loss = layer.mean(layer.sequence_pool(h, "sum")) + layer.mean(h)
        fj.append_backward(loss)
    fetch = [h.name, loss.name, "x@GRAD", "fc_0.w_0@GRAD", "fc_1.w_0@GRAD"]
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(8):
        lengths = [200] + rng.integers(120, 257, 7).tolist()
        batches.append((lengths, rng.uniform(-1, 1, (sum(lengths), 4)).astype(np.float32)))
    assert all(1024 < sum(b[0]) <= 2048 for b in batches)
    results, traces = {}, {}
    for k in (1, 4):
        row_buckets(k)
        exe, scope = fj.Executor(), fj.Scope()
        exe.run(startup, scope=scope)
        start = exe.trace_count
        results[k] = [exe.run(main, feed={"x": _lod_tensor(d, lengths)}, fetch_list=fetch, scope=scope,
                              return_numpy=False)
                      for lengths, d in batches]
        traces[k] = exe.trace_count - start
    want = len({row_bucket(sum(b[0]), 4) for b in batches})
    assert traces[1] == 1 and traces[4] == want and 1 < want <= 4, (traces, want)
    for (lengths, d), a, b in zip(batches, results[1], results[4]):
        assert b[0].lod() == a[0].lod() == [np.concatenate([[0], np.cumsum(lengths)]).tolist()]
        assert np.asarray(b[0]).shape[0] == sum(lengths)
        for name, u, v in zip(fetch, a, b):
            np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=1e-6, atol=1e-6, err_msg=name)


def test_a_fed_value_is_padded_to_the_finer_bucket_with_zero_rows(row_buckets):
    row_buckets(8)
    data = np.ones((1500, 3), np.float32)
    value = lod_value.from_host(data, [[0, 700, 1500]], bucket_sequences=True)
    assert value.data.shape == (1536, 3) and not value.data[1500:].any()
    assert [o.tolist() for o in value.offsets] == [[0, 700, 1500]]
    assert lod_value.to_host(value)[1] == [[0, 700, 1500]]


def test_lstm_model_equals_the_power_of_two_run_and_paddle(row_buckets):
    """fc -> dynamic_lstm (peepholes) -> pools, 9 sequences of 1,100+ rows (a 2,048-row power of
    two, a 1,152..1,280-row eighth): outputs, loss and every gradient."""
    import paddle_oracle as po

    lengths = [130, 0, 180, 95, 141, 220, 77, 160, 129]
    rows = sum(lengths)
    assert rows > FINE_ROWS_FROM and row_bucket(rows, 8) < bucket(rows)
    main, startup = fj.Program(), fj.Program()
    startup.random_seed = 11
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        words = layer.data("words", dims=5, lod_level=1, stop_gradient=False)
        out, _ = layer.dynamic_lstm(layer.fc(words, 12), 12)
        loss = layer.mean(layer.sequence_pool(out, "sum")) + layer.mean(layer.sequence_pool(out, "max"))
        fj.append_backward(loss)
    fetch = [out.name, loss.name, "words@GRAD", "fc_0.w_0@GRAD", "lstm_0.w_0@GRAD", "lstm_0.b_0@GRAD"]
    data = np.random.default_rng(1).uniform(-1, 1, (rows, 5)).astype(np.float32)
    runs = {}
    for k in (1, 8):
        row_buckets(k)
        exe, scope = fj.Executor(), fj.Scope()
        exe.run(startup, scope=scope)
        runs[k] = exe.run(main, feed={"words": _lod_tensor(data, lengths)}, fetch_list=fetch, scope=scope)
    theirs = po.run(main.serialize(), {"words": data}, fetch, po.persistable_values(main, scope),
                    lods={"words": [lengths]})
    for name, a, b, c in zip(fetch, runs[1], runs[8], theirs):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6, err_msg=f"{name} (power of two)")
        np.testing.assert_allclose(b, c, rtol=1e-4, atol=1e-6, err_msg=f"{name} (Paddle)")
