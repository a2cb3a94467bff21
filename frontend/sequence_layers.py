"""Layers over LoD (variable-length) data, with Fluid 1.x's names and arguments."""

from __future__ import annotations

from ..ir.variable import Variable
from .layer_helper import LayerHelper

__all__ = ["sequence_pool", "sequence_first_step", "sequence_last_step", "sequence_softmax", "sequence_reverse",
           "sequence_expand_as", "sequence_concat"]


def sequence_pool(input: Variable, pool_type: str, is_test: bool = False, pad_value: float = 0.0) -> Variable:
    """Pool every sequence of ``input``'s last LoD level into one row.

    ``pool_type``: ``"sum"``, ``"average"``, ``"sqrt"`` (sum / sqrt(length)), ``"max"``,
    ``"last"`` or ``"first"``; an empty sequence gives a row of ``pad_value``. The result has one
    LoD level fewer: pooling words of ``lod_level=2`` paragraphs gives sentences (lod_level 1).

    >>> words = data("words", dims=32, lod_level=1)        # doctest: +SKIP
    >>> sentence = sequence_pool(words, "average")          # (-1, 32), one row per sequence
    """
    helper = LayerHelper("sequence_pool")
    out = helper.create_tmp(input.dtype)
    max_index = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op("sequence_pool", inputs={"X": input}, outputs={"Out": out, "MaxIndex": max_index},
                     attrs={"pooltype": pool_type.upper(), "is_test": is_test, "pad_value": float(pad_value)})
    return out


def sequence_first_step(input: Variable) -> Variable:
    """The first row of every sequence (``sequence_pool(input, "first")``)."""
    return sequence_pool(input, "first")


def sequence_last_step(input: Variable) -> Variable:
    """The last row of every sequence (``sequence_pool(input, "last")``)."""
    return sequence_pool(input, "last")


def sequence_softmax(input: Variable, use_cudnn: bool = False, name: str | None = None) -> Variable:
    """Softmax over the rows of each sequence of ``input`` ([N, 1] or [N]); keeps its LoD."""
    helper = LayerHelper("sequence_softmax", name)
    out = helper.create_tmp(input.dtype)
    helper.append_op("sequence_softmax", inputs={"X": input}, outputs={"Out": out}, attrs={"use_cudnn": use_cudnn})
    return out


def sequence_reverse(x: Variable, name: str | None = None) -> Variable:
    """The rows of each sequence of ``x`` (one LoD level) in reverse order; keeps its LoD."""
    helper = LayerHelper("sequence_reverse", name)
    out = helper.create_tmp(x.dtype)
    helper.append_op("sequence_reverse", inputs={"X": x}, outputs={"Y": out})
    return out


def sequence_expand_as(x: Variable, y: Variable, name: str | None = None) -> Variable:
    """Row i of ``x`` repeated as many times as sequence i of ``y`` is long; takes ``y``'s LoD."""
    helper = LayerHelper("sequence_expand_as", name)
    out = helper.create_tmp(x.dtype)
    helper.append_op("sequence_expand_as", inputs={"X": x, "Y": y}, outputs={"Out": out})
    return out


def sequence_concat(input: list, name: str | None = None) -> Variable:
    """Sequence i of the result is sequence i of every input, one after another."""
    helper = LayerHelper("sequence_concat", name)
    out = helper.create_tmp(input[0].dtype)
    helper.append_op("sequence_concat", inputs={"X": list(input)}, outputs={"Out": out})
    return out
