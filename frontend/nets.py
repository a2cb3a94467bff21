"""Composite networks with the names and arguments of Fluid 1.x's ``fluid.nets``.

Each helper only calls layer functions, so what it builds is ordinary ops in the program (they
print, serialize and run in Paddle like any other). Activations are spelled ``activation=``;
Fluid's ``act=`` is accepted too.

>>> import fluidjax as fj
>>> words = fj.layer.data("words", shape=[1], dtype="int64", lod_level=1)      # doctest: +SKIP
>>> emb = fj.layer.embedding(words, size=[5000, 32])                            # doctest: +SKIP
>>> feature = fj.nets.sequence_conv_pool(emb, num_filters=64, filter_size=3)    # doctest: +SKIP
"""

from __future__ import annotations

from typing import Sequence

from ..ir.errors import ShapeError
from ..ir.variable import Variable
from . import layers
from .layer_helper import atomic_layer

__all__ = ["simple_img_conv_pool", "img_conv_group", "sequence_conv_pool", "glu", "scaled_dot_product_attention"]


@atomic_layer
def simple_img_conv_pool(input: Variable, num_filters: int, filter_size, pool_size, pool_stride, pool_padding=0,
                         pool_type: str = "max", global_pooling: bool = False, conv_stride=1, conv_padding=0,
                         conv_dilation=1, conv_groups=1, param_attr=None, bias_attr=None,
                         activation=None, use_cudnn: bool = True) -> Variable:
    """``conv2d`` (with its activation) followed by ``pool2d``: LeNet's building block.

    >>> simple_img_conv_pool(img, num_filters=20, filter_size=5, pool_size=2, pool_stride=2,
    ...                      activation="relu")                                 # doctest: +SKIP
    """
    conv = layers.conv2d(input, num_filters=num_filters, filter_size=filter_size, stride=conv_stride,
                         padding=conv_padding, dilation=conv_dilation, groups=conv_groups, param_attr=param_attr,
                         bias_attr=bias_attr, use_cudnn=use_cudnn, activation=activation)
    return layers.pool2d(conv, pool_size=pool_size, pool_type=pool_type, pool_stride=pool_stride,
                         pool_padding=pool_padding, global_pooling=global_pooling, use_cudnn=use_cudnn)


def _per_conv(value, count: int, what: str) -> list:
    """Fluid's rule: one value for every conv, or a list with one per conv."""
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ValueError(f"img_conv_group: {what} has {len(value)} entries for {count} convolutions")
        return list(value)
    return [value] * count


@atomic_layer
def img_conv_group(input: Variable, conv_num_filter: Sequence[int], pool_size, conv_padding=1, conv_filter_size=3,
                   conv_act=None, param_attr=None, conv_with_batchnorm=False, conv_batchnorm_drop_rate=0.0,
                   pool_stride=1, pool_type: str = "max", use_cudnn: bool = True) -> Variable:
    """A VGG group: ``len(conv_num_filter)`` convolutions (each optionally followed by batch norm
    and dropout), then one ``pool2d``.

    ``conv_padding``, ``conv_filter_size``, ``param_attr``, ``conv_with_batchnorm`` and
    ``conv_batchnorm_drop_rate`` take one value for all convolutions or a list with one per
    convolution. With batch norm, the activation ``conv_act`` moves from the conv to the batch norm.

    >>> img_conv_group(img, conv_num_filter=[64, 64], pool_size=2, pool_stride=2,
    ...                conv_act="relu", conv_with_batchnorm=True)               # doctest: +SKIP
    """
    filters = list(conv_num_filter)
    if not filters:
        raise ValueError("img_conv_group: conv_num_filter must name at least one convolution")
    n = len(filters)
    paddings = _per_conv(conv_padding, n, "conv_padding")
    sizes = _per_conv(conv_filter_size, n, "conv_filter_size")
    attrs = _per_conv(param_attr, n, "param_attr")
    with_bn = _per_conv(conv_with_batchnorm, n, "conv_with_batchnorm")
    drop = _per_conv(conv_batchnorm_drop_rate, n, "conv_batchnorm_drop_rate")
    x = input
    for i in range(n):
        x = layers.conv2d(x, num_filters=filters[i], filter_size=sizes[i], padding=paddings[i],
                          param_attr=attrs[i], use_cudnn=use_cudnn, activation=None if with_bn[i] else conv_act)
        if with_bn[i]:
            x = layers.batch_norm(x, activation=conv_act)
            if abs(float(drop[i])) > 1e-5:
                x = layers.dropout(x, dropout_prob=float(drop[i]))
    return layers.pool2d(x, pool_size=pool_size, pool_type=pool_type, pool_stride=pool_stride, use_cudnn=use_cudnn)


