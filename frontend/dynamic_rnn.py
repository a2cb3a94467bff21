"""Fluid 1.x's ``DynamicRNN`` over LoD inputs, and the LoD-array layers it is built from:
``lod_rank_table``, ``max_sequence_len``, ``lod_tensor_to_array``, ``array_to_lod_tensor``,
``reorder_lod_tensor_by_rank``, ``shrink_memory``.

``DynamicRNN`` builds exactly the ops Fluid 1.x built (so Paddle runs its programs): a rank
table of the step input (sequences by length, longest first), the input split into one array
element per time step (``lod_tensor_to_array``), a ``while`` over ``max_sequence_len`` steps
whose memories live in arrays (read at step i, ``shrink_rnn_memory`` to the sequences still
running, written at i + 1), and ``array_to_lod_tensor`` of each output array after the loop.
How the shrinking rows are represented inside a compiled step: docs/control_flow.md.

>>> # drnn = layer.DynamicRNN()
>>> # with drnn.block():
>>> #     word = drnn.step_input(x)                  # x: a LoD tensor, one level
>>> #     prev = drnn.memory(shape=[16], value=0.0)
>>> #     hidden = layer.fc([word, prev], 16, act="tanh")
>>> #     drnn.update_memory(prev, hidden)
>>> #     drnn.output(hidden)
>>> # out = drnn()                                   # a LoD tensor like x
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

from ..ir import dtypes, unique_name
from ..ir.variable import Variable
from .control_flow_layers import While, array_read, array_write, increment
from .initializer import fill_constant_attrs
from .layer_helper import LayerHelper
from .tensor_layers import fill_constant

__all__ = ["lod_rank_table", "max_sequence_len", "lod_tensor_to_array", "array_to_lod_tensor",
           "reorder_lod_tensor_by_rank", "shrink_memory", "DynamicRNN", "beam_search", "beam_search_decode"]

LOD_RANK_TABLE = 12      # Paddle's VarType.LOD_RANK_TABLE


def _check_var(x, what: str, layer: str) -> None:
    if not isinstance(x, Variable):
        raise TypeError(f"{layer}: {what} must be a Variable, got {type(x).__name__}")


def _rank_table_var(block) -> Variable:
    return block.create_var(unique_name.generate("lod_rank_table"), (), "int64", 0, type=LOD_RANK_TABLE,
                            stop_gradient=True)


def lod_rank_table(x: Variable, level: int = 0) -> Variable:
    """The sequences of ``x``'s LoD level ``level`` sorted by length, longest first (a
    ``LOD_RANK_TABLE`` variable)."""
    _check_var(x, "x", "lod_rank_table")
    helper = LayerHelper("lod_rank_table")
    table = _rank_table_var(helper.block)
    helper.append_op("lod_rank_table", {"X": x}, {"Out": table}, {"level": int(level)})
    return table


def max_sequence_len(rank_table: Variable) -> Variable:
    """The longest sequence's length (int64, shape [1])."""
    helper = LayerHelper("max_seqence_len")
    out = helper.create_tmp("int64", stop_gradient=True)
    helper.append_op("max_sequence_len", {"RankTable": rank_table}, {"Out": out})
    return out


def _array_var(block, prefix: str, dtype) -> Variable:
    return block.create_var(unique_name.generate(prefix), (), dtypes.normalize(dtype), 0,
                            type=dtypes.LOD_TENSOR_ARRAY)


def lod_tensor_to_array(x: Variable, table: Variable) -> Variable:
    """``x`` split into time steps: element t holds row t of every sequence longer than t, in
    the rank table's order."""
    _check_var(x, "x", "lod_tensor_to_array")
    helper = LayerHelper("lod_tensor_to_array")
    array = _array_var(helper.block, "lod_tensor_to_array", x.dtype)
    helper.append_op("lod_tensor_to_array", {"X": x, "RankTable": table}, {"Out": array})
    return array


def array_to_lod_tensor(x: Variable, table: Variable) -> Variable:
    """The inverse of :func:`lod_tensor_to_array`: the steps merged back into sequences."""
    helper = LayerHelper("array_to_lod_tensor")
    out = helper.create_tmp(x.dtype)
    helper.append_op("array_to_lod_tensor", {"X": x, "RankTable": table}, {"Out": out})
    return out


