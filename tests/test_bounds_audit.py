"""Issue 27 item 7, the bounds audit (docs/reliability.md, "Audit (issue 27)"): fixed sizes that
had no test of their own showing that they give the right answer or raise a typed error. The
rest of the audit's rows point at existing tests. The items once OPEN (fluidjax gave a result where
Paddle 2.6.2 raises) are run-time errors now, each tested against Paddle refusing too."""

from __future__ import annotations

import numpy as np
import pytest

import fluidjax as fj  # noqa: I001  (fluidjax before paddle)
from test_data_dependent_counts import masked_select

L = fj.layers
X = np.array([1, -2, 3, -4, 5, -6], "float32")


def _run(consumer, feed=None):
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = L.data("x", shape=[6], dtype="float32", append_batch_size=False)
        m = L.greater_than(x, L.fill_constant([1], "float32", 0.0))
        out = consumer(x, m)
    return fj.Executor().run(main, feed=feed or {"x": X}, fetch_list=[out])[0]


def test_a_counted_value_through_a_tensor_array_reads_back_only_its_real_rows():
    """A masked_select result (capacity 6, 3 real rows) written to an array and read back: the
    read gives the 3 real rows (NumPy's x[x > 0]), never the padding rows."""
    def consumer(x, m):
        i = L.fill_constant([1], "int64", 0)
        return L.array_read(L.array_write(masked_select(x, m), i), i)
    np.testing.assert_array_equal(np.asarray(_run(consumer)), X[X > 0])


def test_sequence_mask_with_a_width_only_the_data_gives_is_refused_or_exact():
    """sequence_mask(maxlen=-1) inside a compiled step: the width is the largest length, a value of
    the data. Either the step knows it while tracing and the mask equals NumPy's, or the op is
    refused with a typed error — never a mask of some other width."""
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        n = L.data("n", shape=[3], dtype="int64", append_batch_size=False)
        y = L.sequence_mask(n, maxlen=None, dtype="int64")
    lengths = np.array([1, 4, 2], "int64")
    try:
        got = fj.Executor().run(main, feed={"n": lengths}, fetch_list=[y])[0]
    except fj.FluidJaxError as e:
        assert "sequence_mask" in str(e)
        return
    np.testing.assert_array_equal(np.asarray(got), (np.arange(4) < lengths[:, None]).astype("int64"))


def test_dynamic_decode_without_max_step_num_is_refused():
    """The decoding loop's time dim is max_step_num + 1: without it there is no bound to compile."""
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        enc = L.data("enc", shape=[4, 8], dtype="float32", append_batch_size=False)
        cell = L.GRUCell(8)
        decoder = L.BeamSearchDecoder(cell, start_token=0, end_token=1, beam_size=2,
                                      embedding_fn=lambda ids: L.one_hot(L.unsqueeze(ids, [-1]), 8),
                                      output_fn=lambda h: L.fc(h, 8))
        with pytest.raises((ValueError, TypeError), match="max_step_num"):
            L.dynamic_decode(decoder, inits=cell.get_initial_states(enc))


# -- once OPEN, now run-time errors: the count is data, so the step checks what the op needs -----------
# Each was a silent wrong answer where Paddle 2.6.2 raises (docs/reliability.md, Audit).
_CHECKED = {
    # 3 real elements re-cut into rows of 2: used to keep the 1 whole row [[1, 3]].
    "reshape-minus1-not-whole-rows": (lambda x, m: L.reshape(masked_select(x, m), [-1, 2]),
                                      "reshape2", "divisible by 2", 3),
    # top_k with k = 5 of 3 real rows: used to return the 3.
    "top_k-past-the-count": (lambda x, m: L.topk(masked_select(x, m), k=5)[0], "top_k", "at least 5", 3),
    # counts 3 and 2 added: used to add the first 2 rows of each.
    "two-counts-differ": (lambda x, m: masked_select(x, m) + masked_select(
        x, L.less_than(x, L.fill_constant([1], "float32", -3.0))), "elementwise_add", "counts equal", 2),
    # one row (decrease_axis) past the 3 real rows: used to return a padding row.
    "slice-one-row-past-the-count": (lambda x, m: masked_select(x, m)[5], "slice", "needs that row to exist", 3),
}


