"""Fluid 1.8's decoding API: ``Decoder`` (the base class), ``BeamSearchDecoder`` and
``dynamic_decode``, which runs a decoder step by step in a ``While`` loop.

``dynamic_decode(decoder, inits, max_step_num, ...)`` calls ``decoder.initialize(inits)`` once,
then ``decoder.step(time, inputs, states, **kwargs)`` in a ``While`` until every entry is
finished or ``max_step_num + 1`` steps have run (Fluid's bound: the loop goes on while
``step <= max_step_num``), collecting each step's outputs, and finally ``decoder.finalize``.
The loop carries copies of the inputs and states and updates them in place (Fluid's ``is_test``
form, without overwriting the caller's variables); each output is collected in a
[max_step_num + 1, batch, ...] tensor, step t scattered into row t (differentiable, unlike
``tensor_array_to_tensor`` here); the ``while`` op gets ``max_iterations = max_step_num + 1``,
which bounds its gradient's scan.

**Bounds.** A compiled step has fixed sizes, so ``max_step_num`` is required: without it Fluid
decodes until every beam ends, which no static bound can promise; fluidjax raises a
``ValueError`` rather than cut decoding short silently. The stacked outputs always have
``max_step_num + 1`` steps (Fluid's have as many as the loop ran): steps after the loop ended
hold what the arrays hold there — zeros for a general decoder; ``BeamSearchDecoder`` fills them
so that they extend Fluid's result (see :meth:`BeamSearchDecoder.finalize`). Use
``return_length=True`` for each sequence's real length.

``BeamSearchDecoder`` is Fluid's beam search over a cell: states tiled to
[batch, beam, ...], log-softmax scores accumulated per beam, finished beams forced to ``end_token``
(no cost), ``topk`` over beam × vocabulary, states, finished flags and lengths gathered from the
chosen parents (``gather_nd``), and ``gather_tree`` at the end to backtrack the chosen ids along
their parents: ``predicted_ids`` is [batch, time, beam] (time-major with ``output_time_major``).

>>> decoder = BeamSearchDecoder(cell, start_token=0, end_token=1, beam_size=4,
...                             embedding_fn=embed, output_fn=project)           # doctest: +SKIP
>>> ids, states = dynamic_decode(decoder, inits=cell.get_initial_states(enc), max_step_num=20)  # doctest: +SKIP

``BasicDecoder`` with a ``TrainingHelper`` (teacher forcing) or ``GreedyEmbeddingHelper`` is
Fluid 1.8's other decoder; training through ``dynamic_decode`` works (its gradient goes through
the ``while``).
"""

from __future__ import annotations

import collections
import numbers

import numpy as np

from ..ir import dtypes
from ..ir.errors import ShapeError
from ..ir.variable import Variable
from .control_flow_layers import While, array_write, create_array, increment
from .layer_helper import LayerHelper
from .math_layers import (argmax, cumsum, elementwise_add, elementwise_floordiv, elementwise_mod, elementwise_mul,
                          equal, less_equal, less_than, log, logical_and, logical_not, logical_or, reduce_max,
                          scale, softmax)
from .math_layers import topk as _topk
from .rnn_cells import flatten, map_structure
from .tensor_layers import (assign, cast, fill_constant, fill_constant_batch_size_like, gather, gather_nd, ones_like,
                            pad, reshape, scatter, slice, squeeze, stack, tile, transpose, unsqueeze, zeros_like)

__all__ = ["Decoder", "BeamSearchDecoder", "dynamic_decode", "DecodeHelper", "TrainingHelper",
           "GreedyEmbeddingHelper", "SampleEmbeddingHelper", "BasicDecoder"]

_KINF = 1e9       # Fluid's "minus infinity" for the log-probabilities of impossible choices


# -- ops without a public layer here -----------------------------------------------------------------
def _reduce_all(x: Variable) -> Variable:
    """Whether every element of a bool tensor holds (a bool of shape [1], as Fluid's reduce_all)."""
    helper = LayerHelper("reduce_all")
    out = helper.create_tmp("bool", stop_gradient=True)
    helper.append_op("reduce_all", {"X": x}, {"Out": out}, {"dim": [0], "keep_dim": False, "reduce_all": True})
    return reshape(out, [1])            # Fluid 1.x's full reductions have shape [1]