def reorder_lod_tensor_by_rank(x: Variable, rank_table: Variable) -> Variable:
    """``x``'s sequences (or rows, for a plain ``x``) in the rank table's order."""
    _check_var(x, "x", "reorder_lod_tensor_by_rank")
    helper = LayerHelper("reorder_lod_tensor_by_rank")
    out = helper.create_tmp(x.dtype)
    helper.append_op("reorder_lod_tensor_by_rank", {"X": x, "RankTable": rank_table}, {"Out": out})
    return out


def shrink_memory(x: Variable, i: Variable, table: Variable) -> Variable:
    """``x``'s rows of the sequences still running at step ``i`` (``shrink_rnn_memory``)."""
    helper = LayerHelper("shrink_memory")
    out = helper.create_tmp(x.dtype)
    helper.append_op("shrink_rnn_memory", {"X": x, "I": i, "RankTable": table}, {"Out": out})
    return out


class DynamicRNN:
    """A recurrent net over the sequences of a LoD tensor, one step per time step (Fluid 1.x).

    Inside ``with drnn.block():`` — ``step_input(x)`` (the current step's rows of ``x``),
    ``static_input(x)`` (``x`` reordered like the sequences, shrunk to the running ones),
    ``memory(init=None, shape=None, value=0.0, need_reorder=False, dtype="float32")``,
    ``update_memory(ex_mem, new_mem)``, ``output(*vars)``; after it, ``drnn()`` returns the
    output(s) as LoD tensors with the step input's LoD.
    """

    BEFORE_RNN, IN_RNN, AFTER_RNN = 0, 1, 2

    def __init__(self, name: str | None = None) -> None:
        self.helper = LayerHelper("dynamic_rnn", name=name)
        self.status = DynamicRNN.BEFORE_RNN
        self.lod_rank_table = None
        self.max_seq_len = None
        self.step_idx = None
        self.zero_idx = None
        self.mem_dict: dict[str, Variable] = {}
        self.output_array: list[Variable] = []
        self.outputs: list[Variable] = []
        self.input_array: list[tuple[Variable, str]] = []
        self.mem_link: list[tuple[Variable, Variable]] = []
        self.cond = self.helper.block.create_var(unique_name.generate("dynamic_rnn.cond"), (1,), "bool", 0,
                                                 stop_gradient=True)
        self.while_op = While(self.cond)

    def _parent_block(self):
        block = self.helper.main_program.current_block()
        return block.parent

    def _assert_in_rnn_block(self, method: str) -> None:
        if self.status != DynamicRNN.IN_RNN:
            raise ValueError(f"DynamicRNN.{method} can only be called inside rnn.block()")

    def step_input(self, x: Variable, level: int = 0) -> Variable:
        """Mark the LoD tensor ``x`` as an input split into time steps; returns the current step."""
        self._assert_in_rnn_block("step_input")
        _check_var(x, "x", "DynamicRNN.step_input")
        if x.lod_level < 1:
            raise TypeError(f"DynamicRNN.step_input: x ({x.name}) must be a LoD tensor (lod_level >= 1)")
        parent = self._parent_block()
        if self.lod_rank_table is None:
            self.lod_rank_table = _rank_table_var(parent)
            parent.append_op("lod_rank_table", {"X": x}, {"Out": self.lod_rank_table}, {"level": int(level)})
            self.max_seq_len = parent.create_var(unique_name.generate("dynamic_rnn_max_seq_len"), (1,), "int64")
            parent.append_op("max_sequence_len", {"RankTable": self.lod_rank_table}, {"Out": self.max_seq_len})
            parent.append_op("less_than", {"X": self.step_idx, "Y": self.max_seq_len}, {"Out": self.cond},
                             {"force_cpu": True})
        input_array = _array_var(parent, "dynamic_rnn_input_array", x.dtype)
        self.input_array.append((input_array, x.dtype))
        parent.append_op("lod_tensor_to_array", {"X": x, "RankTable": self.lod_rank_table},
                         {"Out": input_array})
        return array_read(input_array, self.step_idx)

    def static_input(self, x: Variable) -> Variable:
        """Mark ``x`` as an input read whole at every step (reordered like the sequences)."""
        self._assert_in_rnn_block("static_input")
        _check_var(x, "x", "DynamicRNN.static_input")
        if self.lod_rank_table is None:
            raise RuntimeError("DynamicRNN.static_input() must be called after step_input()")
        parent = self._parent_block()
        reordered = parent.create_var(unique_name.generate("dynamic_rnn_static_input_reordered"), x.shape,
                                      x.dtype, x.lod_level)
        parent.append_op("reorder_lod_tensor_by_rank", {"X": x, "RankTable": self.lod_rank_table},
                         {"Out": reordered})
        return shrink_memory(reordered, self.step_idx, self.lod_rank_table)

    @contextlib.contextmanager
    def block(self) -> Iterator[None]:
        """The step's ops are built inside this ``with`` block (once)."""
        if self.status != DynamicRNN.BEFORE_RNN:
            raise ValueError("rnn.block() can only be invoked once")
        self.step_idx = fill_constant([1], "int64", 0)
        self.step_idx.stop_gradient = False
        self.status = DynamicRNN.IN_RNN
        with self.while_op.block():
            yield
            if self.lod_rank_table is None:
                raise ValueError("DynamicRNN needs a step_input() inside rnn.block()")
            increment(self.step_idx, 1.0, in_place=True)
            for new_mem, mem_array in self.mem_link:
                array_write(new_mem, self.step_idx, mem_array)
            self.helper.block.append_op("less_than", {"X": self.step_idx, "Y": self.max_seq_len},
                                        {"Out": self.cond}, {"force_cpu": True})
        self.status = DynamicRNN.AFTER_RNN
        for array in self.output_array:
            self.outputs.append(array_to_lod_tensor(array, self.lod_rank_table))

    def __call__(self, *args, **kwargs):
        """The output(s) after the block: one LoD tensor, or a list of them."""
        if self.status != DynamicRNN.AFTER_RNN:
            raise ValueError("the output of a DynamicRNN can only be read after its block")
        return self.outputs[0] if len(self.outputs) == 1 else self.outputs

    def _init_zero_idx(self) -> None:
        if self.zero_idx is None:
            parent = self._parent_block()
            self.zero_idx = parent.create_var(unique_name.generate("zero_idx"), (1,), "int64", stop_gradient=True)
            parent.append_op("fill_constant", {}, {"Out": self.zero_idx},
                             {**fill_constant_attrs([1], "int64", 0), "force_cpu": True})

    def memory(self, init: Variable | None = None, shape: Sequence[int] | None = None, value: float = 0.0,
               need_reorder: bool = False, dtype="float32") -> Variable:
        """A memory: ``init`` (reordered like the sequences when ``need_reorder``), or a
        ``shape`` (without the batch dimension) filled with ``value``."""
        self._assert_in_rnn_block("memory")
        self._init_zero_idx()
        parent = self._parent_block()
        if init is not None:
            _check_var(init, "init", "DynamicRNN.memory")
            init_tensor = init
            if need_reorder:
                if self.lod_rank_table is None:
                    raise ValueError("memory(init=..., need_reorder=True) needs step_input() first")
                init_tensor = parent.create_var(unique_name.generate("dynamic_rnn_mem_init_reordered"),
                                                init.shape, init.dtype, init.lod_level)
                parent.append_op("reorder_lod_tensor_by_rank", {"X": init, "RankTable": self.lod_rank_table},
                                 {"Out": init_tensor})
            mem_array = _array_var(parent, "dynamic_rnn_mem_array", init.dtype)
            parent.append_op("write_to_array", {"X": init_tensor, "I": self.zero_idx}, {"Out": mem_array})
            retv = shrink_memory(array_read(mem_array, self.step_idx), self.step_idx, self.lod_rank_table)
            self.mem_dict[retv.name] = mem_array
            return retv
        if not self.input_array:
            raise ValueError("step_input should be invoked before memory(shape=..., value=...)")
        if shape is None:
            raise ValueError("DynamicRNN.memory needs init or shape")
        array, in_dtype = self.input_array[0]
        in0 = parent.create_var(unique_name.generate("in0"), (), in_dtype)
        parent.append_op("read_from_array", {"X": array, "I": self.zero_idx}, {"Out": in0})
        init = parent.create_var(unique_name.generate("mem_init"), (-1,) + tuple(shape), dtypes.normalize(dtype))
        parent.append_op("fill_constant_batch_size_like", {"Input": in0}, {"Out": init},
                         fill_constant_attrs([-1] + list(shape), dtypes.normalize(dtype), value))
        return self.memory(init=init)

    def update_memory(self, ex_mem: Variable, new_mem: Variable) -> None:
        """The memory ``ex_mem`` takes ``new_mem``'s value at the next step."""
        self._assert_in_rnn_block("update_memory")
        _check_var(ex_mem, "ex_mem", "DynamicRNN.update_memory")
        _check_var(new_mem, "new_mem", "DynamicRNN.update_memory")
        mem_array = self.mem_dict.get(ex_mem.name)
        if mem_array is None:
            raise ValueError("Please invoke memory before update_memory")
        self.mem_link.append((new_mem, mem_array))

    def output(self, *outputs: Variable) -> None:
        """Mark step results as the RNN's outputs (merged back into sequences after the block)."""
        self._assert_in_rnn_block("output")
        parent = self._parent_block()
        for each in outputs:
            array = _array_var(parent, "_".join([self.helper.name, "output_array", each.name]), each.dtype)
            array_write(each, self.step_idx, array)
            self.output_array.append(array)


