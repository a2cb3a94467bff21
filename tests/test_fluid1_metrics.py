"""``fluid.metrics`` (host-side accumulators) against Paddle 2.6.2's ``paddle.metric`` and NumPy
formulas; ``fluid.evaluator`` (in-graph totals) against Paddle 2.6.2 running the same program
bytes over the same batches."""

import warnings

import numpy as np
import pytest

import fluidjax as fluid
from fluidjax import NotOfferedError

RNG = np.random.default_rng(7)


def _binary_batches(n=4, size=37):
    rng = np.random.default_rng(3)
    return [(rng.random((size, 1)).astype("float32"), rng.integers(0, 2, (size, 1)).astype("int64"))
            for _ in range(n)]


def test_module_paths():
    import fluidjax.evaluator as evaluator
    import fluidjax.metrics as metrics
    from fluidjax.metrics import Auc, ChunkEvaluator  # noqa: F401
    assert metrics is fluid.metrics and evaluator is fluid.evaluator
    assert {"MetricBase", "CompositeMetric", "Precision", "Recall", "Accuracy", "ChunkEvaluator", "EditDistance",
            "DetectionMAP", "Auc"} <= set(metrics.__all__)


@pytest.mark.parametrize("name", ["Precision", "Recall"])
def test_precision_recall_equal_paddle_metric(name):
    import paddle
    ours, theirs = getattr(fluid.metrics, name)(), getattr(paddle.metric, name)()
    for preds, labels in _binary_batches():
        ours.update(preds, labels)
        theirs.update(preds, labels)
    assert ours.eval() == pytest.approx(theirs.accumulate(), abs=1e-12)
    assert 0 < ours.eval() < 1
    ours.reset()
    assert ours.eval() == 0.0 and ours.get_config()["states"] == ({"tp": 0, "fp": 0} if name == "Precision"
                                                                 else {"tp": 0, "fn": 0})


@pytest.mark.parametrize("num_thresholds", [4095, 200])
def test_auc_equals_paddle_metric(num_thresholds):
    import paddle
    ours = fluid.metrics.Auc("auc", num_thresholds=num_thresholds)
    theirs = paddle.metric.Auc(num_thresholds=num_thresholds)
    for p1, labels in _binary_batches():
        preds = np.concatenate([1 - p1, p1], axis=1)
        ours.update(preds, labels)
        theirs.update(preds, labels)
    assert ours.eval() == pytest.approx(theirs.accumulate(), rel=1e-12)
    ours.reset()
    assert ours.eval() == 0.0


def test_auc_of_a_perfect_and_a_reversed_ranking():
    auc = fluid.metrics.Auc("a")
    scores = np.linspace(0.05, 0.95, 10)[:, None]
    labels = (scores[:, 0] > 0.5).astype("int64")
    auc.update(np.concatenate([1 - scores, scores], 1), labels)
    assert auc.eval() == pytest.approx(1.0)
    auc.reset()
    auc.update(np.concatenate([scores, 1 - scores], 1), labels)
    assert auc.eval() == pytest.approx(0.0)


def test_accuracy_is_the_batch_size_weighted_mean():
    acc = fluid.metrics.Accuracy()
    values, weights = [0.5, 0.75, np.float32(0.25)], [4, 8, 2]
    for v, w in zip(values, weights):
        acc.update(value=np.asarray(v) if isinstance(v, float) else v, weight=w)
    assert acc.eval() == pytest.approx(np.average(values, weights=weights))
    acc.reset()
    with pytest.raises(ValueError, match="no data"):
        acc.eval()
    with pytest.raises(ValueError, match="weight"):
        acc.update(0.5, "4")


def test_chunk_and_edit_distance_metrics_follow_fluids_formulas():
    chunk = fluid.metrics.ChunkEvaluator()
    counts = [(5, 4, 3), (np.array([2]), np.array([6]), np.array([1]))]
    for c in counts:
        chunk.update(*c)
    infer, label, correct = 7, 10, 4
    p, r = correct / infer, correct / label
    assert chunk.eval() == pytest.approx((p, r, 2 * p * r / (p + r)))
    chunk.reset()
    assert chunk.eval() == (0, 0, 0)

    ed = fluid.metrics.EditDistance("ed")
    d1, d2 = np.array([[0.0], [2.0], [1.0]]), np.array([[0.0], [0.0], [3.0], [1.0]])
    ed.update(d1, 3)
    ed.update(d2, np.array([4]))
    distance, error = ed.eval()
    assert np.ravel(distance)[0] == pytest.approx(7.0 / 7) and np.ravel(error)[0] == pytest.approx(4 / 7)
    ed.reset()
    with pytest.raises(ValueError, match="no data"):
        ed.eval()