def _stack_array(array: Variable) -> Variable:
    """The elements of ``array`` stacked along a new first dim (``tensor_array_to_tensor``)."""
    helper = LayerHelper("tensor_array_to_tensor")
    out = helper.create_tmp(array.dtype)
    index = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op("tensor_array_to_tensor", {"X": array}, {"Out": out, "OutIndex": index},
                     {"axis": 0, "use_stack": True})
    return out


def _gather_tree(ids: Variable, parents: Variable) -> Variable:
    """Paddle's ``gather_tree``: full sequences backtracked from time-major step ids and parents."""
    helper = LayerHelper("gather_tree")
    out = helper.create_tmp(ids.dtype, stop_gradient=True)
    helper.append_op("gather_tree", {"Ids": ids, "Parents": parents}, {"Out": out})
    return out


def _constant(values, dtype: str) -> Variable:
    """A constant tensor of ``values`` (an ``assign_value`` op), as Fluid's ``assign(ndarray)``."""
    array = np.asarray(values, dtype=dtype)
    field = {"float32": "fp32_values", "float64": "fp64_values", "int32": "int32_values",
             "int64": "int64_values", "bool": "bool_values"}[dtype]
    helper = LayerHelper("assign_value")
    out = helper.create_tmp(dtype, stop_gradient=True)
    helper.append_op("assign_value", outputs={"Out": out},
                     attrs={"shape": list(array.shape), "dtype": dtypes.to_enum(dtype),
                            field: [v.item() for v in array.reshape(-1)]})
    return out


def _in_parent_block(fn):
    """Run ``fn()`` with the enclosing block current (a variable that outlives a loop body)."""
    program = LayerHelper("decode").main_program
    saved = program._current_block_idx
    program._current_block_idx = program.current_block().parent_idx
    try:
        return fn()
    finally:
        program._current_block_idx = saved


# -- Decoder ----------------------------------------------------------------------------------------
class Decoder:
    """The base class of decoders run by :func:`dynamic_decode` (Fluid's ``layers.Decoder``).

    ``initialize(inits) -> (initial_inputs, initial_states, finished)``;
    ``step(time, inputs, states, **kwargs) -> (outputs, next_states, next_inputs, finished)``;
    optionally ``finalize(outputs, final_states, sequence_lengths) -> (final_outputs,
    final_states)`` (the default raises ``NotImplementedError``, and the stacked outputs are
    returned as they are). ``tracks_own_finished`` (default False): whether ``step``'s
    ``finished`` already includes the entries finished before (else dynamic_decode ORs them).
    """

    def initialize(self, inits):
        """Called once before the loop: returns (initial inputs, initial states, finished [bool])."""
        raise NotImplementedError

    def step(self, time, inputs, states, **kwargs):
        """One decoding step: returns (outputs, next states, next inputs, finished)."""
        raise NotImplementedError

    def finalize(self, outputs, final_states, sequence_lengths):
        """Called once after the loop with the outputs stacked over time ([time, batch, ...])."""
        raise NotImplementedError

    @property
    def tracks_own_finished(self) -> bool:
        """Whether ``step`` keeps track of entries that finished earlier itself."""
        return False


