"""Neural-network layer functions: convolution, pooling, normalization, dropout, embeddings, losses,
metrics, resizing.

Names, parameters and defaults follow Paddle's ``fluid.layers`` (activations are ``activation=``);
the ops they emit are Paddle 2.6's (``lookup_table_v2``, ``bilinear_interp_v2``, …), so a
program built here runs in Paddle and the other way round.

>>> img = data("img", shape=[3, 32, 32])                              # (-1, 3, 32, 32)
>>> h = conv2d(img, num_filters=8, filter_size=3, padding=1, activation="relu")
>>> h = pool2d(h, pool_size=2, pool_stride=2)                         # (-1, 8, 16, 16)
>>> h = batch_norm(h)                                                 # moving stats in the startup program
"""

from __future__ import annotations

from typing import Callable, Sequence

from ..ir import dtypes
from ..ir.errors import ShapeError
from ..ir.variable import Variable
from .initializer import Constant, Normal
from .layer_helper import LayerHelper
from .data_layers import as_index_input
from .math_layers import fluid1_one_element
from .layer_args import activate, shape_arguments
from .param_attr import ParamAttr

__all__ = [
    "fc", "cross_entropy", "square_error_cost",
    "conv2d", "conv2d_transpose", "pool2d", "adaptive_pool2d",
    "batch_norm", "layer_norm", "group_norm", "instance_norm", "dropout",
    "embedding", "matmul", "log_softmax", "prelu", "cos_sim",
    "softmax_with_cross_entropy", "huber_loss", "sigmoid_cross_entropy_with_logits", "accuracy",
    "resize_bilinear", "resize_nearest",
]

Activation = str | Callable | None


def fc(input: Variable | Sequence[Variable], output_size: int, num_flatten_dims: int = 1, param_attr=None,
       bias_attr=None, activation: str | Callable | None = None, name: str | None = None) -> Variable:
    """A fully connected layer: ``activation(input · W + b)``, emitted as ``mul``, ``elementwise_add``
    and the activation op. ``W`` is ``[prod(input.shape[num_flatten_dims:]), output_size]``. The
    arguments come in Fluid 1.8's order (``fc(input, size, num_flatten_dims, param_attr,
    bias_attr, act, name)``); ``size=`` / ``act=`` are the same keywords as ``output_size=`` /
    ``activation=``.

    ``input`` may be a list of Variables (Fluid 1.x): each gets its own weight (``fc_0.w_0``,
    ``fc_0.w_1``, … — ``param_attr`` may be a list with one attr per input), the products are
    added by a ``sum`` op, and one bias follows.

    >>> fc([fc_last, lstm_last], output_size=2, activation="softmax")   # doctest: +SKIP
    """
    if not isinstance(output_size, int) or output_size <= 0:
        raise ValueError(f"fc: output_size must be a positive int, got {output_size!r}")
    inputs = list(input) if isinstance(input, (list, tuple)) else [input]
    if not inputs:
        raise ValueError("fc: input is an empty list")
    attrs = list(param_attr) if isinstance(param_attr, (list, tuple)) else [param_attr] * len(inputs)
    if len(attrs) != len(inputs):
        raise ValueError(f"fc: {len(attrs)} param_attr for {len(inputs)} inputs")
    helper = LayerHelper("fc", name)
    dtype = inputs[0].dtype
    products = []
    for x, attr in zip(inputs, attrs):
        in_features = 1
        for d in x.shape[num_flatten_dims:]:
            if d < 0:
                raise ShapeError(f"fc: the dims of {x.name!r} {x.shape} after num_flatten_dims="
                                 f"{num_flatten_dims} must be known to size the weight")
            in_features *= d
        w = helper.create_parameter(ParamAttr.to_attr(attr), (in_features, output_size), dtype)
        tmp = helper.create_tmp(dtype)
        helper.append_op("mul", {"X": x, "Y": w}, {"Out": tmp},
                         {"x_num_col_dims": num_flatten_dims, "y_num_col_dims": 1})
        products.append(tmp)
    tmp = products[0]
    if len(products) > 1:
        tmp = helper.create_tmp(dtype)
        helper.append_op("sum", {"X": products}, {"Out": tmp}, {})
    battr = ParamAttr.to_attr(bias_attr)
    if battr is not None:
        b = helper.create_parameter(battr, (output_size,), dtype, is_bias=True)
        pre = helper.create_tmp(dtype)
        helper.append_op("elementwise_add", {"X": tmp, "Y": b}, {"Out": pre}, {"axis": num_flatten_dims})
        tmp = pre
    return activate(tmp, activation, helper)


def cross_entropy(input: Variable, label: Variable, soft_label: bool | None = None,
                  ignore_index: int = -100) -> Variable:
    """Cross entropy of probabilities ``input`` (-1, C) against ``label``; result (-1, 1).

    ``soft_label=None`` decides from the label: an integer label of shape (-1, 1) holds class
    indices; a float label is a soft (or one-hot) distribution over the classes. A float label
    narrower than C is taken as a distribution over the first classes and zero-padded (a ``pad``
    op, visible in the program); with ``soft_label=True`` the widths must match exactly.
    """
    helper = LayerHelper("cross_entropy")
    if soft_label is False:
        label = as_index_input(label, "cross_entropy")
    if soft_label is None:
        soft_label = dtypes.is_float(label.dtype)
        classes, width = input.shape[-1], label.shape[-1]
        if soft_label and 0 < width < classes and label.ndim == input.ndim:
            padded = helper.create_tmp(label.dtype, stop_gradient=True)
            paddings = [0, 0] * (label.ndim - 1) + [0, classes - width]
            helper.append_op("pad", {"X": label}, {"Out": padded}, {"paddings": paddings, "pad_value": 0.0})
            label = padded
    out = helper.create_tmp(input.dtype)
    helper.append_op("cross_entropy", {"X": input, "Label": label}, {"Y": out},
                     {"soft_label": bool(soft_label), "ignore_index": ignore_index})
    return out