@atomic_layer
def sequence_conv_pool(input: Variable, num_filters: int, filter_size: int, param_attr=None, activation="sigmoid",
                       pool_type: str = "max", bias_attr=None) -> Variable:
    """``sequence_conv`` over a window of ``filter_size`` rows (with its activation), then
    ``sequence_pool``: one row per sequence. The text CNN of the Fluid book's sentiment chapter.

    >>> sequence_conv_pool(emb, num_filters=128, filter_size=3, activation="tanh")   # doctest: +SKIP
    """
    if input.lod_level < 1:
        raise ShapeError(f"sequence_conv_pool: input must be a LoD tensor (lod_level >= 1), "
                         f"got {input.name!r} with lod_level {input.lod_level}")
    conv = layers.sequence_conv(input, num_filters=num_filters, filter_size=filter_size, param_attr=param_attr,
                                bias_attr=bias_attr, activation=activation)
    return layers.sequence_pool(conv, pool_type=pool_type)


@atomic_layer
def glu(input: Variable, dim: int = -1) -> Variable:
    """The gated linear unit: ``input`` split in two halves ``a, b`` along ``dim``, then
    ``a * sigmoid(b)``.

    >>> glu(x, dim=1)          # (-1, 6, 3) -> (-1, 3, 3)               # doctest: +SKIP
    """
    axis = dim if dim >= 0 else dim + input.ndim
    if not 0 <= axis < input.ndim:
        raise ShapeError(f"glu: dim {dim} is out of range for {input.name!r} of rank {input.ndim}")
    size = input.shape[axis]
    if size >= 0 and size % 2:
        raise ShapeError(f"glu: dimension {dim} of {input.name!r} must be even to split in two, got {size}")
    a, b = layers.split(input, 2, dim=axis)
    return layers.elementwise_mul(a, layers.sigmoid(b))


@atomic_layer
def scaled_dot_product_attention(queries: Variable, keys: Variable, values: Variable, num_heads: int = 1,
                                 dropout_rate: float = 0.0) -> Variable:
    """softmax(Q·Kᵀ / sqrt(d)) · V over 3-D inputs ``[batch, length, size]``.

    With ``num_heads > 1``, Q, K and V first go through their own linear projections (``fc``
    layers, as in Fluid), are split into heads of ``size / num_heads`` columns, attended per head
    and joined back. ``d`` is the key size per head. The result has
    ``values``' size.

    >>> scaled_dot_product_attention(q, k, v, num_heads=4)   # (-1, Tq, 64) -> (-1, Tq, 64)   # doctest: +SKIP
    """
    for name, var in (("queries", queries), ("keys", keys), ("values", values)):
        if var.ndim != 3:
            raise ShapeError(f"scaled_dot_product_attention: {name} must be 3-D [batch, length, size], "
                             f"got {var.name!r} with shape {var.shape}")
    if queries.shape[-1] != keys.shape[-1]:
        raise ShapeError(f"scaled_dot_product_attention: queries and keys must have the same size, "
                         f"got {queries.shape[-1]} and {keys.shape[-1]}")
    if keys.shape[1] >= 0 and values.shape[1] >= 0 and keys.shape[1] != values.shape[1]:
        raise ShapeError(f"scaled_dot_product_attention: keys and values must have the same length, "
                         f"got {keys.shape[1]} and {values.shape[1]}")
    for name, var in (("keys", keys), ("values", values)):
        if var.shape[-1] % num_heads:
            raise ShapeError(f"scaled_dot_product_attention: the size of {name} ({var.shape[-1]}) must divide "
                             f"by num_heads ({num_heads})")
    q, k, v = queries, keys, values
    if num_heads > 1:
        q = layers.fc(q, queries.shape[-1], num_flatten_dims=2)
        k = layers.fc(k, keys.shape[-1], num_flatten_dims=2)
        v = layers.fc(v, values.shape[-1], num_flatten_dims=2)

    def split_heads(x):
        if num_heads == 1:
            return x
        size = x.shape[-1]
        return layers.transpose(layers.reshape(x, [0, 0, num_heads, size // num_heads]), perm=[0, 2, 1, 3])

    q, k, v = split_heads(q), split_heads(k), split_heads(v)
    scale = (keys.shape[-1] // num_heads) ** -0.5
    product = layers.matmul(layers.scale(q, scale=scale), k, transpose_y=True)
    weights = layers.softmax(product)
    if dropout_rate:
        weights = layers.dropout(weights, dropout_prob=dropout_rate, is_test=False)
    context = layers.matmul(weights, v)
    if num_heads == 1:
        return context
    context = layers.transpose(context, perm=[0, 2, 1, 3])
    return layers.reshape(context, [0, 0, values.shape[-1]])