class BeamSearchDecoder(Decoder):
    """Beam search over ``cell`` (Fluid 1.8's ``layers.BeamSearchDecoder``).

    ``embedding_fn`` turns the chosen ids [batch, beam] into the cell's next inputs (without it the
    cell gets the ids); ``output_fn`` turns the cell's outputs into logits over the vocabulary.
    The cell sees inputs and states with batch and beam merged ([batch·beam, ...]); anything
    else it reads that is per batch entry must be tiled the same way first, with
    :meth:`tile_beam_merge_with_batch` (an attention's encoder output, say).
    """

    OutputWrapper = collections.namedtuple("OutputWrapper", ("scores", "predicted_ids", "parent_ids"))
    StateWrapper = collections.namedtuple("StateWrapper", ("cell_states", "log_probs", "finished", "lengths"))

    def __init__(self, cell, start_token: int, end_token: int, beam_size: int, embedding_fn=None,
                 output_fn=None) -> None:
        for what, value in (("start_token", start_token), ("end_token", end_token), ("beam_size", beam_size)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"BeamSearchDecoder: {what} must be an int, got {value!r}")
        if beam_size <= 0:
            raise ValueError(f"BeamSearchDecoder: beam_size must be positive, got {beam_size}")
        self.cell = cell
        self.embedding_fn = embedding_fn
        self.output_fn = output_fn
        self.start_token = int(start_token)
        self.end_token = int(end_token)
        self.beam_size = int(beam_size)

    # -- reshaping between [batch, beam, ...] and [batch * beam, ...] -------------------------------
    @staticmethod
    def tile_beam_merge_with_batch(x: Variable, beam_size: int) -> Variable:
        """``x`` [batch, ...] with each entry repeated ``beam_size`` times: [batch·beam, ...]
        (entries t[0], t[0], ..., t[1], t[1], ...)."""
        if not isinstance(x, Variable) or x.ndim < 1:
            raise TypeError(f"tile_beam_merge_with_batch: x must be a Variable [batch, ...], got {x!r}")
        x = unsqueeze(x, [1])                                        # [batch, 1, ...]
        x = tile(x, [1, int(beam_size)] + [1] * (x.ndim - 2))         # [batch, beam, ...]
        # Moved behind the other dims so that a reshape with copied dims (0) merges batch and beam
        # even where the other dims are unknown.
        rank = x.ndim
        x = transpose(x, list(range(2, rank)) + [0, 1])              # [..., batch, beam]
        x = reshape(x, [0] * (rank - 2) + [-1])                      # [..., batch·beam]
        return transpose(x, [rank - 2] + list(range(rank - 2)))      # [batch·beam, ...]

    def _split_batch_beams(self, x: Variable) -> Variable:
        """[batch·beam, ...] -> [batch, beam, ...] (x's other dims must be known)."""
        return reshape(x, [-1, self.beam_size] + list(x.shape[1:]))

    def _merge_batch_beams(self, x: Variable) -> Variable:
        """[batch, beam, ...] -> [batch·beam, ...] (x's other dims must be known)."""
        return reshape(x, [-1] + list(x.shape[2:]))

    def _expand_to_beam_size(self, x: Variable) -> Variable:
        """[batch, ...] -> [batch, beam, ...], each entry repeated."""
        x = unsqueeze(x, [1])
        return tile(x, [1, self.beam_size] + [1] * (x.ndim - 2))

    def _mask_probs(self, probs: Variable, finished: Variable) -> Variable:
        """Finished beams put all their probability on ``end_token`` (log-prob 0, others -1e9)."""
        finished = cast(finished, probs.dtype)
        return elementwise_add(
            elementwise_mul(tile(unsqueeze(finished, [2]), [1, 1, self.vocab_size]), self.noend_mask_tensor),
            elementwise_mul(probs, scale(finished, -1.0, 1.0), axis=0))

    def _gather(self, x: Variable, indices: Variable, batch_size=None) -> Variable:
        """``x[b, indices[b, k]]`` for x [batch, beam, ...] and int64 indices [batch, beam]."""
        coordinates = stack([self._batch_pos, indices], axis=2)
        coordinates.stop_gradient = True
        return gather_nd(x, coordinates)

    # -- the decoder ------------------------------------------------------------------------------
    def initialize(self, initial_cell_states):
        """The first inputs (``start_token`` ids, embedded), the states (cell states tiled to the
        beams, log-probs 0 for beam 0 and -1e9 for the others so that the first step expands one
        beam, nothing finished, lengths 0) and ``finished`` (all False)."""
        self.kinf = _KINF
        state = flatten(initial_cell_states)[0]
        if not isinstance(state, Variable):
            raise TypeError(f"BeamSearchDecoder.initialize: the initial cell states must be Variables, got {state!r}")
        beam = self.beam_size
        self.batch_size = reshape(LayerHelper("shape").simple_op("shape", {"Input": state}, dtype="int32"), [-1])
        self.start_token_tensor = fill_constant([1], "int64", self.start_token)
        self.end_token_tensor = fill_constant([1], "int64", self.end_token)
        # Each beam's batch index [batch, beam], made here, outside the loop, from the states' batch
        # size (Fluid takes a range of the batch size in every step; this one keeps static shapes).
        ones = fill_constant_batch_size_like(state, [-1, beam], "int64", 1)
        self._batch_pos = cumsum(ones, axis=0, exclusive=True)
        self._batch_pos.stop_gradient = True
        init_cell_states = map_structure(self._expand_to_beam_size, initial_cell_states)
        init_inputs = fill_constant_batch_size_like(state, [-1, beam], "int64", self.start_token)
        zeros = fill_constant_batch_size_like(state, [-1, beam], state.dtype, 0.0)
        log_probs = elementwise_add(zeros, _constant([[0.0] + [-self.kinf] * (beam - 1)], state.dtype))
        init_finished = fill_constant_batch_size_like(state, [-1, beam], "bool", False)
        init_lengths = zeros_like(init_inputs)
        init_inputs = self.embedding_fn(init_inputs) if self.embedding_fn else init_inputs
        return init_inputs, self.StateWrapper(init_cell_states, log_probs, init_finished, init_lengths), init_finished

    def _beam_search_step(self, time, logits: Variable, next_cell_states, beam_state):
        """Scores of every (beam, word) continuation, the ``beam_size`` best per batch entry, and
        the states, finished flags and lengths of their parents."""
        if logits.ndim != 3 or logits.shape[-1] <= 0:
            raise ShapeError(f"BeamSearchDecoder: the logits must be [batch, beam, vocabulary] with a known "
                             f"vocabulary size, got {logits.shape}")
        self.vocab_size = logits.shape[-1]
        if not 0 <= self.end_token < self.vocab_size:
            raise ValueError(f"BeamSearchDecoder: end_token {self.end_token} is outside the vocabulary of "
                             f"{self.vocab_size}")
        self.vocab_size_tensor = fill_constant([1], "int64", self.vocab_size)
        noend = [-self.kinf] * self.vocab_size
        noend[self.end_token] = 0.0
        self.noend_mask_tensor = _constant(noend, logits.dtype)
        step_log_probs = log(softmax(logits))
        step_log_probs = self._mask_probs(step_log_probs, beam_state.finished)
        log_probs = elementwise_add(step_log_probs, beam_state.log_probs, axis=0)
        scores = reshape(log_probs, [-1, self.beam_size * self.vocab_size])
        topk_scores, topk_indices = _topk(scores, k=self.beam_size)
        beam_indices = elementwise_floordiv(topk_indices, self.vocab_size_tensor)
        token_indices = elementwise_mod(topk_indices, self.vocab_size_tensor)
        next_log_probs = self._gather(scores, topk_indices)
        next_cell_states = map_structure(lambda x: self._gather(x, beam_indices), next_cell_states)
        next_finished = self._gather(beam_state.finished, beam_indices)
        next_lengths = self._gather(beam_state.lengths, beam_indices)
        next_lengths = elementwise_add(next_lengths, cast(logical_not(next_finished), beam_state.lengths.dtype))
        next_finished = logical_or(next_finished, equal(token_indices, self.end_token_tensor))
        output = self.OutputWrapper(topk_scores, token_indices, beam_indices)
        return output, self.StateWrapper(next_cell_states, next_log_probs, next_finished, next_lengths)

    def step(self, time, inputs, states, **kwargs):
        """One step: the cell on the merged beams, ``output_fn``, then the beam search step.
        Returns (OutputWrapper(scores, predicted_ids, parent_ids), StateWrapper, next inputs,
        finished), each [batch, beam, ...]."""
        inputs = map_structure(self._merge_batch_beams, inputs)
        cell_states = map_structure(self._merge_batch_beams, states.cell_states)
        cell_outputs, next_cell_states = self.cell(inputs, cell_states, **kwargs)
        cell_outputs = map_structure(self._split_batch_beams, cell_outputs)
        next_cell_states = map_structure(self._split_batch_beams, next_cell_states)
        if self.output_fn is not None:
            cell_outputs = self.output_fn(cell_outputs)
        output, state = self._beam_search_step(time, cell_outputs, next_cell_states, states)
        sample_ids = output.predicted_ids
        sample_ids.stop_gradient = True
        next_inputs = self.embedding_fn(sample_ids) if self.embedding_fn else sample_ids
        return output, state, next_inputs, state.finished

    def finalize(self, outputs, final_states, sequence_lengths):
        """``gather_tree`` of the stacked ids along their parents: the predicted ids
        [time, batch, beam]; the final states are returned as they are.

        The stacked outputs have ``max_step_num + 1`` steps; the steps after the loop stopped
        (every beam had ended) are unwritten. Fluid's loop would have produced ``end_token`` from
        each beam there, its parent itself; they are filled so, before the backtrace, so the ids
        are Fluid's followed by ``end_token``. The number of steps run is the longest beam's
        length (a beam unfinished at the last step has run every step)."""
        ids, parents = outputs.predicted_ids, outputs.parent_ids
        steps_run = reduce_max(sequence_lengths)
        step = cumsum(fill_constant_batch_size_like(ids, [-1], "int64", 1), axis=0, exclusive=True)   # [time]
        written = cast(less_than(step, steps_run), "int64")                                           # [time]
        unwritten = scale(written, -1.0, 1.0)
        ids = elementwise_add(elementwise_mul(ids, written, axis=0), scale(unwritten, float(self.end_token)),
                              axis=0)
        own_beam = elementwise_mul(elementwise_mul(ones_like(parents), unwritten, axis=0),
                                   _constant(np.arange(self.beam_size), "int64"))
        parents = elementwise_add(elementwise_mul(parents, written, axis=0), own_beam)
        return _gather_tree(ids, parents), final_states

    @property
    def tracks_own_finished(self) -> bool:
        """True: beams are reordered every step, so their finished flags are the decoder's."""
        return True