def beam_search(pre_ids: Variable, pre_scores: Variable, ids: Variable | None, scores: Variable, beam_size: int,
                end_id: int, level: int = 0, is_accumulated: bool = True, name: str | None = None,
                return_parent_idx: bool = False):
    """One step of LoD beam search (Paddle's ``beam_search`` op): per source sentence, the
    ``beam_size`` best candidates of its prefixes (``scores``' LoD level ``level`` groups them);
    finished prefixes (``pre_ids == end_id``) offer only ``end_id``. Returns ``(selected_ids,
    selected_scores)`` (and ``parent_idx``, the prefix row of each, when ``return_parent_idx``)."""
    _check_var(scores, "scores", "beam_search")
    helper = LayerHelper("beam_search", name=name)
    selected_ids = helper.create_tmp("int64", stop_gradient=True)
    selected_scores = helper.create_tmp(scores.dtype, stop_gradient=True)
    parent_idx = helper.create_tmp("int32", stop_gradient=True)
    inputs = {"pre_ids": pre_ids, "pre_scores": pre_scores, "scores": scores}
    if ids is not None:
        inputs["ids"] = ids
    helper.append_op("beam_search", inputs,
                     {"selected_ids": selected_ids, "selected_scores": selected_scores, "parent_idx": parent_idx},
                     {"level": int(level), "beam_size": int(beam_size), "end_id": int(end_id),
                      "is_accumulated": bool(is_accumulated)})
    if return_parent_idx:
        return selected_ids, selected_scores, parent_idx
    return selected_ids, selected_scores


def beam_search_decode(ids: Variable, scores: Variable, beam_size: int, end_id: int, name: str | None = None):
    """The sentences a beam search found, backtracked through ``ids`` / ``scores`` (arrays of each
    step's ``beam_search`` results): ``(sentence_ids, sentence_scores)``, LoD tensors whose two
    levels are sources → sentences → words, each source's sentences best first."""
    helper = LayerHelper("beam_search_decode", name=name)
    sentence_ids = helper.create_tmp("int64", stop_gradient=True)
    sentence_scores = helper.create_tmp(scores.dtype, stop_gradient=True)
    helper.append_op("beam_search_decode", {"Ids": ids, "Scores": scores},
                     {"SentenceIds": sentence_ids, "SentenceScores": sentence_scores},
                     {"beam_size": int(beam_size), "end_id": int(end_id)})
    return sentence_ids, sentence_scores
