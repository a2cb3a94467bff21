"""Fluid 1.x CTR layers and odds: data_norm, continuous_value_model, filter_by_instag, hash,
inplace_abn, the SelectedRows helpers (merge_selected_rows, get_tensor_from_selected_rows) and load
(ops in lowering/ops/ctr.py; what each op computes, and its deliberate differences, is documented
there).

>>> h = data_norm(fluid.data("feat", [-1, 16]))                        # doctest: +SKIP
>>> ids = hash(fluid.data("ids", [-1, 2], "int64"), hash_size=1000, num_hash=4)   # doctest: +SKIP
"""

from __future__ import annotations

from ..ir import dtypes
from ..ir.errors import ShapeError
from ..ir.variable import Variable
from .initializer import Constant
from .layer_args import activate
from .layer_helper import LayerHelper
from .param_attr import ParamAttr

__all__: list[str] = ["data_norm", "continuous_value_model", "filter_by_instag", "hash", "inplace_abn",
                      "merge_selected_rows", "get_tensor_from_selected_rows", "load"]


def data_norm(input: Variable, act=None, epsilon: float = 1e-05, param_attr=None, data_layout: str = "NCHW",
              in_place: bool = False, name: str | None = None, moving_mean_name: str | None = None,
              moving_variance_name: str | None = None, do_model_average_for_mean_and_var: bool = True,
              slot_dim: int = -1, sync_stats: bool = False, summary_decay_rate: float = 0.9999999,
              enable_scale_and_shift: bool = False) -> Variable:
    """Data normalization (op ``data_norm``) of a 2-D ``input`` [batch, C] by running summaries:
    Y = (input − BatchSum/BatchSize) · sqrt(BatchSize/BatchSquareSum) per channel, then ``act``.

    The summaries are trainable parameters ``<name>.batch_size`` / ``.batch_sum`` /
    ``.batch_square_sum`` (``name`` defaults to ``"dn"``, as in Fluid, so unnamed layers share
    them), initialised to 1e4, 0 and 1e4 or to ``param_attr``'s dict entries ``batch_size``,
    ``batch_sum``, ``batch_square``; their gradients are the batch's statistics (Paddle's CPU
    kernel). ``enable_scale_and_shift`` adds ``<name>.scale_w`` (``param_attr["scale_w"]``, 1) and
    ``<name>.bias`` (0). ``slot_dim`` > 0 zeroes the slots whose show (first column) is zero.
    ``in_place``, ``moving_*_name`` and ``do_model_average_for_mean_and_var`` are accepted and
    unused (as in Fluid); ``in_place`` still returns a new variable (fluidjax's values are not
    updated in place).
    """
    helper = LayerHelper("data_norm", name)
    if data_layout not in ("NCHW", "NHWC"):
        raise ValueError(f"data_norm: unsupported data_layout {data_layout!r}")
    if input.ndim < 2:
        raise ShapeError(f"data_norm: input {input.name!r} must be 2-D [batch, channels], got {input.shape}")
    channels = input.shape[1] if data_layout == "NCHW" else input.shape[-1]
    if channels < 0:
        raise ShapeError(f"data_norm: the channel dim of {input.name!r} {input.shape} must be known")
    attrs_in = param_attr if isinstance(param_attr, dict) else {}
    prefix = name or "dn"
    dtype = input.dtype

    def summary(suffix: str, value: float):
        return helper.create_parameter(ParamAttr(name=f"{prefix}.{suffix}", initializer=Constant(float(value)),
                                                 trainable=True), (channels,), dtype)

    # Paddle's grad maker reads the scale_w / bias slots even when they are empty: name them always.
    inputs = {"X": input, "scale_w": [], "bias": []}
    if enable_scale_and_shift:
        inputs["scale_w"] = summary("scale_w", attrs_in.get("scale_w", 1.0))
        inputs["bias"] = summary("bias", attrs_in.get("bias", 0.0))
    inputs["BatchSize"] = summary("batch_size", attrs_in.get("batch_size", 1e4))
    inputs["BatchSum"] = summary("batch_sum", attrs_in.get("batch_sum", 0.0))
    inputs["BatchSquareSum"] = summary("batch_square_sum", attrs_in.get("batch_square", 1e4))
    attrs = {"epsilon": float(epsilon), "sync_stats": bool(sync_stats), "summary_decay_rate": float(summary_decay_rate),
             "data_layout": data_layout}
    if slot_dim > 0:
        attrs["slot_dim"] = int(slot_dim)
    if enable_scale_and_shift:
        attrs["enable_scale_and_shift"] = True
    y = helper.create_tmp(dtype)
    means = helper.create_tmp(dtype, stop_gradient=True)
    scales = helper.create_tmp(dtype, stop_gradient=True)
    helper.append_op("data_norm", inputs, {"Y": y, "Means": means, "Scales": scales}, attrs)
    return activate(y, act, helper)