# -- BasicDecoder and its helpers ---------------------------------------------------------------------
class DecodeHelper:
    """How :class:`BasicDecoder` picks each step's ids and next inputs (Fluid's
    ``layers.DecodeHelper``): ``initialize() -> (initial_inputs, initial_finished)``,
    ``sample(time, outputs, states) -> sample_ids``, ``next_inputs(time, outputs, states,
    sample_ids) -> (finished, next_inputs, next_states)``."""

    def initialize(self):
        """The first inputs and finished flags [batch]."""
        raise NotImplementedError

    def sample(self, time, outputs, states):
        """The ids chosen from this step's outputs."""
        raise NotImplementedError

    def next_inputs(self, time, outputs, states, sample_ids):
        """(finished, next inputs, next states)."""
        raise NotImplementedError


class TrainingHelper(DecodeHelper):
    """Teacher forcing (Fluid's ``layers.TrainingHelper``): step t's input is ``inputs`` at time
    t; an entry is finished once t + 1 reaches its ``sequence_length``; ``sample`` is the argmax
    of the outputs. ``inputs`` is [batch, time, ...] ([time, batch, ...] with ``time_major``).
    The time index is data inside the loop, so the slice is a ``gather`` along time (Fluid:
    ``slice`` with tensor bounds) of the inputs padded by one step (as Fluid pads them)."""

    def __init__(self, inputs, sequence_length, time_major: bool = False) -> None:
        self.inputs = inputs
        self.sequence_length = sequence_length
        self.time_major = bool(time_major)
        time_axis = 0 if self.time_major else 1

        def padded(x):
            paddings = [0, 0] * x.ndim
            paddings[2 * time_axis + 1] = 1
            return pad(x, paddings)

        self.inputs_ = map_structure(padded, self.inputs)

    def _at(self, x, time):
        axis = 0 if self.time_major else 1
        return squeeze(gather(x, time, axis=axis), [axis])

    def initialize(self):
        """Time 0's inputs; entries of length 0 are finished from the start."""
        init_finished = equal(self.sequence_length, fill_constant([1], self.sequence_length.dtype, 0))
        zero = fill_constant([1], "int32", 0)
        return map_structure(lambda x: self._at(x, zero), self.inputs), init_finished

    def sample(self, time, outputs, states):
        """The argmax of the outputs (mostly unused: the next inputs are the given ones)."""
        return argmax(outputs, axis=-1)

    def next_inputs(self, time, outputs, states, sample_ids):
        """Time t + 1's inputs, finished = length <= t + 1, the states unchanged."""
        time = cast(time, "int32") if time.dtype != "int32" else time
        lengths = cast(self.sequence_length, "int32") if self.sequence_length.dtype != "int32" else \
            self.sequence_length
        next_time = scale(time, 1.0, 1.0)
        finished = less_equal(lengths, next_time)
        return finished, map_structure(lambda x: self._at(x, next_time), self.inputs_), states


