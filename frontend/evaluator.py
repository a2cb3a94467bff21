"""``fluid.evaluator``: Fluid 1.x's in-graph evaluators (deprecated there in favour of
``fluid.metrics``, and warning so, as Fluid did).

An evaluator adds its metric ops to the main program and keeps running totals in persistable
``[1]`` state variables, updated by ``sums`` ops on every run; ``reset(executor)`` runs a small
program filling the states with 0, ``eval(executor)`` one computing the metric from them.

- ``ChunkEvaluator(input, label, chunk_scheme, num_chunk_types, excluded_chunk_types=None)``:
  ``chunk_eval`` per batch (``metrics``: precision, recall, F1 of the batch); ``eval`` returns
  the pass's ``(precision, recall, f1)`` as float32 ``[1]`` arrays.
- ``EditDistance(input, label, ignored_tokens=None)``: ``edit_distance`` per batch (``metrics``:
  the batch's total distance and its count of sequences with a distance other than 0); ``eval``
  returns the pass's ``(average distance, instance error rate)``.
- ``DetectionMAP(input, gt_label, gt_box, gt_difficult=None, class_num=None, ...)``: two
  ``detection_map`` ops (the batch's mAP, and the mAP accumulated in persistable state), as
  ``fluid.metrics.DetectionMAP``; ``reset`` sets its ``has_state`` to 0.

One difference: the states are also zero-filled by the startup program (Fluid left them
uninitialized until the first ``reset``).
"""

from __future__ import annotations

import warnings

import numpy as np

from ..ir import unique_name
from ..ir.program import Program, default_main_program, default_startup_program
from ..ir.variable import Variable
from .framework import program_guard
from .initializer import Constant
from .crf_layers import chunk_eval, edit_distance
from .math_layers import elementwise_div, elementwise_sub, equal, reduce_sum, sums
from .tensor_layers import cast, fill_constant, reshape
from .layer_helper import LayerHelper
from .metrics import _append_detection_map, _detection_label, _detection_map_states, chunk_scores

__all__ = ["ChunkEvaluator", "EditDistance", "DetectionMAP"]


def _clone_var(block, var: Variable) -> Variable:
    if block.has_var(var.name):
        return block.var(var.name)
    return block.create_var(var.name, var.shape, var.dtype, var.lod_level, persistable=True)


class Evaluator:
    """The base of Fluid's evaluators: ``states`` (persistable totals, zeroed by ``reset``) and
    ``metrics`` (the per-batch values)."""

    def __init__(self, name: str, **kwargs) -> None:
        warnings.warn(f"The {type(self).__name__} is deprecated, because maintain a modified program inside evaluator "
                      f"cause bug easily, please use fluid.metrics.{type(self).__name__} instead.", Warning,
                      stacklevel=3)
        self.states: list[Variable] = []
        self.metrics: list[Variable] = []
        self._name = unique_name.generate(name)
        if default_main_program().current_block().idx != 0:
            raise ValueError("You can only invoke Evaluator in root block")

    def reset(self, executor, reset_program: Program | None = None) -> None:
        """Fill the states with 0 (run ``reset_program``, a new program by default)."""
        reset_program = Program() if reset_program is None else reset_program
        with program_guard(reset_program, Program()):
            for var in self.states:
                fill_constant(var.shape, var.dtype, 0.0, out=_clone_var(reset_program.current_block(), var))
        executor.run(reset_program)

    def eval(self, executor, eval_program: Program | None = None):
        """The metric over the runs since the last ``reset``."""
        raise NotImplementedError

    def _create_state(self, suffix: str, dtype: str, shape) -> Variable:
        name = "_".join([unique_name.generate(self._name), suffix])
        state = default_main_program().global_block().create_var(name, tuple(shape), dtype, persistable=True,
                                                                  stop_gradient=True)
        Constant(0)(state, default_startup_program().global_block())
        self.states.append(state)
        return state

    def _accumulate(self, state: Variable, value: Variable) -> None:
        if tuple(value.shape) != tuple(state.shape):
            value = reshape(value, list(state.shape))
        sums([state, cast(value, state.dtype) if value.dtype != state.dtype else value], out=state)

    def _fetch_states(self, executor, eval_program: Program | None) -> list:
        eval_program = Program() if eval_program is None else eval_program
        block = eval_program.current_block()
        return executor.run(eval_program, fetch_list=[_clone_var(block, s) for s in self.states])


