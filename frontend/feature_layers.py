"""Fluid 1.8's layers over feature maps and weights that each append one op of Fluid's (issue 20):
``bilinear_tensor_product``, ``spectral_norm``, ``fsp_matrix`` (op ``fsp``), ``space_to_depth``,
``pad_constant_like``, ``similarity_focus``, ``random_crop``, and ``image_resize_short`` (a
composition over :func:`.vision_layers.image_resize`, as Fluid wrote it). Arguments, defaults and
parameter shapes are Fluid 1.8's.

>>> out = bilinear_tensor_product(x, y, size=4)          # [B, M], [B, N] -> [B, 4]
>>> w_sn = spectral_norm(weight, dim=0, power_iters=1)
"""

from __future__ import annotations

from typing import Sequence

from ..ir.variable import Variable
from .initializer import Normal
from .layer_args import activate
from .layer_helper import LayerHelper
from .param_attr import ParamAttr
from .vision_layers import image_resize

__all__ = ["bilinear_tensor_product", "spectral_norm", "fsp_matrix", "space_to_depth", "pad_constant_like",
           "similarity_focus", "random_crop", "image_resize_short"]


def bilinear_tensor_product(x: Variable, y: Variable, size: int, act=None, name: str | None = None,
                            param_attr=None, bias_attr=None) -> Variable:
    """out[:, i] = act(x W_i y^T + b_i): x [B, M], y [B, N], W [size, M, N], bias [1, size]."""
    helper = LayerHelper("bilinear_tensor_product", name)
    w = helper.create_parameter(ParamAttr.to_attr(param_attr), (size, x.shape[1], y.shape[1]), x.dtype)
    inputs = {"X": x, "Y": y, "Weight": w}
    battr = ParamAttr.to_attr(bias_attr)
    if battr is not None:
        inputs["Bias"] = helper.create_parameter(battr, (1, size), x.dtype, is_bias=True)
    out = helper.simple_op("bilinear_tensor_product", inputs)
    return activate(out, act, helper)


def spectral_norm(weight: Variable, dim: int = 0, power_iters: int = 1, eps: float = 1e-12,
                  name: str | None = None) -> Variable:
    """``weight`` divided by its largest singular value (``weight`` with ``dim`` first, as a matrix
    [h, w]), estimated by ``power_iters`` power iterations from the non-trainable parameters
    U [h] and V [w] (normal(0, 1) at startup)."""
    helper = LayerHelper("spectral_norm", name)
    h = weight.shape[dim]
    w = 1
    for i, d in enumerate(weight.shape):
        if i != dim:
            w *= d
    u = helper.create_parameter(ParamAttr(trainable=False), (h,), weight.dtype, default_initializer=Normal(0.0, 1.0))
    v = helper.create_parameter(ParamAttr(trainable=False), (w,), weight.dtype, default_initializer=Normal(0.0, 1.0))
    u.stop_gradient = v.stop_gradient = True
    return helper.simple_op("spectral_norm", {"Weight": weight, "U": u, "V": v},
                            {"dim": int(dim), "power_iters": int(power_iters), "eps": float(eps)})


def fsp_matrix(x: Variable, y: Variable) -> Variable:
    """The FSP matrix of two feature maps [B, C1, H, W] and [B, C2, H, W]: [B, C1, C2] (op ``fsp``)."""
    return LayerHelper("fsp_matrix").simple_op("fsp", {"X": x, "Y": y})


def space_to_depth(x: Variable, blocksize: int, name: str | None = None) -> Variable:
    """[N, C, H, W] -> [N, C * blocksize², H / blocksize, W / blocksize], in Fluid's element order."""
    if int(blocksize) < 1:
        raise ValueError(f"space_to_depth: blocksize must be positive, got {blocksize}")
    return LayerHelper("space_to_depth", name).simple_op("space_to_depth", {"X": x}, {"blocksize": int(blocksize)})


def pad_constant_like(x: Variable, y: Variable, pad_value: float = 0.0, name: str | None = None) -> Variable:
    """``y`` padded at the end of each dim with ``pad_value`` to ``x``'s shape."""
    return LayerHelper("pad_constant_like", name).simple_op("pad_constant_like", {"X": x, "Y": y},
                                                            {"pad_value": float(pad_value)}, dtype=y.dtype)


def similarity_focus(input: Variable, axis: int, indexes: Sequence[int], name: str | None = None) -> Variable:
    """The 0/1 focus mask of a 4-D ``input`` along ``axis`` (1, 2 or 3) for the slices ``indexes``."""
    if axis not in (1, 2, 3):
        raise ValueError(f"similarity_focus: axis must be 1, 2 or 3, got {axis}")
    if not indexes:
        raise ValueError("similarity_focus: indexes must not be empty")
    return LayerHelper("similarity_focus", name).simple_op(
        "similarity_focus", {"X": input}, {"axis": int(axis), "indexes": [int(i) for i in indexes]})


def random_crop(x: Variable, shape: Sequence[int], seed=None) -> Variable:
    """Each instance of ``x`` cropped to ``shape`` (its last dims) at a random place. The offsets
    follow the program's ``random_seed`` (an int ``seed`` becomes the op's ``startup_seed``
    attribute, kept for Fluid's program; a seed Variable is not taken)."""
    if isinstance(seed, Variable):
        raise TypeError("random_crop: a seed Variable is not taken; the offsets follow the program's random_seed")
    helper = LayerHelper("random_crop")
    out = helper.create_tmp(x.dtype, stop_gradient=True)
    helper.append_op("random_crop", {"X": x}, {"Out": out},
                     {"shape": [int(s) for s in shape], "startup_seed": int(seed or 0)})
    return out


def image_resize_short(input: Variable, out_short_len: int, resample: str = "BILINEAR") -> Variable:
    """Resize [N, C, H, W] images so the shorter side is ``out_short_len``, keeping the aspect ratio
    (the longer side rounded half up), as Fluid 1.8 computed it."""
    if input.ndim != 4:
        raise ValueError(f"image_resize_short: input must be 4-D, got {input.shape}")
    hw = list(input.shape[2:4])
    short = hw.index(min(hw))
    out_shape = list(hw)
    out_shape[short] = out_short_len
    out_shape[1 - short] = int(float(hw[1 - short]) * (float(out_short_len) / float(hw[short])) + 0.5)
    return image_resize(input=input, out_shape=out_shape, resample=resample)