class GreedyEmbeddingHelper(DecodeHelper):
    """Greedy decoding (Fluid's ``layers.GreedyEmbeddingHelper``): the argmax of each step's
    outputs is the next input, through ``embedding_fn``; an entry is finished when it picks
    ``end_token``. ``start_tokens`` is an int64 Variable [batch]."""

    def __init__(self, embedding_fn, start_tokens, end_token: int) -> None:
        self.embedding_fn = embedding_fn
        self.start_tokens = start_tokens
        self.end_token = fill_constant([1], "int64", int(end_token))

    def initialize(self):
        """``embedding_fn(start_tokens)``, nothing finished."""
        init_finished = fill_constant_batch_size_like(self.start_tokens, [-1], "bool", False)
        return self.embedding_fn(self.start_tokens), init_finished

    def sample(self, time, outputs, states):
        """The argmax of the outputs."""
        return argmax(outputs, axis=-1)

    def next_inputs(self, time, outputs, states, sample_ids):
        """The embedded ids, finished where they are ``end_token``, the states unchanged."""
        return equal(sample_ids, self.end_token), self.embedding_fn(sample_ids), states


class SampleEmbeddingHelper(GreedyEmbeddingHelper):
    """Sampling decoding (Fluid's ``layers.SampleEmbeddingHelper``): like
    :class:`GreedyEmbeddingHelper`, but each step's id is drawn from softmax(outputs /
    ``softmax_temperature``) (``sampling_id``) instead of taken by argmax. ``softmax_temperature``
    (> 0, default 1) sharpens (< 1) or flattens (> 1) the distribution; ``seed`` fixes the draws
    (as in Fluid, a fixed seed draws the same uniform numbers at every step); without it they come
    from the program's random seed."""

    def __init__(self, embedding_fn, start_tokens, end_token: int, softmax_temperature=None, seed=None) -> None:
        super().__init__(embedding_fn, start_tokens, end_token)
        if softmax_temperature is not None and not float(softmax_temperature) > 0:
            raise ValueError(f"SampleEmbeddingHelper: softmax_temperature must be > 0, got {softmax_temperature}")
        self.softmax_temperature = (fill_constant([1], "float32", float(softmax_temperature))
                                    if softmax_temperature is not None else None)
        self.seed = seed

    def sample(self, time, outputs, states):
        """Ids drawn from softmax(outputs / softmax_temperature), int64 [batch]."""
        from .creation_layers import sampling_id
        from .math_layers import elementwise_div

        logits = outputs
        if self.softmax_temperature is not None:
            temperature = self.softmax_temperature
            if temperature.dtype != outputs.dtype:
                temperature = cast(temperature, outputs.dtype)
            logits = elementwise_div(outputs, temperature)
        probs = softmax(logits)
        probs.stop_gradient = True
        ids = sampling_id(probs, seed=int(self.seed or 0))
        return ids if self.start_tokens.dtype in (None, "int64") else cast(ids, self.start_tokens.dtype)


