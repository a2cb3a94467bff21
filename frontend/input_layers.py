"""Fluid 1.6+'s ``fluid.input`` layers, with Paddle 2's semantics: ``fluid.embedding``.

``fluid.layers.embedding`` (:func:`~.nn_layers.embedding`) drops a trailing id dim of 1 (op
``lookup_table``); ``fluid.embedding`` never does (op ``lookup_table_v2``): ids ``[-1, 1]`` give
``[-1, 1, width]``, ids ``[-1]`` give ``[-1, width]``, as in Fluid 1.8 and ``paddle.static.nn``.

>>> emb = embedding(words, size=[10000, 64])    # words (-1, 1) int64 -> (-1, 1, 64)
"""

from __future__ import annotations

from typing import Sequence

from ..ir.variable import Variable
from .layer_helper import atomic_layer
from .nn_layers import lookup

__all__ = ["embedding"]


@atomic_layer
def embedding(input: Variable, size: Sequence[int], is_sparse: bool = False, is_distributed: bool = False,
              padding_idx: int | None = None, param_attr=None, dtype="float32") -> Variable:
    """Look up rows of a [vocabulary, width] table for the int ids in ``input``: the result has
    ``input``'s shape plus [width] (op ``lookup_table_v2``), LoD kept. Rows for ``padding_idx``
    (negative counts from the end) are zeros and get no gradient; ``is_sparse`` /
    ``is_distributed`` are accepted for Fluid's signature (the gradient is dense)."""
    return lookup(input, size, padding_idx, param_attr, dtype, "lookup_table_v2")