@pytest.mark.parametrize("case", list(_CHECKED))
def test_a_count_the_op_cannot_take_is_a_run_time_error_where_paddle_refuses(case):
    """The consuming op's requirement on the real count fails inside the step: a
    BoundExceededError naming the op, its line, the producing op and the real count; Paddle 2.6.2
    running the same program bytes refuses too."""
    consumer, op_type, need, count = _CHECKED[case]
    with pytest.raises(fj.BoundExceededError) as info:
        _run(consumer)
    msg = str(info.value)
    assert info.value.op_type == op_type and "test_bounds_audit.py" in msg, msg
    assert need in msg and "'masked_select' at" in msg and msg.endswith(
        "got %d. The run was not applied; the scope is as before it." % count), msg
    import paddle_oracle as po
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = L.data("x", shape=[6], dtype="float32", append_batch_size=False)
        out = consumer(x, L.greater_than(x, L.fill_constant([1], "float32", 0.0)))
    with pytest.raises(Exception):
        po.run(main.serialize(), {"x": X}, [out.name])


def test_a_count_the_op_can_take_still_runs():
    """The same consumers on counts that meet the requirement answer as NumPy (the check does not
    refuse good data): x > -3 selects 4 real elements, 2 whole rows, k = 3 <= 4."""
    feed = {"x": X}
    pos = lambda x: masked_select(x, L.greater_than(x, L.fill_constant([1], "float32", -3.0)))  # noqa: E731
    want = X[X > -3]
    np.testing.assert_array_equal(np.asarray(_run(lambda x, m: L.reshape(pos(x), [-1, 2]), feed)),
                                  want.reshape(-1, 2))
    np.testing.assert_array_equal(np.asarray(_run(lambda x, m: L.topk(pos(x), k=3)[0], feed)),
                                  np.sort(want)[::-1][:3])
    np.testing.assert_array_equal(np.asarray(_run(lambda x, m: pos(x) + pos(x), feed)), want * 2)


def test_dynamic_rnn_under_bucketed_sequence_counts_sees_only_the_real_sequences():
    """FLAGS_bucket_sequences pads 3 sequences to a bucket of 4 (an empty padding sequence): a
    DynamicRNN running sum, its total and each sequence's last step equal NumPy's on the 3 real
    sequences (the flag is on by default; this pins it on and restores what it found)."""
    from test_reliability_sequences import _lod_tensor, _running_sum_program
    lengths = [3, 5, 2]
    before = fj.get_flags(["FLAGS_bucket_sequences"])["FLAGS_bucket_sequences"]
    fj.set_flags({"FLAGS_bucket_sequences": True})
    try:
        main, startup, out = _running_sum_program()
        with fj.program_guard(main, startup):
            total, last = L.reduce_sum(out), L.sequence_pool(out, "last")
        exe, scope = fj.Executor(), fj.Scope()
        exe.run(startup, scope=scope)
        got, s, e = exe.run(main, feed={"x": _lod_tensor(np.ones((10, 1), np.float32), [lengths])},
                            fetch_list=[out, total, last], scope=scope, return_numpy=False)
    finally:
        fj.set_flags({"FLAGS_bucket_sequences": before})
    want = np.concatenate([np.arange(1, n + 1) for n in lengths]).astype("float32")
    np.testing.assert_array_equal(np.asarray(got).ravel(), want)
    assert got.recursive_sequence_lengths() == [lengths]
    np.testing.assert_array_equal(np.asarray(s).ravel(), [want.sum()])
    np.testing.assert_array_equal(np.asarray(e).ravel(), lengths)