def continuous_value_model(input: Variable, cvm: Variable, use_cvm: bool = True) -> Variable:
    """Op ``cvm``: each row of ``input`` [N, D] starts with (show, click); ``use_cvm`` replaces them
    by log(show + 1) and log(click + 1) − log(show + 1), else drops them ([N, D − 2]). ``cvm``
    [instances, 2] holds each instance's (show, click): the gradient of ``input``'s first two
    columns is set to them (Paddle's kernel), the rest is Y's gradient."""
    if input.dtype not in ("float16", "float32", "float64"):
        raise TypeError(f"continuous_value_model: input must be float16, float32 or float64, got {input.dtype}")
    helper = LayerHelper("cvm")
    out = helper.create_tmp(input.dtype)
    helper.append_op("cvm", {"X": input, "CVM": cvm}, {"Y": out}, {"use_cvm": bool(use_cvm)})
    return out


def filter_by_instag(ins: Variable, ins_tag: Variable, filter_tag: Variable, is_lod: bool,
                     out_val_if_empty: int = 0) -> list[Variable]:
    """Keep the instances of ``ins`` having a tag of ``filter_tag`` (int64 [F]) among their tags
    (``ins_tag``: an int64 LoD tensor, one sequence of tags per instance); an instance is a row of
    ``ins``, or one of its sequences with ``is_lod``. Returns ``[out, loss_weight]``: the kept rows
    (a LoD tensor, one sequence per kept instance) and a float32 [K, 1] of ones; when nothing is
    kept, one row of ``out_val_if_empty`` and a weight of 0. The op's third output ``IndexMap``
    (row in out, row in ins, rows) is created too.

    The kept count depends on the data: inside a step the outputs are padded to a static capacity
    (every row of ``ins``) and carry their LoD; fetching them gives Paddle's rows exactly, and
    Paddle's LoD followed by empty sequences (one per instance not kept)."""
    helper = LayerHelper("filter_by_instag")
    out = helper.create_tmp(ins.dtype, lod_level=1)
    loss_weight = helper.create_tmp("float32", stop_gradient=True, lod_level=1)
    index_map = helper.create_tmp("int64", stop_gradient=True, lod_level=1)
    helper.append_op("filter_by_instag", {"Ins": ins, "Ins_tag": ins_tag, "Filter_tag": filter_tag},
                     {"Out": out, "LossWeight": loss_weight, "IndexMap": index_map},
                     {"is_lod": bool(is_lod), "out_val_if_empty": int(out_val_if_empty)})
    return [out, loss_weight]


def hash(input: Variable, hash_size: int, num_hash: int = 1, name: str | None = None) -> Variable:  # noqa: A001
    """Op ``hash``: for each row of the int32/int64 ``input`` [N, D], ``num_hash`` hashes
    XXH64(row bytes, seed j) mod ``hash_size`` (j = 0 … num_hash − 1): [N, num_hash, 1] in input's
    dtype."""
    helper = LayerHelper("hash", name)
    out = helper.create_tmp(input.dtype, stop_gradient=True)
    helper.append_op("hash", {"X": input}, {"Out": out}, {"num_hash": int(num_hash), "mod_by": int(hash_size)})
    return out