class BasicDecoder(Decoder):
    """A cell driven by a :class:`DecodeHelper` (Fluid's ``layers.BasicDecoder``): each step
    runs the cell, ``output_fn``, then the helper's ``sample`` and ``next_inputs``; its outputs
    are ``OutputWrapper(cell_outputs, sample_ids)``."""

    OutputWrapper = collections.namedtuple("OutputWrapper", ("cell_outputs", "sample_ids"))

    def __init__(self, cell, helper: DecodeHelper, output_fn=None) -> None:
        self.cell = cell
        self.helper = helper
        self.output_fn = output_fn

    def initialize(self, initial_cell_states):
        """The helper's first inputs and finished flags, with the given cell states."""
        initial_inputs, initial_finished = self.helper.initialize()
        return initial_inputs, initial_cell_states, initial_finished

    def step(self, time, inputs, states, **kwargs):
        """One step: (OutputWrapper, next states, next inputs, finished)."""
        cell_outputs, cell_states = self.cell(inputs, states, **kwargs)
        if self.output_fn is not None:
            cell_outputs = self.output_fn(cell_outputs)
        sample_ids = self.helper.sample(time, cell_outputs, cell_states)
        sample_ids.stop_gradient = True
        finished, next_inputs, next_states = self.helper.next_inputs(time, cell_outputs, cell_states, sample_ids)
        return self.OutputWrapper(cell_outputs, sample_ids), next_states, next_inputs, finished