def test_composite_metric_and_get_config():
    comp = fluid.metrics.CompositeMetric()
    prec, rec = fluid.metrics.Precision("p"), fluid.metrics.Recall("r")
    comp.add_metric(prec)
    comp.add_metric(rec)
    with pytest.raises(ValueError):
        comp.add_metric(object())
    preds = np.array([[0.9], [0.2], [0.7], [0.1]])
    labels = np.array([[1], [1], [0], [0]])
    comp.update(preds, labels)
    assert comp.eval() == [0.5, 0.5]          # tp 1, fp 1 (row 3), fn 1 (row 2)
    assert prec.get_config() == {"name": "p", "states": {"tp": 1, "fp": 1}}
    assert str(rec) == "r"
    with pytest.raises(ValueError, match="numpy"):
        prec.update([0.9], labels)


def _lod(data, lengths):
    t = fluid.LoDTensor(np.asarray(data))
    t.set_recursive_sequence_lengths([list(lengths)])
    return t


def _tag_batches(count=3, tags=5, seed=11):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        lengths = rng.integers(1, 7, 4).tolist()
        rows = sum(lengths)
        out.append((lengths, rng.integers(0, tags, (rows, 1)).astype("int64"),
                    rng.integers(0, tags, (rows, 1)).astype("int64")))
    return out


def _paddle_states(main, startup, batches, state_names):
    """Paddle 2.6.2 running our program bytes over the batches with one scope."""
    import paddle
    from paddle_oracle import run
    scope = paddle.static.Scope()
    run(startup.serialize(), {}, [], scope=scope)
    for lengths, hyp, ref in batches:
        run(main.serialize(), {"hyp": hyp, "ref": ref}, [], scope=scope, lods={"hyp": [lengths], "ref": [lengths]})
    return [np.array(scope.find_var(n).get_tensor()) for n in state_names]


def test_chunk_evaluator_accumulates_like_paddle():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        hyp = fluid.data("hyp", [None, 1], "int64", lod_level=1)
        ref = fluid.data("ref", [None, 1], "int64", lod_level=1)
        with pytest.warns(Warning, match="deprecated"):
            ev = fluid.evaluator.ChunkEvaluator(hyp, ref, "IOB", 2)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    batches = _tag_batches()
    with fluid.scope_guard(scope):
        exe.run(startup)
        ev.reset(exe)
        for lengths, h, r in batches:
            exe.run(main, feed={"hyp": _lod(h, lengths), "ref": _lod(r, lengths)}, fetch_list=ev.metrics)
        precision, recall, f1 = ev.eval(exe)
        ours = [np.array(scope.find_var(s.name).get_tensor()) for s in ev.states]
    theirs = _paddle_states(main, startup, batches, [s.name for s in ev.states])
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)
    infer, label, correct = (float(v[0]) for v in theirs)
    assert correct > 0
    p, r = correct / infer, correct / label
    np.testing.assert_allclose([precision[0], recall[0], f1[0]], [p, r, 2 * p * r / (p + r)], rtol=1e-6)
    assert precision.dtype == np.float32 and precision.shape == (1,)
    with fluid.scope_guard(scope):
        ev.reset(exe)
        assert [float(x[0]) for x in ev.eval(exe)] == [0.0, 0.0, 0.0]


def test_edit_distance_evaluator_accumulates_like_paddle():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        hyp = fluid.data("hyp", [None, 1], "int64", lod_level=1)
        ref = fluid.data("ref", [None, 1], "int64", lod_level=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ev = fluid.evaluator.EditDistance(hyp, ref)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    batches = _tag_batches(seed=4, tags=3)
    with fluid.scope_guard(scope):
        exe.run(startup)
        for lengths, h, r in batches:
            exe.run(main, feed={"hyp": _lod(h, lengths), "ref": _lod(r, lengths)})
        distance, error = ev.eval(exe)
        ours = [np.array(scope.find_var(s.name).get_tensor()) for s in ev.states]
    theirs = _paddle_states(main, startup, batches, [s.name for s in ev.states])
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    total, seqs, errors = (float(v.reshape(-1)[0]) for v in theirs)
    assert seqs == 12 and errors > 0
    np.testing.assert_allclose([float(np.ravel(distance)[0]), float(np.ravel(error)[0])],
                               [total / seqs, errors / seqs], rtol=1e-6)
