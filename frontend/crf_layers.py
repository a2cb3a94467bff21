"""Sequence labelling layers with Fluid 1.x's names and arguments: a linear-chain CRF cost, its
Viterbi decoding, chunk evaluation and edit distance.

>>> emission = fc(hidden, size=n_tags)                                 # doctest: +SKIP
>>> cost = linear_chain_crf(emission, label, param_attr=ParamAttr(name="crfw"))
>>> path = crf_decoding(emission, param_attr=ParamAttr(name="crfw"))  # shares the transitions
"""

from __future__ import annotations

from typing import Sequence

from ..ir import dtypes, registry
from ..ir.errors import ShapeError
from ..ir.variable import Parameter, Variable
from .layer_helper import LayerHelper
from .param_attr import ParamAttr

__all__ = ["linear_chain_crf", "crf_decoding", "chunk_eval", "edit_distance"]


def _tag_count(input: Variable, length: Variable | None, layer: str) -> int:
    rank = 3 if length is not None else 2
    if len(input.shape) != rank:
        form = "[batch, max_len, tags] with length" if length is not None else "[rows, tags] (a LoD tensor)"
        raise ShapeError(f"{layer}: input {input.name!r} must be {form}, got shape {input.shape}")
    tags = int(input.shape[-1])
    if tags <= 0:
        raise ShapeError(f"{layer}: the number of tags (last dim of {input.name!r}) must be known, got {input.shape}")
    return tags


def linear_chain_crf(input: Variable, label: Variable, param_attr=None, length: Variable | None = None) -> Variable:
    """The linear-chain CRF cost of each sequence: its *negative* log-likelihood, [sequences, 1].

    ``input`` holds unscaled emission scores, [rows, tags] with one LoD level (or, with
    ``length``, a padded [batch, max_len, tags]); ``label`` the int64 tag of every row. Creates the
    transition parameter [tags + 2, tags] (start weights, end weights, then tag-to-tag weights);
    name it with ``param_attr`` to decode with :func:`crf_decoding`.

    >>> cost = linear_chain_crf(emission, target, param_attr=ParamAttr(name="crfw"))  # doctest: +SKIP
    >>> avg_cost = mean(cost)                                                          # doctest: +SKIP
    """
    tags = _tag_count(input, length, "linear_chain_crf")
    helper = LayerHelper("linear_chain_crf")
    dtype = dtypes.normalize(input.dtype)
    transition = helper.create_parameter(ParamAttr.to_attr(param_attr) or ParamAttr(), (tags + 2, tags), dtype)
    alpha = helper.create_tmp(dtype)
    emission_exps = helper.create_tmp(dtype)
    transition_exps = helper.create_tmp(dtype)
    log_likelihood = helper.create_tmp(dtype)
    inputs = {"Emission": input, "Transition": transition, "Label": label}
    if length is not None:
        inputs["Length"] = length
    helper.append_op("linear_chain_crf", inputs=inputs,
                     outputs={"Alpha": alpha, "EmissionExps": emission_exps, "TransitionExps": transition_exps,
                              "LogLikelihood": log_likelihood})
    return log_likelihood


def _shared_parameter(helper: LayerHelper, param_attr) -> Parameter:
    attr = ParamAttr.to_attr(param_attr)
    if attr is None or not attr.name:
        raise ValueError("crf_decoding: param_attr must name the transition parameter that linear_chain_crf "
                         "created (e.g. ParamAttr(name='crfw') given to both)")
    block = helper.main_program.global_block()
    param = block.var(attr.name) if block.has_var(attr.name) else None
    if not isinstance(param, Parameter):
        raise ValueError(f"crf_decoding: no parameter named {attr.name!r} in the main program; create it first "
                         f"with linear_chain_crf(..., param_attr=ParamAttr(name={attr.name!r}))")
    return param


