"""Layers over LoD (variable-length) data, with Fluid 1.x's names and arguments."""

from __future__ import annotations

from ..ir import dtypes
from ..ir.variable import Variable
from .layer_helper import LayerHelper
from .layer_args import activate
from .param_attr import ParamAttr

__all__ = ["sequence_pool", "sequence_first_step", "sequence_last_step", "sequence_softmax", "sequence_reverse",
           "sequence_expand_as", "sequence_concat", "sequence_conv", "sequence_expand", "sequence_pad",
           "sequence_unpad", "sequence_mask", "sequence_slice", "sequence_reshape", "sequence_enumerate",
           "lod_reset", "lod_append", "im2sequence", "row_conv", "add_position_encoding", "sequence_scatter"]


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


def sequence_conv(input: Variable, num_filters: int, filter_size: int = 3, filter_stride: int = 1,
                  padding: bool = True, padding_start: int | None = None, bias_attr=None, param_attr=None,
                  activation=None, name: str | None = None) -> Variable:
    """A 1-D convolution along every sequence of ``input`` ([rows, width], one LoD level).

    Row t sees rows ``t + padding_start ... t + padding_start + filter_size - 1`` of its own
    sequence (zeros past its ends; ``padding_start`` defaults to ``-(filter_size // 2)``, a
    centred window). ``W`` is [filter_size * width, num_filters]; then a bias [num_filters] and
    the activation (``act=`` as in Fluid, or ``activation=``). Keeps ``input``'s LoD.
    ``padding`` is accepted for Fluid's signature; padding rows are always zeros.

    >>> conv = sequence_conv(emb, num_filters=64, filter_size=3, act="tanh")   # doctest: +SKIP
    """
    if int(filter_stride) != 1:
        raise ValueError(f"sequence_conv: filter_stride must be 1 (Paddle's rule), got {filter_stride}")
    helper = LayerHelper("sequence_conv", name)
    width = input.shape[-1]
    w = helper.create_parameter(ParamAttr.to_attr(param_attr), (filter_size * width, num_filters), input.dtype)
    out = helper.create_tmp(input.dtype)
    start = -int(filter_size // 2) if padding_start is None else int(padding_start)
    helper.append_op("sequence_conv", {"X": input, "Filter": w}, {"Out": out},
                     {"contextStride": int(filter_stride), "contextStart": start,
                      "contextLength": int(filter_size), "paddingTrainable": False})
    battr = ParamAttr.to_attr(bias_attr)
    if battr is not None:
        b = helper.create_parameter(battr, (num_filters,), input.dtype, is_bias=True)
        biased = helper.create_tmp(input.dtype)
        helper.append_op("elementwise_add", {"X": out, "Y": b}, {"Out": biased}, {"axis": 1})
        out = biased
    return activate(out, activation, helper)


def sequence_expand(x: Variable, y: Variable, ref_level: int = -1, name: str | None = None) -> Variable:
    """Sequence i of ``x`` (row i of a plain ``x``) repeated as often as sequence i of ``y``'s
    ``ref_level`` (-1: its last level) has entries. A LoD ``x`` gives one sequence per copy.

    >>> sequence_expand(state, words)    # one copy of state row i per word of sentence i  # doctest: +SKIP
    """
    helper = LayerHelper("sequence_expand", name)
    out = helper.create_tmp(x.dtype)
    helper.append_op("sequence_expand", {"X": x, "Y": y}, {"Out": out}, {"ref_level": int(ref_level)})
    return out


def sequence_pad(x: Variable, pad_value: Variable, maxlen: int | None = None, name: str | None = None):
    """Sequences to a dense ``[count, maxlen, ...]`` tensor filled with ``pad_value`` (a Variable of
    shape [1] or of a row's shape); returns ``(out, length)``, length int64 [count].

    ``maxlen=None`` pads to the longest sequence; inside a compiled step that length is data, so
    fluidjax pads to the padded row count of ``x`` (rows past each length hold ``pad_value``).
    """
    helper = LayerHelper("sequence_pad", name)
    out = helper.create_tmp(x.dtype)
    length = helper.create_tmp("int64", stop_gradient=True)
    helper.append_op("sequence_pad", {"X": x, "PadValue": pad_value}, {"Out": out, "Length": length},
                     {"padded_length": -1 if maxlen is None else int(maxlen)})
    return out, length


def sequence_unpad(x: Variable, length: Variable, name: str | None = None) -> Variable:
    """The first ``length[i]`` steps of row i of ``x`` ([count, steps, ...]) as sequence i of a LoD tensor."""
    helper = LayerHelper("sequence_unpad", name)
    out = helper.create_tmp(x.dtype)
    helper.append_op("sequence_unpad", {"X": x, "Length": length}, {"Out": out})
    return out


def sequence_mask(x: Variable, maxlen=None, dtype: str = "int64", name: str | None = None) -> Variable:
    """``mask[..., j] = j < x[...]`` for ``j < maxlen``: x holds lengths (int), the mask has one more
    dim. ``maxlen`` is an int, a Variable (its value), or None (the largest length); inside a
    compiled step the width must be known when it is traced, so give an int there.
    """
    helper = LayerHelper("sequence_mask", name)
    out = helper.create_tmp(dtypes.normalize(dtype), stop_gradient=True)
    inputs = {"X": x}
    attrs = {"out_dtype": dtypes.to_enum(dtype), "maxlen": -1}
    if isinstance(maxlen, Variable):
        inputs["MaxLenTensor"] = maxlen
    elif maxlen is not None:
        attrs["maxlen"] = int(maxlen)
    helper.append_op("sequence_mask", inputs, {"Y": out}, attrs)
    return out


def sequence_slice(input: Variable, offset: Variable, length: Variable, name: str | None = None) -> Variable:
    """Sequence i of the result is rows ``[offset[i], offset[i] + length[i])`` of sequence i of
    ``input``; ``offset`` and ``length`` are int64 [count, 1]."""
    helper = LayerHelper("sequence_slice", name)
    out = helper.create_tmp(input.dtype)
    helper.append_op("sequence_slice", {"X": input, "Offset": offset, "Length": length}, {"Out": out})
    return out


def sequence_reshape(input: Variable, new_dim: int) -> Variable:
    """Every sequence's values re-cut into rows of ``new_dim`` values (its LoD scales to match)."""
    helper = LayerHelper("sequence_reshape")
    out = helper.create_tmp(input.dtype)
    helper.append_op("sequence_reshape", {"X": input}, {"Out": out}, {"new_dim": int(new_dim)})
    return out


def sequence_enumerate(input: Variable, win_size: int, pad_value: int = 0, name: str | None = None) -> Variable:
    """Row t: the ids ``input[t : t + win_size]`` of t's own sequence, ``pad_value`` past its end."""
    helper = LayerHelper("sequence_enumerate", name)
    out = helper.create_tmp(input.dtype, stop_gradient=True)
    helper.append_op("sequence_enumerate", {"X": input}, {"Out": out},
                     {"win_size": int(win_size), "pad_value": int(pad_value)})
    return out


def lod_reset(x: Variable, y: Variable | None = None, target_lod=None) -> Variable:
    """``x``'s rows with a new LoD: ``y``'s LoD (when ``y`` has one), ``y``'s int32 values as
    offsets, or ``target_lod`` (offsets, e.g. ``[0, 2, 5]``)."""
    helper = LayerHelper("lod_reset")
    out = helper.create_tmp(x.dtype)
    if y is not None:
        helper.append_op("lod_reset", {"X": x, "Y": y}, {"Out": out})
    elif target_lod is not None:
        helper.append_op("lod_reset", {"X": x}, {"Out": out}, {"target_lod": [int(v) for v in target_lod]})
    else:
        raise ValueError("lod_reset needs y or target_lod")
    return out


def lod_append(x: Variable, level) -> Variable:
    """``x`` with one more LoD level below its own: ``level`` (offsets) or a Variable's int32 values."""
    helper = LayerHelper("lod_append")
    out = helper.create_tmp(x.dtype)
    if isinstance(level, Variable):
        helper.append_op("lod_reset", {"X": x, "Y": level}, {"Out": out}, {"append": True})
    else:
        helper.append_op("lod_reset", {"X": x}, {"Out": out}, {"target_lod": [int(v) for v in level], "append": True})
    return out


def _pair(v, what: str) -> list[int]:
    v = [int(v), int(v)] if isinstance(v, int) else [int(e) for e in v]
    if len(v) != 2:
        raise ValueError(f"im2sequence: {what} must be an int or a pair, got {v}")
    return v


def im2sequence(input: Variable, filter_size=1, stride=1, padding=0, input_image_size=None, out_stride=1,
                name: str | None = None) -> Variable:
    """The ``filter_size`` patches of every image of ``input`` ([N, C, H, W]) as rows of
    C * fh * fw values, one sequence per image. ``padding``: an int, [h, w] or [up, left, down, right].
    ``input_image_size`` ([N, 2] Variable, for inference on padded images): each image's real
    height and width; only its patches inside that size divided by ``out_stride`` are kept."""
    if isinstance(padding, int):
        paddings = [padding] * 4
    else:
        paddings = [int(p) for p in padding]
        paddings = paddings * 2 if len(paddings) == 2 else paddings
    if len(paddings) != 4:
        raise ValueError(f"im2sequence: padding must be an int, a pair or 4 values, got {padding}")
    helper = LayerHelper("im2sequence", name)
    out = helper.create_tmp(input.dtype)
    inputs = {"X": input} if input_image_size is None else {"X": input, "Y": input_image_size}
    helper.append_op("im2sequence", inputs, {"Out": out},
                     {"kernels": _pair(filter_size, "filter_size"), "strides": _pair(stride, "stride"),
                      "paddings": paddings, "out_stride": _pair(out_stride, "out_stride")})
    return out


def row_conv(input: Variable, future_context_size: int, param_attr=None, activation=None) -> Variable:
    """Lookahead convolution: row t is ``sum_k input[t + k] * W[k]`` for ``k <= future_context_size``
    within t's sequence; ``W`` is [future_context_size + 1, width]. Keeps ``input``'s LoD."""
    helper = LayerHelper("row_conv")
    w = helper.create_parameter(ParamAttr.to_attr(param_attr), (future_context_size + 1, input.shape[-1]),
                                input.dtype)
    out = helper.create_tmp(input.dtype)
    helper.append_op("row_conv", {"X": input, "Filter": w}, {"Out": out})
    return activate(out, activation, helper)


def add_position_encoding(input: Variable, alpha: float, beta: float, name: str | None = None) -> Variable:
    """input * alpha + beta * the sinusoid position encoding (op ``add_position_encoding``): positions
    count within each sequence of a LoD [T, P] input, or along dim 1 of a dense [N, M, P] one."""
    return LayerHelper("add_position_encoding", name).simple_op(
        "add_position_encoding", {"X": input}, {"alpha": float(alpha), "beta": float(beta)})


def sequence_scatter(input: Variable, index: Variable, updates: Variable, name: str | None = None) -> Variable:
    """A copy of ``input`` [N, D] where, for the i-th sequence of the LoD ``index`` / ``updates``,
    row i gets ``updates`` added at the columns ``index``."""
    return LayerHelper("sequence_scatter", name).simple_op(
        "sequence_scatter", {"X": input, "Ids": index, "Updates": updates})
