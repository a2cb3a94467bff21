"""``fluid.metrics``: Fluid 1.8's host-side metrics, accumulated in NumPy between runs.

A metric is updated with fetched NumPy values after each run (``update``), read with ``eval``
and cleared with ``reset``; ``get_config`` returns its name and a copy of its states (the
attributes not starting with ``_``), as in Fluid. Only ``DetectionMAP`` adds ops to a program
(Paddle's ``detection_map``, computed in the step, see its docstring).

Where this differs from Fluid 1.8: a one-element array of any rank counts as a number wherever
Fluid required a number or a ``[1]`` array (fluidjax fetches means and counts 0-d, see
docs/fluid1.md), and ``Auc.reset()`` clears its histogram (Fluid 1.8 kept it in ``_``-prefixed
attributes, which its ``reset`` skipped, so an ``Auc`` could not be reset).
"""

from __future__ import annotations

import copy
import numbers

import numpy as np


__all__ = ["MetricBase", "CompositeMetric", "Precision", "Recall", "Accuracy", "ChunkEvaluator", "EditDistance",
           "DetectionMAP", "Auc"]


def _is_numpy(value) -> bool:
    return isinstance(value, (np.ndarray, np.generic))


def _is_number(value) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, numbers.Number) or (_is_numpy(value) and np.size(value) == 1)


def _is_number_or_matrix(value) -> bool:
    return _is_number(value) or isinstance(value, np.ndarray)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


class MetricBase:
    """The base of every metric: ``update`` adds a minibatch to the states, ``eval`` computes the
    metric from them, ``reset`` sets every state (each attribute not starting with ``_``) back to
    zero (``0``, ``0.0``, zeros of an array's shape; anything else to ``None``)."""

    def __init__(self, name=None) -> None:
        self._name = str(name) if name is not None else self.__class__.__name__

    def __str__(self) -> str:
        return self._name

    def _states(self) -> dict:
        return {attr: value for attr, value in self.__dict__.items() if not attr.startswith("_")}

    def reset(self) -> None:
        """Clear the states (see the class docstring)."""
        for attr, value in self._states().items():
            if isinstance(value, bool) or not isinstance(value, (int, float, np.ndarray, np.generic)):
                setattr(self, attr, None)
            elif isinstance(value, int):
                setattr(self, attr, 0)
            elif isinstance(value, float):
                setattr(self, attr, 0.0)
            else:
                setattr(self, attr, np.zeros_like(value))

    def get_config(self) -> dict:
        """``{"name": name, "states": a deep copy of the states}``."""
        return {"name": self._name, "states": copy.deepcopy(self._states())}

    def update(self, preds, labels):
        """Add one minibatch to the states (each metric defines it)."""
        raise NotImplementedError("MetricBase.update: use a metric class, or subclass MetricBase and define update")

    def eval(self):
        """The metric over everything added since the last ``reset`` (each metric defines it)."""
        raise NotImplementedError("MetricBase.eval: use a metric class, or subclass MetricBase and define eval")


class CompositeMetric(MetricBase):
    """Several metrics updated with the same ``(preds, labels)``; ``eval`` returns their values
    in the order they were added."""

    def __init__(self, name=None) -> None:
        super().__init__(name)
        self._metrics: list[MetricBase] = []

    def add_metric(self, metric: MetricBase) -> None:
        """Add ``metric`` (a :class:`MetricBase`)."""
        _require(isinstance(metric, MetricBase), "SubMetric should be inherit from MetricBase.")
        self._metrics.append(metric)

    def update(self, preds, labels) -> None:
        for metric in self._metrics:
            metric.update(preds, labels)

    def eval(self) -> list:
        return [metric.eval() for metric in self._metrics]


def _binary_pairs(preds, labels):
    _require(_is_numpy(preds), "The 'preds' must be a numpy ndarray.")
    _require(_is_numpy(labels), "The 'labels' must be a numpy ndarray.")
    preds = np.rint(np.asarray(preds)).astype("int32").reshape(len(labels), -1)[:, 0]
    return preds, np.asarray(labels).reshape(len(labels), -1)[:, 0]


