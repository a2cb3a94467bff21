"""The layers added for Fluid 1.8's namespace (``frontend/activation_layers.py``,
``tensor_math_layers.py``, ``ctc_metric_layers.py``), run and checked against NumPy (their ops
are checked against Paddle 2.6.2 in the op table)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fluidjax as fluid

L = fluid.layers
_rng = np.random.default_rng(7)
X = _rng.uniform(-0.9, 0.9, (3, 4)).astype("float32")
Y = _rng.uniform(-0.9, 0.9, (3, 4)).astype("float32")
_sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
_erf = np.vectorize(math.erf)

CASES = {
    "log1p": (lambda x, y: L.log1p(x), lambda x, y: np.log1p(x)),
    "logsigmoid": (lambda x, y: L.logsigmoid(x), lambda x, y: np.log(_sig(x))),
    "atan": (lambda x, y: L.atan(x), lambda x, y: np.arctan(x)),
    "tanh_shrink": (lambda x, y: L.tanh_shrink(x), lambda x, y: x - np.tanh(x)),
    "cos": (lambda x, y: L.cos(x), lambda x, y: np.cos(x)),
    "acos": (lambda x, y: L.acos(x), lambda x, y: np.arccos(x)),
    "asin": (lambda x, y: L.asin(x), lambda x, y: np.arcsin(x)),
    "sin": (lambda x, y: L.sin(x), lambda x, y: np.sin(x)),
    "erf": (lambda x, y: L.erf(x), lambda x, y: _erf(x)),
    "softshrink": (lambda x, y: L.softshrink(x, alpha=0.3),
                   lambda x, y: np.where(x > 0.3, x - 0.3, np.where(x < -0.3, x + 0.3, 0))),
    "hard_shrink": (lambda x, y: L.hard_shrink(x), lambda x, y: np.where(np.abs(x) > 0.5, x, 0)),
    "thresholded_relu": (lambda x, y: L.thresholded_relu(x, 0.2), lambda x, y: np.where(x > 0.2, x, 0)),
    "selu": (lambda x, y: L.selu(x), lambda x, y: 1.0507009873554805 * np.where(
        x > 0, x, 1.6732632423543772 * np.expm1(x))),
    "brelu": (lambda x, y: L.brelu(x, 0.1, 0.5), lambda x, y: np.clip(x, 0.1, 0.5)),
    "soft_relu": (lambda x, y: L.soft_relu(x, 0.5), lambda x, y: np.log1p(np.exp(np.clip(x, -0.5, 0.5)))),
    "stanh": (lambda x, y: L.stanh(x), lambda x, y: 1.7159 * np.tanh(0.67 * x)),
    "mish": (lambda x, y: L.mish(x), lambda x, y: x * np.tanh(np.log1p(np.exp(x)))),
    "dot": (lambda x, y: L.dot(x, y), lambda x, y: np.sum(x * y, -1, keepdims=True)),
    "t": (lambda x, y: L.t(x), lambda x, y: x.T),
    "tril": (lambda x, y: L.tril(x, 1), lambda x, y: np.tril(x, 1)),
    "triu": (lambda x, y: L.triu(x), lambda x, y: np.triu(x)),
    "flip": (lambda x, y: L.flip(x, [1]), lambda x, y: x[:, ::-1]),
    "reverse": (lambda x, y: L.reverse(x, 0), lambda x, y: x[::-1]),
    "roll": (lambda x, y: L.roll(x, 1, 1), lambda x, y: np.roll(x, 1, 1)),
    "argsort": (lambda x, y: L.argsort(x, axis=1, descending=True)[1], lambda x, y: np.argsort(-x, 1)),
    "reduce_any": (lambda x, y: L.reduce_any(L.greater_than(x, y), dim=1), lambda x, y: np.any(x > y, 1)),
    # a full reduction is Fluid 1.x's shape [1] (reduce_op with reduce_all: {1})
    "reduce_all": (lambda x, y: L.reduce_all(L.greater_than(x, y)), lambda x, y: np.all(x > y).reshape(1)),
    "has_nan": (lambda x, y: L.has_nan(L.log(x)), lambda x, y: np.isnan(np.log(x)).any().reshape(1)),  # [1]
    "has_inf": (lambda x, y: L.has_inf(x), lambda x, y: np.isinf(x).any().reshape(1)),
    "allclose": (lambda x, y: L.allclose(x, x), lambda x, y: np.bool_(True)),
    "elementwise_equal": (lambda x, y: L.elementwise_equal(x, x), lambda x, y: np.ones_like(x, bool)),
    "logsumexp": (lambda x, y: L.logsumexp(x, dim=1), lambda x, y: np.log(np.exp(x).sum(1))),
    "clamp": (lambda x, y: L.clamp(x, min=-0.2), lambda x, y: np.maximum(x, -0.2)),
    "addcmul": (lambda x, y: L.addcmul(x, x, y, value=2.0), lambda x, y: x + 2 * x * y),
    "l2_normalize": (lambda x, y: L.l2_normalize(x, axis=1), lambda x, y: x / np.sqrt((x ** 2).sum(1, keepdims=True))),
    "label_smooth": (lambda x, y: L.label_smooth(x, epsilon=0.1), lambda x, y: 0.9 * x + 0.1 / 4),
    "crop_tensor": (lambda x, y: L.crop_tensor(x, [2, 2], [1, 1]), lambda x, y: x[1:3, 1:3]),
    "crop": (lambda x, y: L.crop(x, [2, 3], [0, 1]), lambda x, y: x[0:2, 1:4]),
    "expand_as": (lambda x, y: L.expand_as(L.slice(x, [0], [0], [1]), y), lambda x, y: np.repeat(x[:1], 3, 0)),
    "size": (lambda x, y: L.size(x), lambda x, y: np.int64(12)),
    "rank": (lambda x, y: L.rank(x), lambda x, y: np.array([2], "int32")),
    "mul": (lambda x, y: L.mul(x, L.t(y)), lambda x, y: x @ y.T),
    "clip_by_norm": (lambda x, y: L.clip_by_norm(x, 1.0), lambda x, y: x / max(1.0, np.sqrt((x ** 2).sum()))),
    "sum": (lambda x, y: L.sum([x, y, x]), lambda x, y: 2 * x + y),
    "diag": (lambda x, y: L.diag(L.reshape(L.slice(x, [0], [0], [1]), [4])), lambda x, y: np.diag(x[0])),
    "kron": (lambda x, y: L.kron(x, y), lambda x, y: np.kron(x, y)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_matches_numpy(name):
    build, reference = CASES[name]
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [3, 4], "float32")
        y = fluid.data("y", [3, 4], "float32")
        out = build(x, y)
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        got, = exe.run(main, feed={"x": X, "y": Y}, fetch_list=[out])
    want = reference(X.astype("float64"), Y.astype("float64"))
    np.testing.assert_allclose(np.asarray(got, dtype=np.asarray(want).dtype), want, rtol=2e-5, atol=2e-6)
    assert np.asarray(got).shape == np.asarray(want).shape


def test_unique_and_counts_in_order_of_first_appearance():
    ids = np.array([3, 1, 3, 2, 1, 3], "int64")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [6], "int64")
        out, index, counts = L.unique_with_counts(x)
        got = fluid.Executor().run(main, feed={"x": ids}, fetch_list=[out, index, counts])
    np.testing.assert_array_equal(got[0], [3, 1, 2])
    np.testing.assert_array_equal(got[1], [0, 1, 0, 2, 1, 0])
    np.testing.assert_array_equal(got[2], [3, 2, 1])


def test_ctc_greedy_decoder_padded_and_lod():
    # argmax path per step: [1, 1, 0, 2, 2, 3] (length 6) and [0, 4, 4, 0, 4, x] (length 5)
    path = np.array([[1, 1, 0, 2, 2, 3], [0, 4, 4, 0, 4, 1]])
    probs = np.full((2, 6, 5), 0.01, "float32")
    np.put_along_axis(probs, path[..., None], 0.9, axis=2)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [2, 6, 5], "float32")
        length = fluid.data("len", [2, 1], "int64")
        ids, lengths = L.ctc_greedy_decoder(x, blank=0, input_length=length, padding_value=-1)
        flat = fluid.data("flat", [None, 5], "float32", lod_level=1)
        lod_ids = L.ctc_greedy_decoder(flat, blank=0)
        exe = fluid.Executor()
        lod_feed = fluid.create_lod_tensor(probs.reshape(12, 5)[:11], [[6, 5]], fluid.CPUPlace())
        got = exe.run(main, feed={"x": probs, "len": np.array([[6], [5]]), "flat": lod_feed},
                      fetch_list=[ids, lengths, lod_ids], return_numpy=False)
    np.testing.assert_array_equal(np.array(got[0]), [[1, 2, 3, -1, -1, -1], [4, 4, -1, -1, -1, -1]])
    np.testing.assert_array_equal(np.array(got[1]), [[3], [2]])
    np.testing.assert_array_equal(np.array(got[2]).reshape(-1), [1, 2, 3, 4, 4])
    assert got[2].recursive_sequence_lengths() == [[3, 2]]


def test_warpctc_layer_matches_a_brute_force_sum_over_alignments():
    import itertools
    logits = _rng.normal(size=(3, 1, 3)).astype("float32")     # T=3, batch 1, classes {blank, 1, 2}
    label = np.array([[1, 2]], "int32")
    probs = np.exp(logits[:, 0]) / np.exp(logits[:, 0]).sum(1, keepdims=True)

    def collapse(path):
        out = [k for i, k in enumerate(path) if k != 0 and (i == 0 or k != path[i - 1])]
        return out
    total = sum(np.prod([probs[t, k] for t, k in enumerate(p)]) for p in itertools.product(range(3), repeat=3)
                if collapse(p) == [1, 2])
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [3, 1, 3], "float32")
        y = fluid.data("y", [1, 2], "int32")
        xl, yl = fluid.data("xl", [1], "int64"), fluid.data("yl", [1], "int64")
        loss = L.warpctc(x, y, input_length=xl, label_length=yl)
        got, = fluid.Executor().run(main, feed={"x": logits, "y": label, "xl": np.array([3]), "yl": np.array([2])},
                                    fetch_list=[loss])
    np.testing.assert_allclose(got.reshape(-1), [-np.log(total)], rtol=1e-5)


def _pairwise_auc(scores, labels, n):
    """Positive-negative pairs ordered right, ties within a bucket counting half."""
    bins = np.floor(scores.astype("float32") * np.float32(n)).astype(int)
    pos, neg = bins[labels == 1], bins[labels == 0]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return wins / (len(pos) * len(neg))


def test_auc_layer_global_and_sliding():
    batches = [(_rng.uniform(0, 1, (16, 1)).astype("float32"), _rng.integers(0, 2, (16, 1)).astype("int64"))
               for _ in range(3)]
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        p = fluid.data("p", [16, 1], "float32")
        label = fluid.data("label", [16, 1], "int64")
        global_auc, batch_auc, states = L.auc(L.concat([1 - p, p], axis=1), label, num_thresholds=255,
                                              slide_steps=2)
        exe = fluid.Executor()
        exe.run(startup)
        seen = []
        for i, (scores, labels) in enumerate(batches):
            got_global, got_batch = exe.run(main, feed={"p": scores, "label": labels},
                                            fetch_list=[global_auc, batch_auc])
            seen.append((scores, labels))
            all_s = np.concatenate([s for s, _ in seen]).ravel()
            all_l = np.concatenate([lab for _, lab in seen]).ravel()
            last_s = np.concatenate([s for s, _ in seen[-2:]]).ravel()
            last_l = np.concatenate([lab for _, lab in seen[-2:]]).ravel()
            np.testing.assert_allclose(float(got_global), _pairwise_auc(all_s, all_l, 255), rtol=1e-12)
            np.testing.assert_allclose(float(got_batch), _pairwise_auc(last_s, last_l, 255), rtol=1e-12)
    assert len(states) == 4 and all(v.persistable for v in states)