def square_error_cost(input: Variable, label: Variable) -> Variable:
    """(input - label)², element by element (Paddle emits ``elementwise_sub`` and ``square``)."""
    helper = LayerHelper("square_error_cost")
    diff = helper.simple_op("elementwise_sub", {"X": input, "Y": label}, {"axis": -1})
    return helper.simple_op("square", {"X": diff})


# -- argument helpers ---------------------------------------------------------------------------------
def _pair(value, what: str, layer: str) -> list[int]:
    """An int or a 2-sequence of ints as [height, width]."""
    if isinstance(value, int):
        return [value, value]
    values = [int(v) for v in value]
    if len(values) == 1:
        return values * 2
    if len(values) != 2:
        raise ValueError(f"{layer}: {what} needs an int or 2 ints (height, width), got {value!r}")
    return values


def _padding(padding, data_format: str, layer: str) -> tuple[list[int], str]:
    """Paddle's padding forms → (``paddings`` attribute, ``padding_algorithm``).

    An int, [h, w], [top, bottom, left, right], per-dim pairs in data_format order (batch and
    channel pairs must be 0), or "SAME"/"VALID".
    """
    if isinstance(padding, str):
        algo = padding.upper()
        if algo not in ("SAME", "VALID"):
            raise ValueError(f"{layer}: padding must be 'SAME', 'VALID', an int or a list, got {padding!r}")
        return [0, 0], algo
    if isinstance(padding, int):
        return [padding, padding], "EXPLICIT"
    padding = list(padding)
    if padding and isinstance(padding[0], (list, tuple)):
        if len(padding) != 4:
            raise ValueError(f"{layer}: per-dim paddings need 4 pairs (N, C, H, W in data_format order), got {padding}")
        spatial = padding[1:3] if data_format == "NHWC" else padding[2:4]
        others = [padding[0], padding[3] if data_format == "NHWC" else padding[1]]
        if any(list(p) != [0, 0] for p in others):
            raise ValueError(f"{layer}: the batch and channel dims cannot be padded, got {padding}")
        return [int(spatial[0][0]), int(spatial[0][1]), int(spatial[1][0]), int(spatial[1][1])], "EXPLICIT"
    if len(padding) in (1, 2):
        return _pair(padding, "padding", layer), "EXPLICIT"
    if len(padding) == 4:
        return [int(p) for p in padding], "EXPLICIT"
    raise ValueError(f"{layer}: padding needs an int, 2 or 4 ints, 4 pairs, or 'SAME'/'VALID'; got {padding!r}")


def _check_format(data_format: str, layer: str) -> bool:
    """True for channel-last data."""
    if data_format not in ("NCHW", "NHWC"):
        raise ValueError(f"{layer}: data_format must be 'NCHW' or 'NHWC', got {data_format!r}")
    return data_format == "NHWC"


def _image_channels(input: Variable, data_format: str, layer: str) -> int:
    channel_last = _check_format(data_format, layer)
    if input.ndim != 4:
        raise ShapeError(f"{layer}: input {input.name!r} must be 4-D ({data_format}), got shape {input.shape}")
    c = input.shape[3 if channel_last else 1]
    if c < 0:
        raise ShapeError(f"{layer}: the channel dim of {input.name!r} {input.shape} must be known to size the filter")
    return c


def _param_dtype(input: Variable) -> str:
    """Normalization parameters stay float32 for half-precision inputs (as in Paddle)."""
    return "float32" if input.dtype in ("float16", "bfloat16") else input.dtype


def _add_bias(helper: LayerHelper, x: Variable, bias_attr, size: int, axis: int) -> Variable:
    battr = ParamAttr.to_attr(bias_attr)
    if battr is None:
        return x
    b = helper.create_parameter(battr, (size,), x.dtype, is_bias=True)
    out = helper.create_tmp(x.dtype)
    helper.append_op("elementwise_add", {"X": x, "Y": b}, {"Out": out}, {"axis": axis})
    return out


# -- convolution ----------------------------------------------------------------------------------------
def _check_groups(input: Variable, channels: int, groups, num_filters: int, op: str) -> int:
    """``groups`` as an int (None is 1), once it divides the input channels and ``num_filters``."""
    groups = 1 if groups is None else int(groups)
    if groups <= 0 or channels % groups:
        raise ShapeError(f"op {op!r}: input {input.name!r} has {channels} channels, which groups={groups} does "
                         f"not divide (input shape {input.shape})")
    if num_filters % groups:
        raise ValueError(f"{op}: num_filters={num_filters} must be a multiple of groups={groups}")
    return groups