def crf_decoding(input: Variable, param_attr, label: Variable | None = None,
                 length: Variable | None = None) -> Variable:
    """The Viterbi path of each sequence, using the transitions of the ``linear_chain_crf`` whose
    parameter ``param_attr`` names.

    Returns int64 tags, [rows, 1] with ``input``'s LoD (or [batch, max_len] with ``length``). Given
    ``label``, it returns 1 where the best tag equals the label and 0 elsewhere, as in Fluid.
    """
    _tag_count(input, length, "crf_decoding")
    helper = LayerHelper("crf_decoding")
    transition = _shared_parameter(helper, param_attr)
    path = helper.create_tmp("int64", stop_gradient=True)
    inputs = {"Emission": input, "Transition": transition}
    if label is not None:
        inputs["Label"] = label
    if length is not None:
        inputs["Length"] = length
    helper.append_op("crf_decoding", inputs=inputs, outputs={"ViterbiPath": path})
    return path


def chunk_eval(input: Variable, label: Variable, chunk_scheme: str, num_chunk_types: int,
               excluded_chunk_types: Sequence[int] | None = None, seq_length: Variable | None = None):
    """Chunk precision, recall and F1 of ``input`` (predicted tag ids) against ``label``.

    ``chunk_scheme`` is ``"IOB"``, ``"IOE"``, ``"IOBES"`` or ``"plain"``; a tag id encodes
    ``tag = id % tag_types`` and ``chunk type = id // tag_types``, and the type
    ``num_chunk_types`` means "outside any chunk". Returns, as Fluid does, ``(precision, recall,
    f1_score, num_infer_chunks, num_label_chunks, num_correct_chunks)``, each of shape [1].
    """
    helper = LayerHelper("chunk_eval")
    floats = [helper.create_tmp("float32", stop_gradient=True) for _ in range(3)]
    counts = [helper.create_tmp("int64", stop_gradient=True) for _ in range(3)]
    inputs = {"Inference": input, "Label": label}
    if seq_length is not None:
        inputs["SeqLength"] = seq_length
    names = ("Precision", "Recall", "F1-Score", "NumInferChunks", "NumLabelChunks", "NumCorrectChunks")
    helper.append_op("chunk_eval", inputs=inputs, outputs=dict(zip(names, floats + counts)),
                     attrs={"num_chunk_types": int(num_chunk_types), "chunk_scheme": str(chunk_scheme),
                            "excluded_chunk_types": [int(t) for t in excluded_chunk_types or ()]})
    return tuple(floats + counts)


def edit_distance(input: Variable, label: Variable, normalized: bool = True,
                  ignored_tokens: Sequence[int] | None = None, input_length: Variable | None = None,
                  label_length: Variable | None = None):
    """The Levenshtein distance between each hypothesis in ``input`` and its reference in
    ``label`` (int64 LoD sequences, or padded with ``input_length``/``label_length``), divided by
    the reference's length when ``normalized``. Tokens in ``ignored_tokens`` are erased from both
    first (``sequence_erase``, LoD inputs only). Returns ``(distance [sequences, 1], sequence_num
    [1])``.
    """
    helper = LayerHelper("edit_distance")
    if ignored_tokens:
        if not registry.has("sequence_erase"):
            raise NotImplementedError("edit_distance: ignored_tokens needs the sequence_erase op, which this "
                                      "fluidjax build does not register; erase the tokens before feeding")
        if input_length is not None or label_length is not None:
            raise NotImplementedError("edit_distance: ignored_tokens works on LoD inputs (sequence_erase), "
                                      "not on padded ones with input_length/label_length (as in Fluid)")
        tokens = [int(t) for t in ignored_tokens]
        erased = []
        for seq in (input, label):
            out = helper.create_tmp(seq.dtype, stop_gradient=True)
            helper.append_op("sequence_erase", inputs={"X": seq}, outputs={"Out": out}, attrs={"tokens": tokens})
            erased.append(out)
        input, label = erased
    inputs = {"Hyps": input, "Refs": label}
    if (input_length is None) != (label_length is None):
        raise ValueError("edit_distance: give both input_length and label_length (padded inputs) or neither")
    if input_length is not None:
        inputs["HypsLength"], inputs["RefsLength"] = input_length, label_length
    distance = helper.create_tmp("float32", stop_gradient=True)
    sequence_num = helper.create_tmp("int64", stop_gradient=True)
    helper.append_op("edit_distance", inputs=inputs, outputs={"Out": distance, "SequenceNum": sequence_num},
                     attrs={"normalized": bool(normalized)})
    return distance, sequence_num