class _BinaryCounts(MetricBase):
    """tp / (tp + other): ``preds`` are probabilities of class 1 (rounded with ``np.rint``), one per
    sample; ``labels`` 0 or 1. ``_other`` names the second count (``fp`` or ``fn``)."""

    _other = ""

    def __init__(self, name=None) -> None:
        super().__init__(name)
        self.tp = 0
        setattr(self, self._other, 0)

    def _counts(self, preds, labels) -> tuple[int, int]:
        raise NotImplementedError

    def update(self, preds, labels) -> None:
        tp, other = self._counts(*_binary_pairs(preds, labels))
        self.tp += tp
        setattr(self, self._other, getattr(self, self._other) + other)

    def eval(self) -> float:
        total = self.tp + getattr(self, self._other)
        return float(self.tp) / total if total != 0 else 0.0


class Precision(_BinaryCounts):
    """Binary precision tp / (tp + fp) (see ``_BinaryCounts`` for the inputs)."""

    _other = "fp"

    def _counts(self, preds, labels):
        predicted = preds == 1
        return int(np.sum(predicted & (labels == 1))), int(np.sum(predicted & (labels != 1)))


class Recall(_BinaryCounts):
    """Binary recall tp / (tp + fn) (see ``_BinaryCounts`` for the inputs)."""

    _other = "fn"

    def _counts(self, preds, labels):
        positive = labels == 1
        return int(np.sum(positive & (preds == 1))), int(np.sum(positive & (preds != 1)))


class Accuracy(MetricBase):
    """The mean of minibatch accuracies weighted by their batch sizes:
    ``update(value=minibatch_accuracy, weight=batch_size)``."""

    def __init__(self, name=None) -> None:
        super().__init__(name)
        self.value = 0.0
        self.weight = 0.0

    def update(self, value, weight) -> None:
        _require(_is_number_or_matrix(value), "The 'value' must be a number(int, float) or a numpy ndarray.")
        _require(_is_number(weight), "The 'weight' must be a number(int, float).")
        self.value += value * weight
        self.weight += weight

    def eval(self):
        if self.weight == 0:
            raise ValueError("There is no data in Accuracy Metrics. Please check layers.accuracy output has added "
                             "to Accuracy.")
        return self.value / self.weight


class ChunkEvaluator(MetricBase):
    """Precision, recall and F1 of chunk detection from the counts ``layers.chunk_eval`` returns
    (``num_infer_chunks``, ``num_label_chunks``, ``num_correct_chunks``), summed over minibatches."""

    def __init__(self, name=None) -> None:
        super().__init__(name)
        self.num_infer_chunks = 0
        self.num_label_chunks = 0
        self.num_correct_chunks = 0

    def update(self, num_infer_chunks, num_label_chunks, num_correct_chunks) -> None:
        for what, value in (("num_infer_chunks", num_infer_chunks), ("num_label_chunks", num_label_chunks),
                            ("num_correct_chunks", num_correct_chunks)):
            _require(_is_number_or_matrix(value), f"The '{what}' must be a number(int) or a numpy ndarray.")
        self.num_infer_chunks += num_infer_chunks
        self.num_label_chunks += num_label_chunks
        self.num_correct_chunks += num_correct_chunks

    def eval(self) -> tuple:
        return chunk_scores(self.num_infer_chunks, self.num_label_chunks, self.num_correct_chunks)


def chunk_scores(num_infer, num_label, num_correct) -> tuple[float, float, float]:
    """Fluid's ``(precision, recall, f1)`` from chunk counts (0 where a count is 0)."""
    num_infer, num_label, num_correct = (float(np.sum(v)) for v in (num_infer, num_label, num_correct))
    precision = num_correct / num_infer if num_infer else 0
    recall = num_correct / num_label if num_label else 0
    f1 = 2 * precision * recall / (precision + recall) if num_correct else 0
    return precision, recall, f1


class EditDistance(MetricBase):
    """The average edit distance and the instance error rate (the share of sequences with a
    distance other than 0) over minibatches: ``update(distances, seq_num)`` with the two results
    of ``layers.edit_distance``."""

    def __init__(self, name=None) -> None:
        super().__init__(name)
        self.total_distance = 0.0
        self.seq_num = 0
        self.instance_error = 0

    def update(self, distances, seq_num) -> None:
        _require(_is_numpy(distances), "The 'distances' must be a numpy ndarray.")
        _require(_is_number_or_matrix(seq_num), "The 'seq_num' must be a number(int, float) or a numpy ndarray.")
        seq_right_count = np.sum(np.asarray(distances) == 0)
        self.seq_num += seq_num
        self.instance_error += seq_num - seq_right_count
        self.total_distance += np.sum(distances)

    def eval(self) -> tuple:
        if np.all(np.asarray(self.seq_num) == 0):
            raise ValueError("There is no data in EditDistance Metric. Please check layers.edit_distance output has "
                             "been added to EditDistance.")
        return self.total_distance / self.seq_num, self.instance_error / np.float64(self.seq_num)


