"""Fluid 1.8's volumetric and image-sampling layers: ``conv3d``, ``conv3d_transpose``, ``pool3d``,
``adaptive_pool3d``, ``deformable_conv``, ``image_resize`` / ``interpolate`` / ``resize_trilinear``,
``roi_pool``, ``roi_align``, ``affine_grid``, ``grid_sampler``. Each appends the op Paddle 2.6 runs
for it (the op table checks those ops against Paddle's kernels), with Fluid 1.8's arguments and
defaults.

>>> vol = data("vol", shape=[2, 8, 16, 16])                       # (-1, 2, 8, 16, 16) NCDHW
>>> h = conv3d(vol, num_filters=4, filter_size=3, padding=1)      # (-1, 4, 8, 16, 16)
>>> h = pool3d(h, pool_size=2, pool_stride=2)                     # (-1, 4, 4, 8, 8)
"""

from __future__ import annotations

from ..ir.errors import ShapeError
from ..ir.variable import Variable
from .initializer import Normal
from .layer_helper import LayerHelper
from .layer_args import activate
from .nn_layers import _add_bias, _check_groups, _conv_transpose, _filter_from_output, _pair, _resize
from .param_attr import ParamAttr
from .tensor_layers import cast

__all__ = ["conv3d", "conv3d_transpose", "pool3d", "adaptive_pool3d", "deformable_conv", "image_resize",
           "interpolate", "resize_trilinear", "roi_pool", "roi_align", "affine_grid", "grid_sampler"]


def _triple(value, what: str, layer: str) -> list[int]:
    """An int or a 3-sequence of ints as [depth, height, width]."""
    values = [int(value)] * 3 if isinstance(value, int) else [int(v) for v in value]
    if len(values) == 1:
        values *= 3
    if len(values) != 3:
        raise ValueError(f"{layer}: {what} needs an int or 3 ints (depth, height, width), got {value!r}")
    return values


def _padding3d(padding, data_format: str, layer: str) -> tuple[list[int], str]:
    """Fluid's 3-D padding forms -> (``paddings`` attribute, ``padding_algorithm``): an int, 3 ints,
    6 ints (before/after per dim), 5 pairs in data_format order, or "SAME"/"VALID"."""
    if isinstance(padding, str):
        algo = padding.upper()
        if algo not in ("SAME", "VALID"):
            raise ValueError(f"{layer}: padding must be 'SAME', 'VALID', an int or a list, got {padding!r}")
        return [0, 0, 0], algo
    if isinstance(padding, int):
        return [padding] * 3, "EXPLICIT"
    padding = list(padding)
    if len(padding) == 5 and isinstance(padding[0], (list, tuple)):
        spatial = padding[1:4] if data_format == "NDHWC" else padding[2:5]
        others = [padding[0], padding[4] if data_format == "NDHWC" else padding[1]]
        if any(list(p) != [0, 0] for p in others):
            raise ValueError(f"{layer}: the batch and channel dims cannot be padded, got {padding}")
        padding = [int(v) for pair in spatial for v in pair]
    if len(padding) == 6:
        padding = [int(p) for p in padding]
        return (padding[::2] if padding[::2] == padding[1::2] else padding), "EXPLICIT"
    return _triple(padding, "padding", layer), "EXPLICIT"


def _volume_channels(input: Variable, data_format: str, layer: str) -> int:
    if data_format not in ("NCDHW", "NDHWC"):
        raise ValueError(f"{layer}: data_format must be 'NCDHW' or 'NDHWC', got {data_format!r}")
    if input.ndim != 5:
        raise ShapeError(f"{layer}: input {input.name!r} must be 5-D ({data_format}), got shape {input.shape}")
    c = input.shape[4 if data_format == "NDHWC" else 1]
    if c < 0:
        raise ShapeError(f"{layer}: the channel dim of {input.name!r} {input.shape} must be known to size the filter")
    return c