def conv2d(input: Variable, num_filters: int, filter_size, stride=1, padding=0, dilation=1, groups=None,
           param_attr=None, bias_attr=None, use_cudnn: bool = True, activation: Activation = None,
           name: str | None = None, data_format: str = "NCHW") -> Variable:
    """2-D convolution: ``activation(conv(input, W) + b)``.

    ``W`` is [num_filters, channels / groups, fh, fw], initialised Normal(0, sqrt(2 / (fh·fw·channels)))
    unless ``param_attr`` says otherwise; ``b`` is [num_filters] (``bias_attr=False``: none).
    ``padding`` is an int, [h, w], [top, bottom, left, right] or "SAME"/"VALID". With ``groups``
    equal to the channels and ``use_cudnn=False`` the op is ``depthwise_conv2d`` (as in Paddle).

    >>> conv2d(img, num_filters=16, filter_size=3, stride=2, padding=1)   # (-1, 3, 32, 32) -> (-1, 16, 16, 16)
    """
    helper = LayerHelper("conv2d", name)
    c = _image_channels(input, data_format, "conv2d")
    groups = _check_groups(input, c, groups, num_filters, "conv2d")
    fh, fw = _pair(filter_size, "filter_size", "conv2d")
    paddings, algorithm = _padding(padding, data_format, "conv2d")
    std = (2.0 / (fh * fw * c)) ** 0.5
    w = helper.create_parameter(ParamAttr.to_attr(param_attr), (num_filters, c // groups, fh, fw), input.dtype,
                                default_initializer=Normal(0.0, std))
    op_type = "depthwise_conv2d" if groups == c and num_filters % c == 0 and not use_cudnn else "conv2d"
    out = helper.create_tmp(input.dtype)
    helper.append_op(op_type, {"Input": input, "Filter": w}, {"Output": out}, {
        "strides": _pair(stride, "stride", "conv2d"), "paddings": paddings, "padding_algorithm": algorithm,
        "dilations": _pair(dilation, "dilation", "conv2d"), "groups": groups, "data_format": data_format})
    out = _add_bias(helper, out, bias_attr, num_filters, 3 if data_format == "NHWC" else 1)
    return activate(out, activation, helper)


def _filter_from_output(input: Variable, out_sizes, strides, paddings, dilations, channel_last: bool,
                        layer: str) -> list[int]:
    """A transposed convolution's filter size derived from ``output_size`` (Paddle's rule), in as
    many spatial dims as ``out_sizes`` has; ``paddings`` one per dim or before/after pairs."""
    if out_sizes is None:
        raise ValueError(f"{layer}: give filter_size or output_size")
    n = len(out_sizes)
    in_sizes = input.shape[1:1 + n] if channel_last else input.shape[2:2 + n]
    if any(d < 0 for d in in_sizes):
        raise ShapeError(f"{layer}: deriving filter_size from output_size needs known spatial dims, got {input.shape}")
    pads = paddings if len(paddings) == 2 * n else [p for p in paddings for _ in range(2)]
    return [(out_sizes[i] - (in_sizes[i] - 1) * strides[i] + pads[2 * i] + pads[2 * i + 1] - 1) // dilations[i] + 1
            for i in range(n)]


def conv2d_transpose(input: Variable, num_filters: int, output_size=None, filter_size=None, padding=0, stride=1,
                     dilation=1, groups=None, param_attr=None, bias_attr=None, use_cudnn: bool = True,
                     activation: Activation = None, name: str | None = None, data_format: str = "NCHW") -> Variable:
    """Transposed 2-D convolution (the gradient of conv2d), for upsampling.

    ``W`` is [channels, num_filters / groups, fh, fw]. Give ``filter_size``, or ``output_size``
    (then the filter size is derived from it as in Paddle); with both, ``output_size`` picks among
    the sizes the strides allow.

    >>> conv2d_transpose(h, num_filters=3, filter_size=4, stride=2, padding=1)   # doubles H and W
    """
    return _conv_transpose("conv2d_transpose", input, num_filters, output_size, filter_size, padding, stride,
                           dilation, groups, param_attr, bias_attr, activation, name, data_format,
                           _pair, _padding, _image_channels, "NHWC")


def _conv_transpose(kind: str, input: Variable, num_filters: int, output_size, filter_size, padding, stride, dilation,
                    groups, param_attr, bias_attr, activation, name, data_format: str, sizes, paddings_of, channels_of,
                    channels_last: str) -> Variable:
    """conv2d_transpose and conv3d_transpose (``kind``): ``sizes`` reads a per-dimension argument
    (``_pair``, ``_triple``), ``paddings_of`` the padding, ``channels_of`` the channel count;
    ``channels_last`` is the layout whose channels come last."""
    helper = LayerHelper(kind, name)
    c = channels_of(input, data_format, kind)
    groups = _check_groups(input, c, groups, num_filters, kind)
    strides = sizes(stride, "stride", kind)
    dilations = sizes(dilation, "dilation", kind)
    paddings, algorithm = paddings_of(padding, data_format, kind)
    out_size = None if output_size is None else sizes(output_size, "output_size", kind)
    if filter_size is None:
        filter_size = _filter_from_output(input, out_size, strides, paddings, dilations,
                                          data_format == channels_last, kind)
    kernel = tuple(sizes(filter_size, "filter_size", kind))
    w = helper.create_parameter(ParamAttr.to_attr(param_attr), (c, num_filters // groups) + kernel, input.dtype)
    out = helper.create_tmp(input.dtype)
    helper.append_op(kind, {"Input": input, "Filter": w}, {"Output": out}, {
        "strides": strides, "paddings": paddings, "padding_algorithm": algorithm, "dilations": dilations,
        "groups": groups, "data_format": data_format, "output_size": out_size or []})
    out = _add_bias(helper, out, bias_attr, num_filters, input.ndim - 1 if data_format == channels_last else 1)
    return activate(out, activation, helper)


# -- pooling ------------------------------------------------------------------------------------------------
def pool2d(input: Variable, pool_size=-1, pool_type: str = "max", pool_stride=1, pool_padding=0,
           global_pooling: bool = False, use_cudnn: bool = True, ceil_mode: bool = False, name: str | None = None,
           exclusive: bool = True, data_format: str = "NCHW") -> Variable:
    """Max or average pooling over ``pool_size`` windows (``global_pooling``: each whole map).

    ``pool_padding`` takes the same forms as conv2d's ``padding``; ``exclusive`` averages count only
    real (unpadded) elements; ``ceil_mode`` rounds the output size up.

    >>> pool2d(h, pool_size=2, pool_stride=2, pool_type="avg")   # (-1, 8, 32, 32) -> (-1, 8, 16, 16)
    """
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool2d: pool_type must be 'max' or 'avg', got {pool_type!r}")
    _check_format(data_format, "pool2d")
    if global_pooling:
        ksize = _pair(1 if pool_size == -1 else pool_size, "pool_size", "pool2d")
    else:
        if pool_size == -1:
            raise ValueError("pool2d: give pool_size (or global_pooling=True)")
        ksize = _pair(pool_size, "pool_size", "pool2d")
    paddings, algorithm = _padding(pool_padding, data_format, "pool2d")
    helper = LayerHelper("pool2d", name)
    return helper.simple_op("pool2d", {"X": input}, {
        "pooling_type": pool_type, "ksize": ksize, "global_pooling": bool(global_pooling),
        "strides": _pair(pool_stride, "pool_stride", "pool2d"), "paddings": paddings,
        "padding_algorithm": algorithm, "use_cudnn": bool(use_cudnn), "ceil_mode": bool(ceil_mode),
        "exclusive": bool(exclusive), "adaptive": False, "data_format": data_format})


def adaptive_pool2d(input: Variable, pool_size, pool_type: str = "max", require_index: bool = False,
                    name: str | None = None) -> Variable:
    """Pooling to a fixed output size ``pool_size`` (NCHW): bin i covers input rows
    [floor(i·H/out), ceil((i+1)·H/out)), columns alike.

    >>> adaptive_pool2d(h, pool_size=[1, 1], pool_type="avg")   # (-1, C, 1, 1)
    """
    if pool_type not in ("max", "avg"):
        raise ValueError(f"adaptive_pool2d: pool_type must be 'max' or 'avg', got {pool_type!r}")
    if require_index:
        raise NotImplementedError("adaptive_pool2d: require_index=True (max_pool2d_with_index) is not supported")
    helper = LayerHelper("adaptive_pool2d", name)
    return helper.simple_op("pool2d", {"X": input}, {
        "pooling_type": pool_type, "ksize": _pair(pool_size, "pool_size", "adaptive_pool2d"), "adaptive": True})


# -- normalization ----------------------------------------------------------------------------------------
def _scale_and_bias(helper: LayerHelper, inputs: dict, param_attr, bias_attr, shape, dtype) -> dict:
    """Add a normalization layer's ``Scale`` (Constant 1) and ``Bias`` (Constant 0) parameters to
    ``inputs``; a ``False`` attr leaves that one out."""
    pattr, battr = ParamAttr.to_attr(param_attr), ParamAttr.to_attr(bias_attr)
    if pattr is not None:
        inputs["Scale"] = helper.create_parameter(pattr, shape, dtype, default_initializer=Constant(1.0))
    if battr is not None:
        inputs["Bias"] = helper.create_parameter(battr, shape, dtype, is_bias=True)
    return inputs


def batch_norm(input: Variable, activation: Activation = None, is_test: bool = False, momentum: float = 0.9,
               epsilon: float = 1e-05, param_attr=None, bias_attr=None, data_layout: str = "NCHW",
               in_place: bool = False, name: str | None = None, moving_mean_name: str | None = None,
               moving_variance_name: str | None = None, do_model_average_for_mean_and_var: bool = True,
               use_global_stats: bool = False) -> Variable:
    """Batch normalization per channel, with moving statistics.

    Creates ``scale`` (Constant 1) and ``bias`` (Constant 0) parameters and the moving mean and
    variance: persistable, non-trainable variables initialised to 0 and 1 by the startup program.
    Training normalizes with the batch's statistics and updates the moving ones in place
    (``moving = momentum · moving + (1 - momentum) · batch``); ``is_test`` (set by
    ``program.clone(for_test=True)``) or ``use_global_stats`` normalizes with the moving ones.
    ``in_place`` and ``do_model_average_for_mean_and_var`` are accepted for compatibility.

    >>> y = batch_norm(conv, activation="relu", moving_mean_name="bn.mean")

    ``momentum`` may be a one-element Variable (Fluid 1.x: the op's ``MomentumTensor``).
    """
    y, helper = _batch_norm("batch_norm", input, is_test, momentum, epsilon, param_attr, bias_attr, data_layout,
                            name, moving_mean_name, moving_variance_name, use_global_stats)
    return activate(y, activation, helper)


def _batch_norm(kind: str, input: Variable, is_test, momentum, epsilon, param_attr, bias_attr, data_layout, name,
                moving_mean_name, moving_variance_name, use_global_stats):
    """The ``batch_norm`` op of ``batch_norm`` and ``inplace_abn`` (``kind``: the layer, which names
    the parameters and the errors): (its Y, the layer's helper)."""
    helper = LayerHelper(kind, name)
    if data_layout not in ("NCHW", "NHWC"):
        raise ValueError(f"{kind}: data_layout must be 'NCHW' or 'NHWC', got {data_layout!r}")
    if not 2 <= input.ndim <= 5:
        raise ShapeError(f"{kind}: input {input.name!r} must have rank 2 to 5, got {input.shape}")
    axis = input.ndim - 1 if data_layout == "NHWC" and input.ndim > 2 else 1
    c = input.shape[axis]
    if c < 0:
        raise ShapeError(f"{kind}: the channel dim of {input.name!r} {input.shape} must be known")
    dtype = _param_dtype(input)
    inputs = _scale_and_bias(helper, {"X": input}, param_attr, bias_attr, (c,), dtype)
    mean = helper.create_parameter(ParamAttr(name=moving_mean_name, initializer=Constant(0.0), trainable=False),
                                   (c,), dtype)
    variance = helper.create_parameter(
        ParamAttr(name=moving_variance_name, initializer=Constant(1.0), trainable=False), (c,), dtype)
    mean.stop_gradient = variance.stop_gradient = True
    inputs.update(Mean=mean, Variance=variance)
    attrs = {"momentum": 0.9, "epsilon": float(epsilon), "is_test": bool(is_test), "data_layout": data_layout,
             "use_global_stats": bool(use_global_stats), "trainable_statistics": False}
    if isinstance(momentum, Variable):
        inputs["MomentumTensor"] = momentum
    else:
        attrs["momentum"] = float(momentum)
    y = helper.create_tmp(input.dtype)
    saved_mean = helper.create_tmp(dtype, stop_gradient=True)
    saved_variance = helper.create_tmp(dtype, stop_gradient=True)
    reserve = helper.create_tmp(input.dtype, stop_gradient=True)
    helper.append_op("batch_norm", inputs, {
        "Y": y, "MeanOut": mean, "VarianceOut": variance, "SavedMean": saved_mean,
        "SavedVariance": saved_variance, "ReserveSpace": reserve}, attrs)
    return y, helper


def layer_norm(input: Variable, scale: bool = True, shift: bool = True, begin_norm_axis: int = 1,
               epsilon: float = 1e-05, param_attr=None, bias_attr=None, activation: Activation = None,
               name: str | None = None) -> Variable:
    """Normalize each example over the dims from ``begin_norm_axis`` on, then (``scale``/``shift``)
    multiply and add learned parameters of that size (Constant 1 and 0).

    >>> layer_norm(x, begin_norm_axis=2)   # x (-1, T, D): each (example, step) over D
    """
    helper = LayerHelper("layer_norm", name)
    if not 0 < begin_norm_axis < input.ndim:
        raise ShapeError(f"layer_norm: begin_norm_axis={begin_norm_axis} must lie in [1, {input.ndim}) for "
                         f"input {input.name!r} {input.shape}")
    norm_dims = input.shape[begin_norm_axis:]
    if any(d < 0 for d in norm_dims):
        raise ShapeError(f"layer_norm: the normalized dims {norm_dims} of {input.name!r} must be known")
    size = 1
    for d in norm_dims:
        size *= d
    dtype = _param_dtype(input)
    inputs = {"X": input}
    if scale:
        pattr = ParamAttr.to_attr(param_attr) or ParamAttr()
        inputs["Scale"] = helper.create_parameter(pattr, (size,), dtype, default_initializer=Constant(1.0))
    if shift:
        battr = ParamAttr.to_attr(bias_attr) or ParamAttr()
        inputs["Bias"] = helper.create_parameter(battr, (size,), dtype, is_bias=True)
    y = helper.create_tmp(input.dtype)
    mean = helper.create_tmp(dtype, stop_gradient=True)
    variance = helper.create_tmp(dtype, stop_gradient=True)
    helper.append_op("layer_norm", inputs, {"Y": y, "Mean": mean, "Variance": variance},
                     {"epsilon": float(epsilon), "begin_norm_axis": int(begin_norm_axis)})
    return activate(y, activation, helper)


def group_norm(input: Variable, groups: int, epsilon: float = 1e-05, param_attr=None, bias_attr=None,
               activation: Activation = None, data_layout: str = "NCHW", name: str | None = None) -> Variable:
    """Group normalization: each example over ``groups`` groups of channels (and all positions),
    then a per-channel scale (Constant 1) and shift (Constant 0); ``False`` attrs leave them out.

    >>> group_norm(h, groups=4)
    """
    helper = LayerHelper("group_norm", name)
    if data_layout not in ("NCHW", "NHWC"):
        raise ValueError(f"group_norm: data_layout must be 'NCHW' or 'NHWC', got {data_layout!r}")
    if input.ndim < 2:
        raise ShapeError(f"group_norm: input {input.name!r} must have rank >= 2, got {input.shape}")
    c = input.shape[-1 if data_layout == "NHWC" and input.ndim > 2 else 1]
    if c < 0:
        raise ShapeError(f"group_norm: the channel dim of {input.name!r} {input.shape} must be known")
    if groups <= 0 or c % groups:
        raise ShapeError(f"op 'group_norm': {c} channels of {input.name!r} {input.shape} do not split into "
                         f"groups={groups}")
    dtype = _param_dtype(input)
    inputs = _scale_and_bias(helper, {"X": input}, param_attr, bias_attr, (c,), dtype)
    y = helper.create_tmp(input.dtype)
    mean = helper.create_tmp(dtype, stop_gradient=True)
    variance = helper.create_tmp(dtype, stop_gradient=True)
    helper.append_op("group_norm", inputs, {"Y": y, "Mean": mean, "Variance": variance},
                     {"epsilon": float(epsilon), "groups": int(groups), "data_layout": data_layout})
    return activate(y, activation, helper)


def instance_norm(input: Variable, epsilon: float = 1e-05, param_attr=None, bias_attr=None,
                  name: str | None = None) -> Variable:
    """Instance normalization: each channel of each example over its positions, then a per-channel
    scale (Constant 1) and shift (Constant 0); ``False`` attrs leave them out.

    >>> instance_norm(img)
    """
    helper = LayerHelper("instance_norm", name)
    if input.ndim < 2 or input.shape[1] < 0:
        raise ShapeError(f"instance_norm: input {input.name!r} must be [N, C, ...] with C known, got {input.shape}")
    c = input.shape[1]
    dtype = _param_dtype(input)
    inputs = _scale_and_bias(helper, {"X": input}, param_attr, bias_attr, (c,), dtype)
    y = helper.create_tmp(input.dtype)
    saved_mean = helper.create_tmp(dtype, stop_gradient=True)
    saved_variance = helper.create_tmp(dtype, stop_gradient=True)
    helper.append_op("instance_norm", inputs, {"Y": y, "SavedMean": saved_mean, "SavedVariance": saved_variance},
                     {"epsilon": float(epsilon)})
    return y


def dropout(x: Variable, dropout_prob: float, is_test: bool = False, seed: int | None = None,
            name: str | None = None, dropout_implementation: str = "downgrade_in_infer") -> Variable:
    """Randomly zero elements with probability ``dropout_prob`` while training.

    ``downgrade_in_infer``: training keeps x·mask, inference (``is_test``, set by
    ``clone(for_test=True)``) scales by 1 - p. ``upscale_in_train``: training keeps x·mask / (1 - p),
    inference passes x through. ``seed`` fixes the mask; otherwise it follows the program's
    ``random_seed`` and changes from run to run. The backward pass reuses the forward's mask.

    >>> h = dropout(h, dropout_prob=0.5, dropout_implementation="upscale_in_train")
    """
    if not 0.0 <= float(dropout_prob) <= 1.0:
        raise ValueError(f"dropout: dropout_prob must be in [0, 1], got {dropout_prob}")
    if dropout_implementation not in ("downgrade_in_infer", "upscale_in_train"):
        raise ValueError("dropout: dropout_implementation must be 'downgrade_in_infer' or 'upscale_in_train', "
                         f"got {dropout_implementation!r}")
    helper = LayerHelper("dropout", name)
    out = helper.create_tmp(x.dtype)
    mask = helper.create_tmp("uint8", stop_gradient=True)
    attrs = {"dropout_prob": float(dropout_prob), "is_test": bool(is_test),
             "dropout_implementation": dropout_implementation}
    if seed is not None:
        attrs.update(fix_seed=True, seed=int(seed))
    helper.append_op("dropout", {"X": x}, {"Out": out, "Mask": mask}, attrs)
    return out


# -- embeddings, products, activations -------------------------------------------------------------------
def embedding(input: Variable, size: Sequence[int], is_sparse: bool = False, is_distributed: bool = False,
              padding_idx: int | None = None, param_attr=None, dtype="float32") -> Variable:
    """Look up rows of a [vocabulary, width] table (``size``) for the int64 ids in ``input``:
    the result has ``input``'s shape plus [width] (op ``lookup_table_v2``). Ids whose last
    dimension is 1 — Fluid 1.x's spelling, e.g. the words of a LoD sentence, ``[-1, 1]`` — give
    ``input``'s shape with that 1 replaced by [width] (op ``lookup_table``, as Fluid's
    ``layers.embedding`` wrote it), so a sequence of words becomes a sequence of rows. Rows for
    ``padding_idx`` (negative counts from the end) are zeros and get no gradient. The table's
    gradient is dense; ``is_sparse`` / ``is_distributed`` are accepted for compatibility.

    >>> emb = embedding(words, size=[10000, 64])   # words (-1, T) int64 -> (-1, T, 64)
    >>> emb = embedding(sentence, size=[10000, 64])   # sentence (-1, 1), lod_level 1 -> (-1, 64)
    """
    op_type = "lookup_table" if input.ndim >= 2 and input.shape[-1] == 1 else "lookup_table_v2"
    return lookup(input, size, padding_idx, param_attr, dtype, op_type)


def lookup(input: Variable, size: Sequence[int], padding_idx, param_attr, dtype, op_type: str) -> Variable:
    """The embedding layers' common part: the [vocabulary, width] table and the ``op_type`` lookup."""
    if len(size) != 2 or any(int(s) <= 0 for s in size):
        raise ValueError(f"embedding: size must be [vocabulary, width], got {size!r}")
    if dtypes.normalize(input.dtype) not in ("int64", "int32"):
        raise ShapeError(f"embedding: ids {input.name!r} must be int64 or int32, got {input.dtype}")
    helper = LayerHelper("embedding")
    vocab = int(size[0])
    if padding_idx is None:
        pad = -1
    else:
        pad = int(padding_idx) if padding_idx >= 0 else vocab + int(padding_idx)
        if not 0 <= pad < vocab:
            raise ValueError(f"embedding: padding_idx={padding_idx} is outside the vocabulary of {vocab}")
    w = helper.create_parameter(ParamAttr.to_attr(param_attr) or ParamAttr(), (vocab, int(size[1])),
                                dtypes.normalize(dtype))
    return helper.simple_op(op_type, {"Ids": input, "W": w}, {"padding_idx": pad}, dtype=w.dtype)


def matmul(x: Variable, y: Variable, transpose_x: bool = False, transpose_y: bool = False, alpha: float = 1.0,
           name: str | None = None) -> Variable:
    """alpha · op(x) · op(y) (op transposes the last two dims when asked); leading dims are batch
    dims, 1-D operands are vectors.

    >>> matmul(q, k, transpose_y=True, alpha=0.125)   # (-1, T, D) x (-1, T, D) -> (-1, T, T)
    """
    return LayerHelper("matmul", name).simple_op("matmul", {"X": x, "Y": y}, {
        "transpose_X": bool(transpose_x), "transpose_Y": bool(transpose_y), "alpha": float(alpha)})


def log_softmax(input: Variable, axis: int = -1, name: str | None = None) -> Variable:
    """log(softmax(input)) along ``axis``, computed stably."""
    return LayerHelper("log_softmax", name).simple_op("log_softmax", {"X": input}, {"axis": int(axis)})


def prelu(x: Variable, mode: str, param_attr=None, name: str | None = None, data_format: str = "NCHW") -> Variable:
    """x where x > 0, alpha·x elsewhere; alpha (Constant 0.25) is one value (``mode="all"``), one
    per channel (``"channel"``) or one per element of an example (``"element"``).

    >>> prelu(h, mode="channel")
    """
    if mode not in ("all", "channel", "element"):
        raise ValueError(f"prelu: mode must be 'all', 'channel' or 'element', got {mode!r}")
    helper = LayerHelper("prelu", name)
    if mode == "all":
        shape = (1,)
    elif mode == "channel":
        if x.ndim < 2:
            raise ShapeError(f"prelu: mode='channel' needs rank >= 2, got {x.shape}")
        last = data_format in ("NHWC", "NLC", "NDHWC")
        c = x.shape[-1] if last else x.shape[1]
        shape = tuple([1] * (x.ndim - 1) + [c]) if last else tuple([1, c] + [1] * (x.ndim - 2))
    else:
        shape = (1,) + tuple(x.shape[1:])
    if any(d < 0 for d in shape):
        raise ShapeError(f"prelu: the dims of {x.name!r} {x.shape} that size alpha must be known")
    alpha = helper.create_parameter(ParamAttr.to_attr(param_attr) or ParamAttr(), shape, x.dtype,
                                    default_initializer=Constant(0.25))
    return helper.simple_op("prelu", {"X": x, "Alpha": alpha}, {"mode": mode, "data_format": data_format})


def cos_sim(X: Variable, Y: Variable) -> Variable:
    """Cosine similarity of each row of X with the matching row of Y (or Y's only row): [N, 1]."""
    helper = LayerHelper("cos_sim")
    out = helper.create_tmp(X.dtype)
    x_norm = helper.create_tmp(X.dtype, stop_gradient=True)
    y_norm = helper.create_tmp(X.dtype, stop_gradient=True)
    helper.append_op("cos_sim", {"X": X, "Y": Y}, {"Out": out, "XNorm": x_norm, "YNorm": y_norm})
    return out


# -- losses and metrics -------------------------------------------------------------------------------------
def softmax_with_cross_entropy(logits: Variable, label: Variable, soft_label: bool = False, ignore_index: int = -100,
                               numeric_stable_mode: bool = True, return_softmax: bool = False, axis: int = -1):
    """Cross entropy of softmax(logits) against ``label``, fused and stable: the loss has
    ``logits``' shape with 1 on ``axis``. Hard labels are int64 indices (size 1 on ``axis``;
    ``ignore_index`` gives 0), soft labels distributions. ``return_softmax`` also returns the softmax.

    >>> loss = softmax_with_cross_entropy(logits, label)   # (-1, C), (-1, 1) int64 -> (-1, 1)
    """
    helper = LayerHelper("softmax_with_cross_entropy")
    if not soft_label:
        label = as_index_input(label, "softmax_with_cross_entropy")
    softmax = helper.create_tmp(logits.dtype)
    loss = helper.create_tmp(logits.dtype)
    helper.append_op("softmax_with_cross_entropy", {"Logits": logits, "Label": label},
                     {"Softmax": softmax, "Loss": loss},
                     {"soft_label": bool(soft_label), "ignore_index": int(ignore_index),
                      "numeric_stable_mode": bool(numeric_stable_mode), "axis": int(axis), "use_softmax": True})
    return (loss, softmax) if return_softmax else loss


def huber_loss(input: Variable, label: Variable, delta: float) -> Variable:
    """Huber loss of the residual r = label - input: r²/2 where |r| <= delta, else delta·(|r| - delta/2)."""
    helper = LayerHelper("huber_loss")
    out = helper.create_tmp(input.dtype)
    residual = helper.create_tmp(input.dtype, stop_gradient=True)
    helper.append_op("huber_loss", {"X": input, "Y": label}, {"Out": out, "Residual": residual},
                     {"delta": float(delta)})
    return out


def sigmoid_cross_entropy_with_logits(x: Variable, label: Variable, ignore_index: int = -100,
                                      name: str | None = None, normalize: bool = False) -> Variable:
    """Element-wise binary cross entropy of logits ``x`` against probabilities ``label``; elements
    labelled ``ignore_index`` give 0, ``normalize`` divides by the number of the others."""
    return LayerHelper("sigmoid_cross_entropy_with_logits", name).simple_op(
        "sigmoid_cross_entropy_with_logits", {"X": x, "Label": label},
        {"ignore_index": int(ignore_index), "normalize": bool(normalize)})


def accuracy(input: Variable, label: Variable, k: int = 1, correct: Variable | None = None,
             total: Variable | None = None) -> Variable:
    """Top-k accuracy of scores ``input`` [N, C] against int64 labels [N, 1], a float32 scalar
    (ops ``top_k`` and ``accuracy``). ``correct`` / ``total`` receive the int32 counts if given.

    >>> acc = accuracy(prediction, label, k=5)
    """
    helper = LayerHelper("accuracy")
    values = helper.create_tmp(input.dtype, stop_gradient=True)
    indices = helper.create_tmp("int64", stop_gradient=True)
    helper.append_op("top_k", {"X": input}, {"Out": values, "Indices": indices}, {"k": int(k)})
    acc = helper.create_tmp("float32", stop_gradient=True)
    correct = correct if correct is not None else helper.create_tmp("int32", stop_gradient=True)
    total = total if total is not None else helper.create_tmp("int32", stop_gradient=True)
    helper.append_op("accuracy", {"Out": values, "Indices": indices, "Label": label},
                     {"Accuracy": acc, "Correct": correct, "Total": total})
    return fluid1_one_element(acc, correct, total)


# -- resizing -------------------------------------------------------------------------------------------------
def _resize(op_type: str, layer: str, input: Variable, out_shape, scale, actual_shape, align_corners: bool,
            align_mode: int, data_format: str, name: str | None) -> Variable:
    """Fluid 1.x's ``image_resize`` argument rules: ``out_shape`` as ints (``out_h``/``out_w``), one
    int Variable (input ``OutSize``) or a list holding Variables (``SizeTensor``); ``scale`` as a
    number or a Variable (``Scale``); ``actual_shape`` (a Variable) is the run-time ``OutSize`` and
    wins over both. Sizes given as tensors must be known when the step is traced — computed from
    shapes and constants (``layers.shape(x)[2:4] * 2``, YOLOv3's upsample); the lowering reads them
    there (``lowering/ops/resize.py``)."""
    if data_format not in ("NCHW", "NHWC"):
        raise ValueError(f"{layer}: data_format must be 'NCHW' or 'NHWC', got {data_format!r}")
    if input.ndim != 4:
        raise ShapeError(f"{layer}: input {input.name!r} must be 4-D ({data_format}), got {input.shape}")
    if actual_shape is not None and not isinstance(actual_shape, Variable):
        raise TypeError(f"{layer}: actual_shape must be a Variable (an int32 tensor of [out_h, out_w]) or None, "
                        f"got {type(actual_shape).__name__}")
    helper = LayerHelper(layer, name)
    attrs = {"data_layout": data_format, "interp_method": op_type.split("_")[0], "align_corners": bool(align_corners),
             "align_mode": int(align_mode)}
    inputs = {"X": input}
    if out_shape is not None:
        if isinstance(out_shape, Variable) or any(isinstance(d, Variable) for d in out_shape):
            if not isinstance(out_shape, Variable) and len(out_shape) != 2:
                raise ValueError(f"{layer}: out_shape must hold 2 values [out_h, out_w], got {out_shape}")
            _, tensors = shape_arguments(out_shape, layer, helper, tensor_slot="OutSize", list_slot="SizeTensor")
            inputs.update(tensors)
        else:
            out_h, out_w = _pair(out_shape, "out_shape", layer)
            attrs.update(out_h=out_h, out_w=out_w)
    elif scale is not None:
        if isinstance(scale, Variable):
            inputs["Scale"] = scale
        else:
            if float(scale) <= 0:
                raise ValueError(f"{layer}: scale must be positive, got {scale}")
            attrs["scale"] = [float(scale), float(scale)]
    elif actual_shape is None:
        raise ValueError(f"{layer}: give out_shape or scale")
    if actual_shape is not None:
        actual_shape.stop_gradient = True
        _, tensors = shape_arguments(actual_shape, layer, helper, tensor_slot="OutSize", list_slot="SizeTensor")
        inputs.pop("SizeTensor", None)
        inputs.update(tensors)
    return helper.simple_op(op_type, inputs, attrs)


def resize_bilinear(input: Variable, out_shape=None, scale: float | None = None, name: str | None = None,
                    actual_shape=None, align_corners: bool = True, align_mode: int = 1,
                    data_format: str = "NCHW") -> Variable:
    """Bilinear resize of 4-D images to ``out_shape`` [h, w] or by ``scale`` (op ``bilinear_interp_v2``).

    ``align_corners`` maps corner pixels to corner pixels; otherwise ``align_mode`` 0 uses
    half-pixel centres and 1 maps output pixel i to input i·(in/out).

    >>> resize_bilinear(img, out_shape=[64, 64], align_corners=False, align_mode=0)
    """
    return _resize("bilinear_interp_v2", "resize_bilinear", input, out_shape, scale, actual_shape, align_corners,
                   align_mode, data_format, name)


def resize_nearest(input: Variable, out_shape=None, scale: float | None = None, name: str | None = None,
                   actual_shape=None, align_corners: bool = True, data_format: str = "NCHW") -> Variable:
    """Nearest-neighbour resize of 4-D images to ``out_shape`` [h, w] or by ``scale`` (op
    ``nearest_interp_v2``); ``align_corners`` rounds source positions instead of truncating them.

    >>> resize_nearest(img, scale=2.0)
    """
    return _resize("nearest_interp_v2", "resize_nearest", input, out_shape, scale, actual_shape, align_corners,
                   1, data_format, name)