class Auc(MetricBase):
    """Area under the ROC curve of a binary classifier, from a histogram of ``num_thresholds + 1``
    buckets of the predicted probability of class 1: ``update(preds, labels)`` with ``preds``
    of shape [N, 2] (column 1 is used) and ``labels`` of N 0/1 values. Only ``curve="ROC"``, as
    in Fluid 1.8's Python metric."""

    def __init__(self, name=None, curve: str = "ROC", num_thresholds: int = 4095) -> None:
        super().__init__(name)
        if curve != "ROC":
            raise ValueError(f"Auc: only curve='ROC' is computed by the Python metric (as in Fluid 1.8), got "
                             f"{curve!r}")
        self._curve = curve
        self._num_thresholds = int(num_thresholds)
        self._stat_pos = np.zeros(self._num_thresholds + 1)
        self._stat_neg = np.zeros(self._num_thresholds + 1)

    def update(self, preds, labels) -> None:
        _require(_is_numpy(labels), "The 'labels' must be a numpy ndarray.")
        _require(_is_numpy(preds), "The 'predictions' must be a numpy ndarray.")
        labels = np.asarray(labels).reshape(-1)
        bins = (np.asarray(preds)[:, 1] * self._num_thresholds).astype(np.int64)
        if bins.size and (bins.max() > self._num_thresholds or bins.min() < 0):
            raise ValueError("Auc.update: predictions must lie in [0, 1]")
        np.add.at(self._stat_pos, bins[labels != 0], 1.0)
        np.add.at(self._stat_neg, bins[labels == 0], 1.0)

    def reset(self) -> None:
        self._stat_pos[:] = 0
        self._stat_neg[:] = 0

    def eval(self) -> float:
        tot_pos = tot_neg = auc = 0.0
        for idx in range(self._num_thresholds, -1, -1):     # Fluid's trapezoids, from the top bucket down
            pos_prev, neg_prev = tot_pos, tot_neg
            tot_pos += self._stat_pos[idx]
            tot_neg += self._stat_neg[idx]
            auc += abs(tot_neg - neg_prev) * (tot_pos + pos_prev) / 2.0
        return auc / tot_pos / tot_neg if tot_pos > 0.0 and tot_neg > 0.0 else 0.0


def _detection_label(gt_label, gt_box, gt_difficult):
    """Fluid's Label input of ``detection_map``: [label, (difficult,) xmin, ymin, xmax, ymax] rows."""
    from .tensor_layers import cast, concat

    gt_label = cast(gt_label, gt_box.dtype)
    if gt_difficult is not None:
        return concat([gt_label, cast(gt_difficult, gt_box.dtype), gt_box], axis=1)
    return concat([gt_label, gt_box], axis=1)


def _append_detection_map(helper, detect_res, label, class_num, overlap_threshold, evaluate_difficult, ap_version,
                          has_state=None, input_states=None, out_states=None):
    """Fluid 1.8's ``layers.detection.detection_map``: appends the op and returns its MAP [1].
    As in Fluid 1.8, ``background_label`` is not passed on (the op's default, 0, holds)."""
    if not isinstance(class_num, int) or class_num <= 0:
        raise ValueError(f"DetectionMAP needs class_num, a positive int (the number of classes), got {class_num!r}")
    if ap_version not in ("integral", "11point"):
        raise ValueError(f"DetectionMAP: ap_version must be 'integral' or '11point', got {ap_version!r}")
    map_out = helper.create_tmp("float32", stop_gradient=True)
    outs = list(out_states) if out_states else [helper.create_tmp(t, stop_gradient=True)
                                                for t in ("int32", detect_res.dtype, detect_res.dtype)]
    ins = list(input_states) if input_states else [None, None, None]
    helper.append_op(
        "detection_map",
        inputs={"Label": label, "DetectRes": detect_res, "HasState": has_state, "PosCount": ins[0],
                "TruePos": ins[1], "FalsePos": ins[2]},
        outputs={"MAP": map_out, "AccumPosCount": outs[0], "AccumTruePos": outs[1], "AccumFalsePos": outs[2]},
        attrs={"overlap_threshold": float(overlap_threshold), "evaluate_difficult": bool(evaluate_difficult),
               "ap_type": ap_version, "class_num": class_num})
    return map_out