# -- 3-D convolution and pooling ----------------------------------------------------------------------------
def conv3d(input: Variable, num_filters: int, filter_size, stride=1, padding=0, dilation=1, groups=None,
           param_attr=None, bias_attr=None, use_cudnn: bool = True, activation=None, name: str | None = None,
           data_format: str = "NCDHW") -> Variable:
    """3-D convolution: ``activation(conv(input, W) + b)``, ``W`` [num_filters, C / groups, kd, kh, kw]
    initialised Normal(0, sqrt(2 / (kd·kh·kw·C))) unless ``param_attr`` says otherwise."""
    helper = LayerHelper("conv3d", name)
    c = _volume_channels(input, data_format, "conv3d")
    groups = _check_groups(input, c, groups, num_filters, "conv3d")
    kd, kh, kw = _triple(filter_size, "filter_size", "conv3d")
    paddings, algorithm = _padding3d(padding, data_format, "conv3d")
    w = helper.create_parameter(ParamAttr.to_attr(param_attr), (num_filters, c // groups, kd, kh, kw), input.dtype,
                                default_initializer=Normal(0.0, (2.0 / (kd * kh * kw * c)) ** 0.5))
    out = helper.create_tmp(input.dtype)
    helper.append_op("conv3d", {"Input": input, "Filter": w}, {"Output": out}, {
        "strides": _triple(stride, "stride", "conv3d"), "paddings": paddings, "padding_algorithm": algorithm,
        "dilations": _triple(dilation, "dilation", "conv3d"), "groups": groups, "data_format": data_format})
    out = _add_bias(helper, out, bias_attr, num_filters, 4 if data_format == "NDHWC" else 1)
    return activate(out, activation, helper)


def conv3d_transpose(input: Variable, num_filters: int, output_size=None, filter_size=None, padding=0, stride=1,
                     dilation=1, groups=None, param_attr=None, bias_attr=None, use_cudnn: bool = True,
                     activation=None, name: str | None = None, data_format: str = "NCDHW") -> Variable:
    """Transposed 3-D convolution, ``W`` [C, num_filters / groups, kd, kh, kw]. Give ``filter_size``,
    or ``output_size`` (the filter size is then derived from it, as Fluid does)."""
    return _conv_transpose("conv3d_transpose", input, num_filters, output_size, filter_size, padding, stride,
                           dilation, groups, param_attr, bias_attr, activation, name, data_format,
                           _triple, _padding3d, _volume_channels, "NDHWC")


def pool3d(input: Variable, pool_size=-1, pool_type: str = "max", pool_stride=1, pool_padding=0,
           global_pooling: bool = False, use_cudnn: bool = True, ceil_mode: bool = False, name: str | None = None,
           exclusive: bool = True, data_format: str = "NCDHW") -> Variable:
    """Max or average pooling over ``pool_size`` windows of a 5-D input (``global_pooling``: each
    whole volume); ``pool_padding`` takes conv3d's forms."""
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool3d: pool_type must be 'max' or 'avg', got {pool_type!r}")
    if data_format not in ("NCDHW", "NDHWC"):
        raise ValueError(f"pool3d: data_format must be 'NCDHW' or 'NDHWC', got {data_format!r}")
    if not global_pooling and pool_size == -1:
        raise ValueError("pool3d: give pool_size (or global_pooling=True)")
    ksize = _triple(1 if pool_size == -1 else pool_size, "pool_size", "pool3d")
    paddings, algorithm = _padding3d(pool_padding, data_format, "pool3d")
    if algorithm == "VALID" and ceil_mode:
        raise ValueError("pool3d: ceil_mode must be False when pool_padding is 'VALID'")
    return LayerHelper("pool3d", name).simple_op("pool3d", {"X": input}, {
        "pooling_type": pool_type, "ksize": ksize, "global_pooling": bool(global_pooling),
        "strides": _triple(pool_stride, "pool_stride", "pool3d"), "paddings": paddings,
        "padding_algorithm": algorithm, "use_cudnn": bool(use_cudnn), "ceil_mode": bool(ceil_mode),
        "exclusive": bool(exclusive), "adaptive": False, "data_format": data_format})


def adaptive_pool3d(input: Variable, pool_size, pool_type: str = "max", require_index: bool = False,
                    name: str | None = None) -> Variable:
    """Pooling of an NCDHW input to the fixed output size ``pool_size`` [d, h, w] (Paddle's bins:
    bin i covers [floor(i·D/out), ceil((i+1)·D/out)) per dim)."""
    if pool_type not in ("max", "avg"):
        raise ValueError(f"adaptive_pool3d: pool_type must be 'max' or 'avg', got {pool_type!r}")
    if require_index:
        raise NotImplementedError("adaptive_pool3d: require_index=True (max_pool3d_with_index) is not supported")
    return LayerHelper("adaptive_pool3d", name).simple_op("pool3d", {"X": input}, {
        "pooling_type": pool_type, "ksize": _triple(pool_size, "pool_size", "adaptive_pool3d"), "adaptive": True})


def deformable_conv(input: Variable, offset: Variable, mask: Variable | None, num_filters: int, filter_size,
                    stride=1, padding=0, dilation=1, groups=None, deformable_groups=None, im2col_step=None,
                    param_attr=None, bias_attr=None, modulated: bool = True, name: str | None = None) -> Variable:
    """Deformable convolution (NCHW): v2 with the modulation ``mask`` (op ``deformable_conv``), or
    v1 without it (``modulated=False``, op ``deformable_conv_v1``). ``offset`` is
    [N, 2·deformable_groups·kh·kw, Ho, Wo]; ``W`` [num_filters, C / groups, kh, kw] as conv2d."""
    helper = LayerHelper("deformable_conv", name)
    c = input.shape[1] if input.ndim == 4 else -1
    if c < 0:
        raise ShapeError(f"deformable_conv: input must be 4-D NCHW with a known channel dim, got {input.shape}")
    groups = _check_groups(input, c, groups, num_filters, "deformable_conv")
    fh, fw = _pair(filter_size, "filter_size", "deformable_conv")
    w = helper.create_parameter(ParamAttr.to_attr(param_attr), (num_filters, c // groups, fh, fw), input.dtype,
                                default_initializer=Normal(0.0, (2.0 / (fh * fw * c)) ** 0.5))
    inputs = {"Input": input, "Offset": offset, "Filter": w}
    if modulated:
        if mask is None:
            raise ValueError("deformable_conv: modulated=True needs mask (or pass modulated=False)")
        inputs["Mask"] = mask
    out = helper.create_tmp(input.dtype)
    helper.append_op("deformable_conv" if modulated else "deformable_conv_v1", inputs, {"Output": out}, {
        "strides": _pair(stride, "stride", "deformable_conv"), "paddings": _pair(padding, "padding", "deformable_conv"),
        "dilations": _pair(dilation, "dilation", "deformable_conv"), "groups": groups,
        "deformable_groups": int(deformable_groups or 1), "im2col_step": int(im2col_step or 64)})
    return _add_bias(helper, out, bias_attr, num_filters, 1)


# -- resizing -------------------------------------------------------------------------------------------------
def _resize3d(input: Variable, out_shape, scale, actual_shape, align_corners: bool, align_mode: int,
              data_format: str, name: str | None, layer: str) -> Variable:
    if actual_shape is not None:
        raise NotImplementedError(f"{layer}: actual_shape (a run-time size tensor) is not supported")
    if data_format not in ("NCDHW", "NDHWC"):
        raise ValueError(f"{layer}: data_format must be 'NCDHW' or 'NDHWC', got {data_format!r}")
    if input.ndim != 5:
        raise ShapeError(f"{layer}: trilinear resizing needs a 5-D input ({data_format}), got {input.shape}")
    attrs = {"data_layout": "NHWC" if data_format == "NDHWC" else "NCHW", "interp_method": "trilinear",
             "align_corners": bool(align_corners), "align_mode": int(align_mode)}
    if out_shape is not None:
        if isinstance(out_shape, Variable) or any(isinstance(d, Variable) for d in out_shape):
            raise NotImplementedError(f"{layer}: out_shape must be ints (size tensors are not supported)")
        attrs["out_d"], attrs["out_h"], attrs["out_w"] = _triple(out_shape, "out_shape", layer)
    elif scale is not None:
        if isinstance(scale, Variable):
            raise NotImplementedError(f"{layer}: scale must be a number (scale tensors are not supported)")
        if float(scale) <= 0:
            raise ValueError(f"{layer}: scale must be positive, got {scale}")
        attrs["scale"] = [float(scale)] * 3
    else:
        raise ValueError(f"{layer}: give out_shape or scale")
    return LayerHelper(layer, name).simple_op("trilinear_interp_v2", {"X": input}, attrs)


_RESAMPLE = {"BILINEAR": "bilinear_interp_v2", "NEAREST": "nearest_interp_v2", "TRILINEAR": "trilinear_interp_v2"}


def image_resize(input: Variable, out_shape=None, scale=None, name: str | None = None, resample: str = "BILINEAR",
                 actual_shape=None, align_corners: bool = True, align_mode: int = 1,
                 data_format: str = "NCHW") -> Variable:
    """Resize 4-D images (``resample`` 'BILINEAR' or 'NEAREST') or 5-D volumes ('TRILINEAR') to
    ``out_shape`` or by ``scale``; the ``*_interp_v2`` ops, as :func:`resize_bilinear`."""
    if resample not in _RESAMPLE:
        raise ValueError(f"image_resize: resample must be one of {list(_RESAMPLE)}, got {resample!r}")
    if not isinstance(align_corners, bool):
        raise TypeError("image_resize: align_corners must be a bool")
    if align_mode not in (0, 1):
        raise ValueError(f"image_resize: align_mode must be 0 or 1, got {align_mode!r}")
    if resample == "TRILINEAR":
        return _resize3d(input, out_shape, scale, actual_shape, align_corners, align_mode,
                         "NCDHW" if data_format == "NCHW" else data_format, name, "image_resize")
    return _resize(_RESAMPLE[resample], "image_resize", input, out_shape, scale, actual_shape, align_corners,
                   align_mode, data_format, name)


interpolate = image_resize


def resize_trilinear(input: Variable, out_shape=None, scale=None, name: str | None = None, actual_shape=None,
                     align_corners: bool = True, align_mode: int = 1, data_format: str = "NCDHW") -> Variable:
    """Trilinear resize of 5-D volumes to ``out_shape`` [d, h, w] or by ``scale`` (op
    ``trilinear_interp_v2``); ``align_corners``/``align_mode`` as :func:`resize_bilinear`."""
    return _resize3d(input, out_shape, scale, actual_shape, align_corners, align_mode, data_format, name,
                     "resize_trilinear")


# -- regions and sampling grids ------------------------------------------------------------------------------
def _rois_num(helper: LayerHelper, rois_lod: Variable | None) -> dict:
    """Fluid's ``rois_lod`` (offsets [0, n0, n0 + n1, ...]) as Paddle 2's RoisNum (int32 counts)."""
    if rois_lod is None:
        return {}
    ends = helper.simple_op("slice", {"Input": rois_lod}, {"axes": [0], "starts": [1], "ends": [2 ** 31 - 1]})
    starts = helper.simple_op("slice", {"Input": rois_lod}, {"axes": [0], "starts": [0], "ends": [-1]})
    counts = helper.simple_op("elementwise_sub", {"X": ends, "Y": starts}, {"axis": -1})
    return {"RoisNum": counts if counts.dtype == "int32" else cast(counts, "int32")}


def roi_pool(input: Variable, rois: Variable, pooled_height: int = 1, pooled_width: int = 1,
             spatial_scale: float = 1.0, rois_lod: Variable | None = None) -> Variable:
    """RoIPool: the max over each of pooled_height × pooled_width bins of every ROI [x1, y1, x2, y2]
    (× ``spatial_scale``). ``rois_lod`` (offsets) says which image each ROI belongs to; without it
    the batch must be one image."""
    helper = LayerHelper("roi_pool")
    out = helper.create_tmp(input.dtype)
    argmax = helper.create_tmp("int64", stop_gradient=True)
    helper.append_op("roi_pool", {"X": input, "ROIs": rois, **_rois_num(helper, rois_lod)},
                     {"Out": out, "Argmax": argmax},
                     {"pooled_height": int(pooled_height), "pooled_width": int(pooled_width),
                      "spatial_scale": float(spatial_scale)})
    return out


def roi_align(input: Variable, rois: Variable, pooled_height: int = 1, pooled_width: int = 1,
              spatial_scale: float = 1.0, sampling_ratio: int = -1, name: str | None = None,
              rois_lod: Variable | None = None) -> Variable:
    """RoIAlign (Fluid's unaligned form, ``aligned=False``): bilinear samples averaged over each bin
    of every ROI; ``sampling_ratio`` -1 picks ceil(roi size / pooled size) samples per bin."""
    helper = LayerHelper("roi_align", name)
    return helper.simple_op("roi_align", {"X": input, "ROIs": rois, **_rois_num(helper, rois_lod)},
                            {"pooled_height": int(pooled_height), "pooled_width": int(pooled_width),
                             "spatial_scale": float(spatial_scale), "sampling_ratio": int(sampling_ratio),
                             "aligned": False})


def affine_grid(theta: Variable, out_shape, name: str | None = None) -> Variable:
    """The [N, H, W, 2] sampling grid of the affine transforms ``theta`` [N, 2, 3] for an output of
    ``out_shape`` [N, C, H, W] (a list, or an int32 Variable); corners aligned, as Fluid 1.8."""
    if not isinstance(theta, Variable):
        raise ValueError("affine_grid: theta must be a Variable")
    inputs, attrs = {"Theta": theta}, {"align_corners": True}
    if isinstance(out_shape, Variable):
        inputs["OutputShape"] = out_shape
    elif isinstance(out_shape, (list, tuple)):
        attrs["output_shape"] = [int(d) for d in out_shape]
    else:
        raise ValueError(f"affine_grid: out_shape must be a list, tuple or Variable, got {out_shape!r}")
    return LayerHelper("affine_grid", name).simple_op("affine_grid", inputs, attrs, out_slot="Output")


def grid_sampler(x: Variable, grid: Variable, name: str | None = None) -> Variable:
    """Bilinear samples of ``x`` [N, C, H, W] at ``grid`` [N, Ho, Wo, 2] (normalised (x, y) in
    [-1, 1], corners aligned, zeros outside), as Fluid 1.8's grid_sampler."""
    return LayerHelper("grid_sampler", name).simple_op(
        "grid_sampler", {"X": x, "Grid": grid}, {"mode": "bilinear", "padding_mode": "zeros", "align_corners": True},
        out_slot="Output")
