"""Reductions that keep the rows of a padded value (``reduce_*`` over a dim other than 0).

With ``FLAGS_bucket_sequences`` (on by default) a per-sequence value carries padding rows past
its real count; a reduction over its features must keep them padding (Paddle's reduce ops share
X's LoD when the first dim is kept), so a fetch returns the real rows and a ``mean`` of the result
averages the real rows only. Before, ``reduce_sum(dim=1)`` returned a plain array of the padded
rows: the fetch had 16 rows for 12 sequences and the mean loss included the padding.
Oracles: the same program with the flag off (Paddle's exact layout) and NumPy."""

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer


def _program(reduce_type):
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 3
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        words = layer.data("words", shape=[1], dtype="int64", lod_level=1)
        label = layer.data("label", shape=[1], dtype="int64")
        pooled = layer.sequence_pool(layer.embedding(words, size=[20, 4]), "sum")
        logits = layer.fc(pooled, 3)
        picked = fj.layers.one_hot(label, 3) * logits
        per = getattr(layer, reduce_type)(picked, dim=1, keep_dim=True)
        loss = layer.mean(per)
        fj.optimizer.SGD(0.1).minimize(loss)
    return main, startup, per, loss


def _feeds(seed, batches=4):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(batches):
        n = int(rng.integers(3, 13))                  # counts that do not fill a power of two
        lengths = rng.integers(1, 5, n).tolist()
        out.append({"words": fj.create_lod_tensor(rng.integers(0, 20, (sum(lengths), 1)), [lengths], fj.CPUPlace()),
                    "label": rng.integers(0, 3, (n, 1))})
    return out


def _train(reduce_type, bucket):
    before = fj.get_flags(["FLAGS_bucket_sequences"])["FLAGS_bucket_sequences"]
    fj.set_flags({"FLAGS_bucket_sequences": bucket})
    try:
        main, startup, per, loss = _program(reduce_type)
        exe, scope = fj.Executor(fj.CPUPlace()), fj.Scope()
        exe.run(startup, scope=scope)
        fetched = [exe.run(main, feed=f, fetch_list=[per, loss], scope=scope) for f in _feeds(1)]
        params = {p.name: np.asarray(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
    finally:
        fj.set_flags({"FLAGS_bucket_sequences": before})
    return fetched, params


@pytest.mark.parametrize("reduce_type", ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min"])
def test_a_reduction_over_features_keeps_the_real_sequences(reduce_type):
    on, params_on = _train(reduce_type, True)
    off, params_off = _train(reduce_type, False)
    for f, (per_on, loss_on), (per_off, loss_off) in zip(_feeds(1), on, off):
        n = f["label"].shape[0]
        assert np.asarray(per_on).shape == (n, 1) == np.asarray(per_off).shape
        np.testing.assert_allclose(np.asarray(per_on), np.asarray(per_off), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(loss_on), np.asarray(per_off).mean(), rtol=1e-5, atol=1e-6)
    for name in params_off:
        np.testing.assert_allclose(params_on[name], params_off[name], rtol=1e-5, atol=1e-6)


def test_a_reduction_over_features_of_a_lod_value_shares_its_lod():
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", shape=[3], dtype="float32", lod_level=1)
        out = layer.reduce_sum(x, dim=1)
        total = layer.reduce_sum(out)
    rng = np.random.default_rng(0)
    lengths = [2, 3, 0, 4]                            # 9 rows: padded to a bucket of 16
    data = rng.standard_normal((9, 3)).astype("float32")
    exe = fj.Executor(fj.CPUPlace())
    exe.run(startup)
    got, got_total = exe.run(main, feed={"x": fj.create_lod_tensor(data, [lengths], fj.CPUPlace())},
                             fetch_list=[out, total], return_numpy=False)
    np.testing.assert_allclose(np.asarray(got), data.sum(1), rtol=1e-6)
    assert got.recursive_sequence_lengths() == [lengths]
    np.testing.assert_allclose(np.asarray(got_total).ravel(), [data.sum()], rtol=1e-5)