def _detection_map_states(create, class_num: int, dtype):
    """The accumulating op's state: positive counts [C, 1] and the true / false positive rows, each
    zero-filled by the startup program as an empty state with the op's initial room (the layout of
    lowering/ops/detection_map.py), so the first run compiles the shapes later runs use."""
    from ..lowering.ops.detection_map import INITIAL_ROOM

    rows = [INITIAL_ROOM + class_num + 1, 2]
    return [create("accum_pos_count", "int32", [class_num, 1]),
            create("accum_true_pos", dtype, rows), create("accum_false_pos", dtype, rows)]


class DetectionMAP:
    """Fluid 1.8's in-graph detection mAP: ``get_map_var()`` gives (the batch's mAP, the mAP
    accumulated since the last ``reset``), both [1] variables to fetch.

    ``input`` is the detections (a LoD tensor [M, 6]: label, score, xmin, ymin, xmax, ymax, one
    sequence per image, as ``multiclass_nms`` / ``detection_output`` give), ``gt_label`` [G, 1],
    ``gt_box`` [G, 4] and ``gt_difficult`` [G, 1] (or None) the ground truths (LoD tensors with one
    sequence per image). Two ``detection_map`` ops are added to the main program: one for the
    batch, one adding the batch to persistable state (``has_state``, the positive counts, the
    accumulated rows), then ``has_state`` is set to 1. ``reset(executor)`` sets ``has_state`` to 0,
    so the next run starts over.

    Differences from Fluid 1.8: the states are zero-filled by the startup program (Fluid left them
    uninitialized), the rows state has the input's dtype (Fluid declared float32) and holds its
    rows in the padded layout of ops/detection_map.py. As in Fluid 1.8, ``background_label`` does
    not reach the op (it keeps its default 0: classes with no positives are left out of the mAP).
    """

    def __init__(self, input, gt_label, gt_box, gt_difficult=None, class_num=None, background_label=0,
                 overlap_threshold=0.5, evaluate_difficult=True, ap_version="integral") -> None:
        from ..ir import unique_name
        from .initializer import Constant
        from .layer_helper import LayerHelper
        from .tensor_layers import fill_constant

        self.helper = LayerHelper("map_eval")
        label = _detection_label(gt_label, gt_box, gt_difficult)
        self.cur_map = _append_detection_map(self.helper, input, label, class_num, overlap_threshold,
                                             evaluate_difficult, ap_version)
        prefix = unique_name.generate(self.helper.name)

        def create(suffix, dtype, shape):
            var = self.helper.main_program.global_block().create_var(
                f"{prefix}_{suffix}", tuple(shape), dtype, persistable=True, stop_gradient=True)
            Constant(0)(var, self.helper.startup_program.global_block())
            return var

        states = _detection_map_states(create, class_num, input.dtype) if isinstance(class_num, int) else None
        self.has_state = create("has_state", "int32", [1])
        self.accum_map = _append_detection_map(self.helper, input, label, class_num, overlap_threshold,
                                               evaluate_difficult, ap_version, has_state=self.has_state,
                                               input_states=states, out_states=states)
        fill_constant([1], "int32", 1, out=self.has_state)

    def get_map_var(self):
        """(the current batch's mAP, the accumulated mAP): [1] variables."""
        return self.cur_map, self.accum_map

    def reset(self, executor, reset_program=None) -> None:
        """Start the accumulation over: runs ``reset_program`` (a new program by default) setting
        ``has_state`` to 0."""
        from ..ir.program import Program
        from .framework import program_guard
        from .tensor_layers import fill_constant

        reset_program = Program() if reset_program is None else reset_program
        with program_guard(reset_program, Program()):
            block = reset_program.current_block()
            var = block.var(self.has_state.name) if block.has_var(self.has_state.name) else block.create_var(
                self.has_state.name, self.has_state.shape, self.has_state.dtype, persistable=True)
            fill_constant(list(var.shape), var.dtype, 0, out=var)
        executor.run(reset_program)