# -- dynamic_decode ---------------------------------------------------------------------------------
def _keep_finished(state: Variable, new_state: Variable, finished: Variable) -> Variable:
    """``state`` where ``finished``, else ``new_state`` (Fluid's impute_finished copy)."""
    as_bool = state.dtype == "bool"
    if as_bool:
        state, new_state = cast(state, "float32"), cast(new_state, "float32")
    mask = cast(finished, state.dtype)
    mask.stop_gradient = True
    out = elementwise_add(elementwise_mul(state, mask, axis=0), elementwise_mul(new_state, scale(mask, -1.0, 1.0),
                                                                                 axis=0))
    return cast(out, "bool") if as_bool else out


class _Collected:
    """One output of the decoding loop, stacked over time: a [max_step_num + 1, batch, ...] tensor
    made before the loop and carried through it, step t's value scattered into row t (a
    differentiable, static-shape form of Fluid's tensor array + ``tensor_array_to_tensor``:
    gradients reach the steps, as a ``BasicDecoder`` trained with a ``TrainingHelper`` needs).
    Outputs whose shape past the batch dim is unknown use Fluid's array (no gradient)."""

    def __init__(self, x: Variable, step: Variable, batch_ref: Variable, steps: int) -> None:
        self._steps = steps
        if x.ndim >= 1 and all(d >= 0 for d in x.shape[1:]):
            if x.shape[0] >= 0:
                shape = [steps] + list(x.shape)
                acc = _in_parent_block(lambda: fill_constant(shape, x.dtype, 0))
            else:
                acc = _in_parent_block(lambda: fill_constant_batch_size_like(
                    batch_ref, [steps, -1] + list(x.shape[1:]), x.dtype, 0, input_dim_idx=0, output_dim_idx=1))
            acc.stop_gradient = False
            self._acc, self._array = acc, None
            assign(scatter(acc, step, unsqueeze(x, [0]), overwrite=True), acc)
        else:
            self._acc = None
            self._array = _in_parent_block(lambda: create_array(x.dtype))
            array_write(x, step, self._array)

    def finish(self) -> Variable:
        """The stacked steps [max_step_num + 1, batch, ...] (after the loop)."""
        if self._acc is not None:
            return self._acc
        # An array's buffer may have more room than the loop's bound: keep the bound's steps.
        return slice(_stack_array(self._array), axes=[0], starts=[0], ends=[self._steps])


def _collect(x: Variable, step: Variable, batch_ref: Variable, steps: int) -> _Collected:
    return _Collected(x, step, batch_ref, steps)