class ChunkEvaluator(Evaluator):
    """Chunk precision, recall and F1 accumulated over batches (see the module docstring)."""

    def __init__(self, input: Variable, label: Variable, chunk_scheme: str, num_chunk_types: int,
                 excluded_chunk_types=None) -> None:
        super().__init__("chunk_eval")
        self.num_infer_chunks = self._create_state("num_infer_chunks", "int64", [1])
        self.num_label_chunks = self._create_state("num_label_chunks", "int64", [1])
        self.num_correct_chunks = self._create_state("num_correct_chunks", "int64", [1])
        precision, recall, f1, infer, label_count, correct = chunk_eval(
            input=input, label=label, chunk_scheme=chunk_scheme, num_chunk_types=num_chunk_types,
            excluded_chunk_types=excluded_chunk_types)
        for state, value in zip(self.states, (infer, label_count, correct)):
            self._accumulate(state, value)
        self.metrics.extend([precision, recall, f1])

    def eval(self, executor, eval_program: Program | None = None):
        infer, label_count, correct = self._fetch_states(executor, eval_program)
        return tuple(np.array([v], dtype="float32") for v in chunk_scores(infer, label_count, correct))


class EditDistance(Evaluator):
    """Average edit distance and instance error rate accumulated over batches (see the module
    docstring)."""

    def __init__(self, input: Variable, label: Variable, ignored_tokens=None, **kwargs) -> None:
        super().__init__("edit_distance", **kwargs)
        self.total_distance = self._create_state("total_distance", "float32", [1])
        self.seq_num = self._create_state("seq_num", "int64", [1])
        self.instance_error = self._create_state("instance_error", "int64", [1])
        distances, seq_num = edit_distance(input=input, label=label, ignored_tokens=ignored_tokens)
        zero = fill_constant([1], "float32", 0.0)
        seq_right_count = reduce_sum(cast(equal(distances, zero), "int64"))
        instance_error_count = elementwise_sub(seq_num, reshape(seq_right_count, [1]))
        total_distance = reduce_sum(distances)
        self._accumulate(self.total_distance, total_distance)
        self._accumulate(self.seq_num, seq_num)
        self._accumulate(self.instance_error, instance_error_count)
        self.metrics.extend([total_distance, instance_error_count])

    def eval(self, executor, eval_program: Program | None = None):
        eval_program = Program() if eval_program is None else eval_program
        block = eval_program.current_block()
        with program_guard(eval_program, Program()):
            total = _clone_var(block, self.total_distance)
            seq_num = cast(_clone_var(block, self.seq_num), "float32")
            errors = cast(_clone_var(block, self.instance_error), "float32")
            result = executor.run(eval_program, fetch_list=[elementwise_div(total, seq_num),
                                                           elementwise_div(errors, seq_num)])
        return np.array(result[0]), np.array(result[1])


class DetectionMAP(Evaluator):
    """Fluid's in-graph detection mAP evaluator (deprecated there for ``fluid.metrics.DetectionMAP``,
    which it equals): ``get_map_var()`` gives (the batch's mAP, the mAP accumulated since the last
    ``reset``); ``reset(executor)`` sets ``has_state`` to 0 so the next run starts over. The
    states (positive counts, accumulated rows) are zero-filled by the startup program; see
    ``fluid.metrics.DetectionMAP`` for the differences from Fluid."""

    def __init__(self, input, gt_label, gt_box, gt_difficult=None, class_num=None, background_label=0,
                 overlap_threshold=0.5, evaluate_difficult=True, ap_version="integral") -> None:
        super().__init__("map_eval")
        self.helper = LayerHelper("map_eval")
        label = _detection_label(gt_label, gt_box, gt_difficult)
        self.cur_map = _append_detection_map(self.helper, input, label, class_num, overlap_threshold,
                                             evaluate_difficult, ap_version)
        _detection_map_states(lambda suffix, dtype, shape: self._create_state(suffix, dtype, shape), class_num,
                              input.dtype)
        self.has_state = default_main_program().global_block().create_var(
            unique_name.generate("map_eval.has_state"), (1,), "int32", persistable=True, stop_gradient=True)
        Constant(0)(self.has_state, default_startup_program().global_block())
        self.accum_map = _append_detection_map(self.helper, input, label, class_num, overlap_threshold,
                                               evaluate_difficult, ap_version, has_state=self.has_state,
                                               input_states=self.states, out_states=self.states)
        fill_constant([1], "int32", 1, out=self.has_state)

    def get_map_var(self):
        """(the current batch's mAP, the accumulated mAP): [1] variables."""
        return self.cur_map, self.accum_map

    def reset(self, executor, reset_program: Program | None = None) -> None:
        """Start the accumulation over (``has_state`` = 0; the states themselves are kept)."""
        reset_program = Program() if reset_program is None else reset_program
        with program_guard(reset_program, Program()):
            var = _clone_var(reset_program.current_block(), self.has_state)
            fill_constant(list(var.shape), var.dtype, 0, out=var)
        executor.run(reset_program)