_ABN_ACTIVATIONS = (None, "identity", "leaky_relu", "elu")


def inplace_abn(input: Variable, act=None, is_test: bool = False, momentum=0.9, epsilon: float = 1e-05,
                param_attr=None, bias_attr=None, data_layout: str = "NCHW", name: str | None = None,
                moving_mean_name: str | None = None, moving_variance_name: str | None = None,
                do_model_average_for_mean_and_var: bool = True, use_global_stats: bool = False,
                act_alpha: float = 1.0) -> Variable:
    """In-place activated batch normalization: numerically ``batch_norm`` followed by ``act``
    (None / ``"identity"``, ``"leaky_relu"`` or ``"elu"`` with ``act_alpha``), with the same
    parameters and moving statistics as ``batch_norm``. Paddle 2.6 has no ``inplace_abn`` op, so
    this emits ``batch_norm`` and the activation op (Fluid's op saved memory by recomputing the
    input from the output; the result and gradients are the same). ``momentum`` may be a Variable
    (the op's ``MomentumTensor``). The result is a new variable, not ``input`` itself."""
    if act not in _ABN_ACTIVATIONS:
        raise ValueError(f"inplace_abn: act must be one of {list(_ABN_ACTIVATIONS)}, got {act!r}")
    if input.dtype not in ("float32", "float64"):
        raise TypeError(f"inplace_abn: input must be float32 or float64, got {input.dtype}")
    from .nn_layers import _batch_norm
    y, helper = _batch_norm("inplace_abn", input, is_test, momentum, epsilon, param_attr, bias_attr, data_layout,
                            name, moving_mean_name, moving_variance_name, use_global_stats)
    if act in ("leaky_relu", "elu"):
        return helper.simple_op(act, {"X": y}, {"alpha": float(act_alpha)})
    return y


def merge_selected_rows(x: Variable, name: str | None = None) -> Variable:
    """Op ``merge_selected_rows``. fluidjax has no SelectedRows: every tensor is dense, with each
    row once, so merging duplicate rows leaves ``x`` as it is (the op passes it through; Paddle
    refuses a dense ``x``)."""
    return LayerHelper("merge_selected_rows", name).simple_op("merge_selected_rows", {"X": x})


def get_tensor_from_selected_rows(x: Variable, name: str | None = None) -> Variable:
    """Op ``get_tensor_from_selected_rows``. fluidjax has no SelectedRows: ``x`` is a dense tensor
    already, and the op passes it through (Paddle refuses a dense ``x``)."""
    return LayerHelper("get_tensor_from_selected_rows", name).simple_op("get_tensor_from_selected_rows", {"X": x})


def load(out: Variable, file_path: str, load_as_fp16: bool | None = None) -> None:
    """Op ``load``: when the program runs, ``out`` gets the tensor saved in ``file_path`` (Paddle's
    tensor stream: what ``save`` and ``fluid.io.save_vars`` write), with its LoD; ``load_as_fp16``
    casts it to float16. The file's header fixes ``out``'s shape when the step compiles (a
    declared dtype or known dims that differ are an error); its data is read on every run."""
    attrs = {"file_path": str(file_path)}
    if load_as_fp16 is not None:
        attrs["load_as_fp16"] = bool(load_as_fp16)
    if not isinstance(out, Variable):
        raise TypeError(f"load: out must be a Variable, got {type(out).__name__}")
    if load_as_fp16 and out.dtype and dtypes.normalize(out.dtype) != "float16":
        raise TypeError(f"load: load_as_fp16 makes a float16 tensor; {out.name!r} is {out.dtype}")
    LayerHelper("load").append_op("load", {}, {"Out": out}, attrs)