def dynamic_decode(decoder, inits=None, max_step_num=None, output_time_major: bool = False,
                   impute_finished: bool = False, is_test: bool = False, return_length: bool = False, **kwargs):
    """Run ``decoder`` step by step until every entry is finished or ``max_step_num + 1`` steps
    have run (Fluid 1.8's ``layers.dynamic_decode``); returns ``(final_outputs, final_states)``,
    plus the sequence lengths with ``return_length``.

    ``inits`` goes to ``decoder.initialize``; ``**kwargs`` to every ``decoder.step``. Outputs
    are stacked over time ([batch, time, ...], or [time, batch, ...] with
    ``output_time_major``) and passed through ``decoder.finalize`` when it is implemented.
    ``impute_finished`` (for decoders that do not track their own finished entries) keeps the
    states of finished entries. ``max_step_num`` is required (see the module's docstring: the
    time dim is ``max_step_num + 1``); ``is_test`` is recorded on the ``while`` op.
    """
    if max_step_num is None:
        raise ValueError("dynamic_decode: max_step_num is required in fluidjax. A compiled step has fixed sizes, "
                         "and without a bound Fluid decodes until every sequence ends, which no static bound can "
                         "promise; give the longest output you accept (the loop runs at most max_step_num + 1 "
                         "steps, as in Fluid).")
    if isinstance(max_step_num, bool) or not isinstance(max_step_num, numbers.Integral) or max_step_num < 0:
        raise ValueError(f"dynamic_decode: max_step_num must be a non-negative int, got {max_step_num!r}")
    if not isinstance(decoder, Decoder) and not all(callable(getattr(decoder, m, None))
                                                    for m in ("initialize", "step")):
        raise TypeError(f"dynamic_decode: decoder must be a Decoder (initialize/step/finalize), got {decoder!r}")
    max_step_num = int(max_step_num)
    initial_inputs, initial_states, initial_finished = decoder.initialize(inits)
    # The loop updates its variables in place: copies, so that variables of the caller (a
    # BasicDecoder's initial states are ``inits`` themselves) keep their values, as in Fluid's
    # training form. A variable appearing twice (BeamSearchDecoder's finished flags) is copied once.
    copies: dict[int, Variable] = {}

    def copy(v: Variable) -> Variable:
        if id(v) not in copies:
            copies[id(v)] = assign(v)
        return copies[id(v)]

    initial_inputs, initial_states = map_structure(copy, initial_inputs), map_structure(copy, initial_states)
    initial_finished = copy(initial_finished)
    global_inputs, global_states, global_finished = initial_inputs, initial_states, initial_finished
    global_finished.stop_gradient = True
    step_idx = fill_constant([1], "int64", 0)
    cond = logical_not(_reduce_all(initial_finished))
    bound = fill_constant([1], "int64", max_step_num)
    sequence_lengths = cast(zeros_like(initial_finished), "int64")
    sequence_lengths.stop_gradient = True
    loop = While(cond, is_test=is_test, max_iterations=max_step_num + 1)
    inputs, states = initial_inputs, initial_states
    with loop.block():
        outputs, next_states, next_inputs, next_finished = decoder.step(step_idx, inputs, states, **kwargs)
        if not decoder.tracks_own_finished:
            next_finished = logical_or(next_finished, global_finished)
            next_sequence_lengths = elementwise_add(sequence_lengths,
                                                    cast(logical_not(global_finished), sequence_lengths.dtype))
            if impute_finished:
                next_states = map_structure(lambda old, new: _keep_finished(old, new, global_finished),
                                            states, next_states)
        else:
            next_sequence_lengths = getattr(next_states, "lengths", sequence_lengths)
        stacked = map_structure(lambda x: _collect(x, step_idx, initial_finished, max_step_num + 1), outputs)
        increment(step_idx, 1.0, in_place=True)
        # global_finished first: it may also be one of the states (BeamSearchDecoder's).
        assign(next_finished, global_finished)
        assign(next_sequence_lengths, sequence_lengths)
        map_structure(lambda new, old: assign(new, old), next_inputs, global_inputs)
        map_structure(lambda new, old: assign(new, old), next_states, global_states)
        logical_and(logical_not(_reduce_all(global_finished)), less_equal(step_idx, bound), out=cond)
    final_outputs = map_structure(lambda collected: collected.finish(), stacked)
    final_states = global_states
    try:
        final_outputs, final_states = decoder.finalize(final_outputs, final_states, sequence_lengths)
    except NotImplementedError:
        pass
    if not output_time_major:
        final_outputs = map_structure(lambda x: transpose(x, [1, 0] + list(range(2, x.ndim))), final_outputs)
    return (final_outputs, final_states, sequence_lengths) if return_length else (final_outputs, final_states)
