"""Weight normalization of a layer's parameter (``WeightNormParamAttr``), built with plain ops:
``w = g * v / sqrt(reduce_sum(v * v, every dim but dim, keep_dim))``, in the main program where
the layer creates its weight, and ``g = ||v||`` in the startup program after ``v`` is initialized
(as Fluid's ``LayerHelper._create_weight_normalize`` does, with its transposes and reshapes
replaced by one ``reduce_sum`` over the other dims: the same values)."""

from __future__ import annotations

from ..ir import unique_name
from ..ir.program import Block
from ..ir.variable import Variable
from .param_attr import WeightNormParamAttr


def _norm_except_dim(block: Block, v: Variable, dim: int | None, prefix: str, out: Variable | None = None):
    """``sqrt(sum(v * v))`` over every dim of ``v`` but ``dim``, keeping ``v``'s rank."""

    def tmp() -> Variable:
        return block.create_var(unique_name.generate(f"{prefix}.weight_norm_tmp"), (), v.dtype)

    square, total = tmp(), tmp()
    out = out if out is not None else tmp()
    block.append_op("elementwise_mul", {"X": v, "Y": v}, {"Out": square}, {"axis": -1})
    others = [d for d in range(len(v.shape)) if d != dim]
    block.append_op("reduce_sum", {"X": square}, {"Out": total},
                    {"dim": others, "keep_dim": True, "reduce_all": dim is None})
    block.append_op("sqrt", {"X": total}, {"Out": out})
    return out


def create_weight_normalized(helper, attr: WeightNormParamAttr, name: str, shape, dtype: str, init) -> Variable:
    """Parameters ``<name>_g`` and ``<name>_v`` (and their startup ops), and the ops computing
    ``w`` from them in the current block; returns ``w``."""
    shape = tuple(int(d) for d in shape)
    dim = attr.dim
    if dim is not None:
        if not -len(shape) <= dim < len(shape):
            raise ValueError(f"WeightNormParamAttr: dim {dim} is out of range for a parameter of shape {list(shape)}")
        dim %= len(shape)
    g_shape = tuple(shape[d] if d == dim else 1 for d in range(len(shape)))
    main = helper.main_program.global_block()

    def param(suffix: str, param_shape) -> Variable:
        p = main.create_parameter(f"{name}_{suffix}", param_shape, dtype, trainable=attr.trainable,
                                  regularizer=attr.regularizer, learning_rate=attr.learning_rate,
                                  need_clip=attr.need_clip)
        p.gradient_clip_attr = attr.gradient_clip
        p.do_model_average = attr.do_model_average
        return p

    g, v = param("g", g_shape), param("v", shape)
    startup = helper.startup_program.global_block()
    if not startup.has_var(v.name):
        init(v, startup)
        g_out = startup.create_var(g.name, g_shape, dtype, persistable=True)
        _norm_except_dim(startup, startup.var(v.name), dim, helper.name, out=g_out)
    block = helper.block
    norm = _norm_except_dim(block, v, dim, helper.name)
    scale = block.create_var(unique_name.generate(f"{helper.name}.weight_norm_tmp"), (), dtype)
    w = block.create_var(unique_name.generate(f"{name}.weight_norm"), (), dtype)
    block.append_op("elementwise_div", {"X": g, "Y": norm}, {"Out": scale}, {"axis": -1})
    block.append_op("elementwise_mul", {"X": v, "Y": scale}, {"Out": w}, {"axis": -1})
    WeightNormParamAttr.params_with_weight_norm.append(w)
    return w
