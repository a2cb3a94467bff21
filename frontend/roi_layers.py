"""Fluid 1.x ROI pooling variants (ops in lowering/ops/roi_variants.py): ``psroi_pool``,
``prroi_pool``, ``deformable_roi_pooling``, ``roi_perspective_transform``.

ROIs are a LoD tensor (``lod_level=1``: the image of each ROI is its sequence), as in Fluid 1.8;
``prroi_pool`` also takes a per-image count (``batch_roi_nums``) with plain ROIs.

>>> rois = fluid.data("rois", [None, 4], "float32", lod_level=1)
>>> pooled = psroi_pool(score_map, rois, output_channels=10, spatial_scale=1 / 16, pooled_height=7, pooled_width=7)
"""

from __future__ import annotations

from typing import Sequence

from ..ir.variable import Variable
from .layer_helper import LayerHelper

__all__ = ["psroi_pool", "prroi_pool", "deformable_roi_pooling", "roi_perspective_transform"]


def _pair(value, what: str) -> list[int]:
    values = [int(value)] * 2 if isinstance(value, int) else [int(v) for v in value]
    if len(values) != 2:
        raise ValueError(f"{what} must be an int or a pair of ints, got {value!r}")
    return values


def _need_variable(value, what: str, layer: str) -> None:
    if not isinstance(value, Variable):
        raise TypeError(f"{layer}: {what} must be a Variable, got {type(value).__name__}")


def psroi_pool(input: Variable, rois: Variable, output_channels: int, spatial_scale: float, pooled_height: int,
               pooled_width: int, name: str | None = None) -> Variable:
    """Position-sensitive ROI pooling (R-FCN): [R, output_channels, pooled_height, pooled_width], bin
    (i, j) of output channel c the mean of input channel (c·pooled_height + i)·pooled_width + j over
    the bin. ``input`` has output_channels·pooled_height·pooled_width channels; ``rois`` [R, 4]
    (x1, y1, x2, y2) is a LoD tensor (its sequences are the images)."""
    _need_variable(input, "input", "psroi_pool")
    _need_variable(rois, "rois", "psroi_pool")
    helper = LayerHelper("psroi_pool", name)
    out = helper.create_tmp(input.dtype)
    helper.append_op("psroi_pool", {"X": input, "ROIs": rois}, {"Out": out},
                     {"output_channels": int(output_channels), "spatial_scale": float(spatial_scale),
                      "pooled_height": int(pooled_height), "pooled_width": int(pooled_width)})
    return out


def prroi_pool(input: Variable, rois: Variable, spatial_scale: float = 1.0, pooled_height: int = 1,
               pooled_width: int = 1, batch_roi_nums: Variable | None = None, name: str | None = None) -> Variable:
    """Precise ROI pooling: [R, C, pooled_height, pooled_width], each bin the integral of the
    bilinearly interpolated ``input`` over the bin divided by its area. ``rois`` [R, 4] is a LoD
    tensor, or a plain tensor with ``batch_roi_nums`` ([N] int64: the ROI count of each image).
    Differentiable in ``input`` and ``rois``."""
    _need_variable(input, "input", "prroi_pool")
    _need_variable(rois, "rois", "prroi_pool")
    helper = LayerHelper("prroi_pool", name)
    out = helper.create_tmp(input.dtype)
    inputs = {"X": input, "ROIs": rois}
    if batch_roi_nums is not None:
        _need_variable(batch_roi_nums, "batch_roi_nums", "prroi_pool")
        inputs["BatchRoINums"] = batch_roi_nums
    helper.append_op("prroi_pool", inputs, {"Out": out},
                     {"spatial_scale": float(spatial_scale), "pooled_height": int(pooled_height),
                      "pooled_width": int(pooled_width)})
    return out


def deformable_roi_pooling(input: Variable, rois: Variable, trans: Variable, no_trans: bool = False,
                           spatial_scale: float = 1.0, group_size: Sequence[int] = (1, 1), pooled_height: int = 1,
                           pooled_width: int = 1, part_size: Sequence[int] | None = None, sample_per_part: int = 1,
                           trans_std: float = 0.1, position_sensitive: bool = False,
                           name: str | None = None) -> Variable:
    """Deformable ROI pooling (op ``deformable_psroi_pooling``): each of the pooled_height ×
    pooled_width bins of a ROI is shifted by ``trans`` [R, 2·classes, part_h, part_w] (× trans_std ×
    the ROI's size) and averaged over sample_per_part² bilinear samples. Output channels: the
    input's, or input channels / (pooled_height·pooled_width) when ``position_sensitive`` (then
    ``group_size`` picks the channel of each bin). ``part_size`` defaults to the pooled size."""
    _need_variable(input, "input", "deformable_roi_pooling")
    _need_variable(rois, "rois", "deformable_roi_pooling")
    _need_variable(trans, "trans", "deformable_roi_pooling")
    channels = input.shape[1]
    if channels is None or channels < 0:
        raise ValueError("deformable_roi_pooling: the input's channel count must be known")
    output_dim = channels // (pooled_height * pooled_width) if position_sensitive else channels
    part = [pooled_height, pooled_width] if part_size is None else _pair(part_size, "part_size")
    helper = LayerHelper("deformable_psroi_pooling", name)
    out = helper.create_tmp(input.dtype)
    top_count = helper.create_tmp(input.dtype, stop_gradient=True)
    helper.append_op("deformable_psroi_pooling", {"Input": input, "ROIs": rois, "Trans": trans},
                     {"Output": out, "TopCount": top_count},
                     {"no_trans": bool(no_trans), "spatial_scale": float(spatial_scale), "output_dim": int(output_dim),
                      "group_size": _pair(group_size, "group_size"), "pooled_height": int(pooled_height),
                      "pooled_width": int(pooled_width), "part_size": part, "sample_per_part": int(sample_per_part),
                      "trans_std": float(trans_std)})
    return out


def roi_perspective_transform(input: Variable, rois: Variable, transformed_height: int, transformed_width: int,
                              spatial_scale: float = 1.0, name: str | None = None):
    """Warps each quadrilateral ROI ([R, 8] LoD tensor: x1, y1, ..., x4, y4 clockwise from the top
    left) of ``input`` onto a transformed_height × transformed_width grid. Returns (out [R, C, th,
    tw], mask [R, 1, th, tw] int32: 1 where the pixel samples inside the ROI and the map,
    transform_matrix [R, 9]), as Fluid 1.8."""
    _need_variable(input, "input", "roi_perspective_transform")
    _need_variable(rois, "rois", "roi_perspective_transform")
    helper = LayerHelper("roi_perspective_transform", name)
    out = helper.create_tmp(input.dtype)
    mask = helper.create_tmp("int32", stop_gradient=True)
    matrix = helper.create_tmp(input.dtype, stop_gradient=True)
    out2in_idx = helper.create_tmp("int32", stop_gradient=True)
    out2in_w = helper.create_tmp(input.dtype, stop_gradient=True)
    helper.append_op("roi_perspective_transform", {"X": input, "ROIs": rois},
                     {"Out": out, "Mask": mask, "TransformMatrix": matrix, "Out2InIdx": out2in_idx,
                      "Out2InWeights": out2in_w},
                     {"transformed_height": int(transformed_height), "transformed_width": int(transformed_width),
                      "spatial_scale": float(spatial_scale)})
    return out, mask, matrix
