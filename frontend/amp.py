"""Mixed precision as Paddle names it: ``fj.amp.decorate(optimizer, ...)`` (Paddle 2.6's
``paddle.static.amp.decorate``, Fluid 1.x's ``fluid.contrib.mixed_precision.decorate``).

>>> # opt = fj.amp.decorate(fj.optimizer.Adam(1e-3), level="O1", dtype="bfloat16")
>>> # opt.minimize(loss)                  # rewrites the program, then backward and Adam

``minimize`` rewrites the forward program before appending the backward pass, as Paddle's
``cast_model_to_fp16`` does; the rewrite is ops of the program, so it serializes and Paddle runs it:

- every op is put in low precision (float16 or bfloat16) or float32 by the lists of
  :class:`AutoMixedPrecisionLists`: *white* ops (``mul``, ``matmul(_v2)``, ``conv2d``, ``einsum``)
  run in low precision; *black* ops (``softmax``, ``layer_norm``, ``exp``, ``reduce_*``, the
  losses, ``lookup_table``, ...) in float32; *gray* ops (elementwise arithmetic, activations,
  reshapes, ...) follow the op that produced their inputs (at O1; at O2 every op not black runs in
  low precision); ops in no list run in float32;
- a ``cast`` op is inserted before an op for each input in the other precision, writing
  ``<name>.cast_fp16`` (Paddle's name also for bfloat16) or ``<name>.cast_fp32``, shared by every
  later reader; the variables an op writes take its precision;
- the loss (cast back to float32 if needed) is multiplied by the loss scale
  (``loss_scaling_0``, ``[1]`` float32, persistable) unless the scale is a fixed 1.0;
  ``check_finite_and_unscale`` divides the gradients by it and says whether any overflowed; with
  dynamic loss scaling (float16), ``update_loss_scaling`` zeroes such a step's gradients and adapts
  the scale; Adam, AdamW and Lamb get the overflow flag as ``SkipUpdate``;
- ``cast`` ops that write a parameter's float32 gradient move after the backward pass (op_role
  Optimize), as Paddle's ``update_role_var_grad`` moves them.

One difference from Paddle, on purpose: at O2 Paddle turns the parameters themselves into
float16/bfloat16 variables and keeps float32 master copies in the optimizer (``multi_precision``;
``amp_init`` casts the values in the scope). Here parameters stay float32 — they *are* the master
weights — and a ``cast`` before each low-precision reader makes its low-precision copy, as at O1.
The optimizer ops update float32 values; nothing needs ``amp_init`` (it is kept, and only rewrites
a ``test_program``). ``docs/training.md`` says what the rewrite costs.
"""

from __future__ import annotations

import contextlib
import copy
import numbers
import warnings
from typing import Iterable, Iterator

from ..ir import dtypes, registry, unique_name
from ..ir.program import (OP_ROLE_BACKWARD, OP_ROLE_FORWARD, OP_ROLE_OPTIMIZE, Block, Operator, Program,
                          default_startup_program)
from ..ir.variable import Parameter, Variable
from . import optimizer as _optimizers
from .framework import program_guard
from .lr_decay_layers import create_global_var
from .tensor_layers import cast as _cast

__all__ = ["decorate", "AutoMixedPrecisionLists", "CustomOpLists", "OptimizerWithMixedPrecision", "fp16_guard",
           "bf16_guard", "cast_model_to_fp16", "WHITE_LIST", "FP16_WHITE_LIST", "FP16_BLACK_LIST",
           "EXTRA_BLACK_LIST", "GRAY_LIST"]

# -- Paddle 2.6's lists (paddle/amp/amp_lists.py, paddle/static/amp/fp16_lists.py) ---------------

# Numerically safe and performance-critical: always in low precision.
WHITE_LIST = frozenset({"conv2d", "einsum", "matmul", "matmul_v2", "max_pool2d_with_index", "mul",
                        "fused_gemm_epilogue"})
ONLY_FP16_WHITE_LIST = frozenset({"fake_quantize_dequantize_abs_max",
                                  "fake_quantize_dequantize_moving_average_abs_max", "fused_attention",
                                  "fused_feedforward"})
FP16_WHITE_LIST = WHITE_LIST | ONLY_FP16_WHITE_LIST
# Numerically dangerous, with effects seen downstream: always in float32 (O1).
FP16_BLACK_LIST = frozenset({
    "tan", "acos", "asin", "sinh", "cosh", "atanh", "tanh_shrink", "erfinv", "exp", "expm1", "log", "log10",
    "log2", "reciprocal", "rsqrt", "pow", "square", "reduce_sum", "mean", "reduce_mean", "reduce_prod",
    "cumprod", "cumsum", "dist", "pnorm", "frobenius_norm", "renorm", "group_norm", "layer_norm", "softmax",
    "softmin", "softplus", "log_softmax", "softmax_with_cross_entropy", "sigmoid_cross_entropy_with_logits",
    "c_softmax_with_cross_entropy", "cross_entropy", "cross_entropy2", "nll_loss", "huber_loss",
    "triplet_margin_loss", "log_loss", "hsigmoid_loss", "margin_cross_entropy"})
# Their low-precision gradients are slower than float32 ones: float32 at every level.
EXTRA_BLACK_LIST = frozenset({"linear_interp_v2", "nearest_interp_v2", "bilinear_interp_v2", "bicubic_interp_v2",
                              "trilinear_interp_v2", "lookup_table", "lookup_table_v2", "scatter"})
# Follow their inputs: safe unless fed by a black op, or without numerical effect.
GRAY_LIST = frozenset({
    "elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div", "elementwise_max",
    "elementwise_min", "elementwise_pow", "elementwise_mod", "elementwise_floordiv", "batch_norm", "layer_norm",
    "tanh", "sigmoid", "top_k", "pool2d", "pool3d", "dropout", "relu", "relu6", "leaky_relu", "soft_relu",
    "flatten2", "stack", "unstack", "uniform_random", "uniform_random_batch_size_like", "gaussian_random",
    "slice", "rank", "scale", "transpose2", "reshape2", "gather", "fill_constant",
    "get_tensor_from_selected_rows", "sign", "cast", "fused_bn_add_activation", "c_identity", "c_concat",
    "c_allreduce_sum", "concat", "split", "fused_feedforward", "fused_attention", "fused_multi_transformer"})
_ONLY_SUPPORTED_FP16 = frozenset({"resnet_unit", "fused_bn_add_activation"})

_LOW = ("float16", "bfloat16")
_GUARD_PATTERNS = ("__use_fp16__", "__use_bf16__")
_VALID_TYPES = (dtypes.LOD_TENSOR, dtypes.SELECTED_ROWS, dtypes.LOD_TENSOR_ARRAY)
_FLOAT_ENUMS = frozenset(dtypes.to_enum(t) for t in ("float16", "bfloat16", "float32", "float64"))
_REWRITTEN = frozenset({"float16", "bfloat16", "float32"})   # float64 variables are left alone


def _check_dtype(dtype) -> str:
    name = dtypes.normalize(dtype) if not isinstance(dtype, str) else dtype.lower()
    if name not in _LOW:
        raise ValueError(f"AMP's dtype must be 'float16' or 'bfloat16', got {dtype!r}")
    return name


class AutoMixedPrecisionLists:
    """Which ops run in low precision (``white_list``), which in float32 (``black_list``) and
    which follow their inputs (``gray_list``): Paddle 2.6's lists, changed by
    ``custom_white_list`` / ``custom_black_list`` (op types) and ``custom_black_varnames``
    (variables whose readers and writers stay float32).

    ``unsupported_list`` (ops without a low-precision kernel, kept in float32) starts empty: XLA
    runs every op in any float type. Paddle derives it from the kernels of the device it was built
    for (on a CPU-only Paddle, ``matmul`` and ``mul`` are "unsupported" and its rewrite changes
    nothing). Custom black ops join it, as in Paddle.

    >>> lists = AutoMixedPrecisionLists(custom_black_list={"elementwise_add"}, dtype="bfloat16")
    >>> "elementwise_add" in lists.black_list
    True
    """

    def __init__(self, custom_white_list: Iterable[str] | None = None,
                 custom_black_list: Iterable[str] | None = None,
                 custom_black_varnames: Iterable[str] | None = None, dtype: str = "float16") -> None:
        self.amp_dtype = _check_dtype(dtype)
        self._custom_white_list = set(custom_white_list) if custom_white_list else None
        self._custom_black_list = set(custom_black_list) if custom_black_list else None
        # Paddle 2.6 puts its float16-only white ops in both dtypes' lists; kept as it does.
        self.white_list = set(FP16_WHITE_LIST) | (set(_ONLY_SUPPORTED_FP16) if self.amp_dtype == "float16" else set())
        self.black_list = set(FP16_BLACK_LIST | EXTRA_BLACK_LIST)
        self.gray_list = set(GRAY_LIST)
        self.unsupported_list: set[str] = set()
        self.all_list = set(registry.registered_types())
        self.black_varnames = set(custom_black_varnames) if custom_black_varnames else None
        self._update_list()

    def _update_list(self) -> None:
        white, black = self._custom_white_list or set(), self._custom_black_list or set()
        both = sorted(white & black)
        if both:
            raise ValueError(f"The given custom_white_list overlaps custom_black_list with < {both[0]} >!")
        for op_type in white:
            if op_type in self.black_list:
                self.black_list.remove(op_type)
            elif op_type in self.gray_list:
                self.gray_list.remove(op_type)
            self.white_list.add(op_type)
        for op_type in black:
            if op_type in self.white_list:
                self.white_list.remove(op_type)
            elif op_type in self.gray_list:
                self.gray_list.remove(op_type)
            self.black_list.add(op_type)
            self.unsupported_list.add(op_type)

    def __repr__(self) -> str:
        return (f"AutoMixedPrecisionLists(dtype={self.amp_dtype!r}, {len(self.white_list)} white, "
                f"{len(self.black_list)} black, {len(self.gray_list)} gray)")


CustomOpLists = AutoMixedPrecisionLists


# -- fp16_guard ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _guard(pattern: str, program: Program | None = None) -> Iterator[None]:
    from ..ir.program import default_main_program

    program = program or default_main_program()
    before = [op for block in program.blocks for op in block.ops]   # held: their ids stay unique
    seen = {id(op) for op in before}
    try:
        yield
    finally:
        for block in program.blocks:
            for op in block.ops:
                if id(op) in seen:
                    continue
                scope = op.attr("op_namescope") or "/"
                if pattern not in scope:
                    op.set_attr("op_namescope", f"{scope.rstrip('/')}/{pattern}/", kind="string")


def fp16_guard(program: Program | None = None):
    """Ops built inside run in low precision when ``decorate(..., use_fp16_guard=True)`` (Fluid /
    ``use_pure_fp16``) or ``use_amp_guard=True`` (Paddle 2.x) at O2; the others stay float32.

    As in Paddle, the mark is the op's ``op_namescope`` attribute (it contains ``__use_fp16__``),
    so it serializes and Paddle's own rewrite honours it too.

    >>> # with fj.amp.fp16_guard():
    >>> #     hidden = fj.layers.fc(x, 10)
    """
    return _guard(_GUARD_PATTERNS[0], program)


def bf16_guard(program: Program | None = None):
    """``fp16_guard`` spelled as Paddle's ``static.amp.bf16.bf16_guard`` (mark ``__use_bf16__``).
    The rewrite honours either mark whatever the dtype (Paddle 2.6's ``decorate`` only the
    ``__use_fp16__`` one)."""
    return _guard(_GUARD_PATTERNS[1], program)


# -- the rewrite (Paddle's cast_model_to_fp16) ---------------------------------------------------------


def _cast_suffix(dtype: str) -> str:
    # Paddle names bfloat16 casts ".cast_fp16" too (fp16_utils._dtype_to_str): kept, so the
    # programs match name for name.
    return "fp16" if dtype in _LOW else "fp32"


def _keep_fp32_input(op: Operator, slot: str) -> bool:
    """Inputs that stay float32 even when the op runs in low precision (normalization statistics
    and affine parameters)."""
    if op.type in ("batch_norm", "layer_norm", "instance_norm"):
        return slot != "X"
    if op.type == "fused_bn_add_activation":
        return slot not in ("X", "Z")
    if op.type == "resnet_unit":
        return slot not in ("X", "FilterX", "Z", "FilterZ")
    if op.type in ("fused_attention", "fused_feedforward"):
        return slot in ("LnScale", "LnBias", "Ln2Scale", "Ln2Bias", "Ln1Scale", "Ln1Bias")
    if op.type == "fused_multi_transformer":
        return slot in ("LnScale", "LnBias", "FFNLnScale", "FFNLnBias")
    return False


def _keep_fp32_output(op: Operator, slot: str) -> bool:
    if op.type in ("batch_norm", "fused_bn_add_activation", "layer_norm"):
        return slot != "Y"
    if op.type == "resnet_unit":
        return slot not in ("Y", "ConvX", "ConvZ")
    if op.type in ("fused_attention", "fused_feedforward"):
        return slot in ("LnMean", "LnVariance", "Ln2Mean", "Ln2Variance", "Ln1Mean", "Ln1Variance")
    return False


def _in_guard(op: Operator) -> bool:
    scope = op.attr("op_namescope") or ""
    return any(p in scope for p in _GUARD_PATTERNS)


def _need_keep_fp32(op: Operator, unsupported: set[str], use_guard: bool) -> bool:
    if op.type in unsupported:
        return True
    if any("learning_rate" in n for n in op.input_arg_names + op.output_arg_names):
        return True               # learning-rate schedules stay float32
    return bool(use_guard) and not _in_guard(op)


def _need_process(op: Operator, block: Block) -> bool:
    """Paddle's ``need_process``: ops with no float input and ops that create a float tensor of
    a given dtype (``fill_constant``, the random ops) are left as they are."""

    def supported(name: str) -> bool:
        var = block.find_var(name)
        return var is None or (var.type == dtypes.LOD_TENSOR and var.dtype in _REWRITTEN)

    names = op.input_arg_names
    if names and not any(supported(n) for n in names):
        return False
    if op.type == "set_value":
        return True
    if op.type in ("create_py_reader", "read"):
        return False
    if not op.has_attr("in_dtype"):
        for attr in ("out_dtype", "dtype"):
            if op.attr(attr) in _FLOAT_ENUMS:
                return False
    return True


def _set_dtypes(block: Block, names: Iterable[str], dtype: str, write: bool) -> set[str]:
    """The float variables among ``names``; with ``write``, their dtype becomes ``dtype``."""
    out = set()
    for name in names:
        var = block.find_var(name)
        if var is None or var.type not in _VALID_TYPES or var.dtype not in _REWRITTEN:
            continue
        out.add(name)
        if write and var.dtype != dtype:
            var.dtype = dtype
    return out


def _process_op(op: Operator, block: Block, dtype: str) -> set[str]:
    """Set the op's float outputs to ``dtype``; return its float inputs (those it will read in
    ``dtype`` once the casts are in)."""
    inputs = set()
    for slot, names in op.inputs.items():
        if not _keep_fp32_input(op, slot):
            inputs |= _set_dtypes(block, names, dtype, write=False)
    for slot, names in op.outputs.items():
        if not _keep_fp32_output(op, slot):
            _set_dtypes(block, names, dtype, write=True)
    return inputs


def _rename_arg(op: Operator, old: str, new: str) -> None:
    """Rename ``old`` to ``new`` among the op's inputs and outputs (Paddle's ``_rename_arg``)."""
    for slots in (op.inputs, op.outputs):
        for slot, names in list(slots.items()):
            if old in names:
                slots[slot] = [new if n == old else n for n in names]


def _insert_casts(block: Block, op: Operator, idx: int, src: str, dest: str) -> int:
    """Insert before ``op`` a cast of each of its ``src`` inputs to ``dest`` (one variable
    ``<name>.cast_*`` shared by every reader); return how many were inserted. Each cast goes in at
    ``idx``, so they end up in reverse input order, as Paddle's do."""
    inserted = 0
    for slot in list(op.inputs):
        if src == "float32" and _keep_fp32_input(op, slot):
            continue
        for name in list(op.inputs.get(slot, [])):
            var = block.find_var(name)
            if var is None or var.type not in _VALID_TYPES or var.dtype == dest:
                continue
            cast_name = f"{name}.cast_{_cast_suffix(dest)}"
            existing = block.find_var(cast_name)
            if existing is not None and existing.dtype == dest:
                _rename_arg(op, name, cast_name)
                continue
            if var.dtype != src:
                continue
            out = block.vars.get(cast_name)
            if out is None or out.dtype != dest:
                out = block.create_var(cast_name, var.shape, dest, var.lod_level, stop_gradient=var.stop_gradient)
                out.dtype = dest
                block.insert_op(idx, "cast", {"X": name}, {"Out": cast_name}, {
                    "in_dtype": dtypes.to_enum(var.dtype), "out_dtype": dtypes.to_enum(dest),
                    "op_device": op.attr("op_device") or "", "op_role": int(op.attr("op_role", OP_ROLE_FORWARD))})
                inserted += 1
            _rename_arg(op, name, cast_name)
    for attr in ("in_dtype", "out_dtype", "dtype"):
        if op.has_attr(attr) and op.attr(attr) in _FLOAT_ENUMS:
            op.set_attr(attr, dtypes.to_enum(dest))
    return inserted


def _producers(program: Program) -> dict[str, Operator]:
    """The last op (in program order) that writes each variable: Paddle's ``Variable.op``."""
    out: dict[str, Operator] = {}
    for block in program.blocks:
        for op in block.ops:
            for name in op.output_arg_names:
                out[name] = op
    return out


def _true_prev_op(block: Block, op: Operator, name: str) -> Operator | None:
    found = None
    for other in block.ops:
        if other is op:
            break
        if name in other.output_arg_names:
            found = other
    return found


def _gray_dtype(op: Operator, dest: str, level: str, block: Block, lists: AutoMixedPrecisionLists,
                keep_fp32: set[int], keep_low: set[int], producers: dict[str, Operator]) -> str:
    """Paddle's ``get_amp_dst_dtype``: at O2 low precision; at O1 a gray op follows the op that
    produced its inputs (the last input with a producer decides), any other op is float32."""
    if level == "O2":
        return dest
    if op.type not in lists.gray_list:
        return "float32"
    result = dest
    for names in op.inputs.values():
        for name in names:
            prev = producers.get(name)
            if prev is None:
                continue
            if prev is op:
                prev = _true_prev_op(block, op, name)
                if prev is None:
                    continue
            if id(prev) in keep_fp32 or prev.type in lists.black_list:
                result = "float32"
            elif id(prev) in keep_low or prev.type in lists.white_list:
                result = dest
    return result


def _promote_dtype(op: Operator, dest: str, block: Block) -> str:
    """Paddle's ``get_promote_dtype``: float32 if any (not kept-float32) input is float32."""
    for slot, names in op.inputs.items():
        if _keep_fp32_input(op, slot):
            continue
        for name in names:
            var = block.find_var(name)
            if var is not None and var.dtype == "float32":
                return "float32"
    return dest


def cast_model_to_fp16(program: Program, amp_lists: AutoMixedPrecisionLists | None = None,
                       use_fp16_guard: bool = True, dest_type="float16", level: str = "O2",
                       use_promote: bool = False) -> set[str]:
    """Rewrite ``program`` in place for mixed precision (Paddle's ``cast_model_to_fp16``; see the
    module docstring); return the float variables low-precision ops read.

    ``dest_type`` is ``"float16"`` or ``"bfloat16"`` (or Paddle's enum); ``level`` is "O1", "O2" or
    "OD" (white ops low, every other op float32); with ``use_fp16_guard`` (O2) only ops built in
    :func:`fp16_guard` run in low precision. Parameters keep their float32 dtype at every level.
    """
    dest = _check_dtype(dest_type)
    level = level.upper()
    lists = copy.deepcopy(amp_lists) if amp_lists is not None else AutoMixedPrecisionLists(dtype=dest)
    if level == "O2":
        lists.black_list = lists.black_list - FP16_BLACK_LIST
    elif level == "OD":
        lists = AutoMixedPrecisionLists(dtype=dest)
        lists.black_list = lists.all_list - lists.white_list
    producers = _producers(program)
    keep_fp32: set[int] = set()
    keep_low: set[int] = set()
    low_names: set[str] = set()

    # Step 1: each op's precision, in program order (a gray op looks at its producers' choice).
    for block in program.blocks:
        for op in block.ops:
            if not _need_process(op, block):
                continue
            black_var = lists.black_varnames is not None and any(
                n in lists.black_varnames for n in op.input_arg_names + op.output_arg_names)
            if _need_keep_fp32(op, lists.unsupported_list, use_fp16_guard) or black_var \
                    or op.type in lists.black_list:
                keep_fp32.add(id(op))
                _process_op(op, block, "float32")
            elif op.type in lists.white_list:
                keep_low.add(id(op))
                low_names |= _process_op(op, block, dest)
            elif op.type == "cast":
                # A cast of the program keeps its out_dtype; in_dtype follows its input.
                src = block.find_var(op.input("X")[0])
                op.set_attr("in_dtype", dtypes.to_enum(src.dtype))
                block.find_var(op.output("Out")[0]).dtype = dtypes.from_enum(op.attr("out_dtype"))
            else:
                chosen = _promote_dtype(op, dest, block) if use_promote else _gray_dtype(
                    op, dest, level, block, lists, keep_fp32, keep_low, producers)
                if chosen == dest:
                    keep_low.add(id(op))
                    low_names |= _process_op(op, block, dest)
                else:
                    keep_fp32.add(id(op))
                    _process_op(op, block, "float32")

    # Step 2: casts before each op for the inputs in the other precision.
    for block in program.blocks:
        idx = 0
        while idx < len(block.ops):
            op = block.ops[idx]
            inserted = 0
            if id(op) in keep_low:
                inserted = _insert_casts(block, op, idx, "float32", dest)
            elif id(op) in keep_fp32:
                inserted = _insert_casts(block, op, idx, dest, "float32")
            idx += inserted + 1
    return low_names


def _move_param_grad_casts(program: Program, params_grads) -> None:
    """Paddle's ``update_role_var_grad``: a ``cast`` that writes a parameter's float32 gradient
    (from the low-precision one) becomes an Optimize op at the end of the block, and the op that
    wrote the low-precision gradient takes the ``op_role_var`` pair."""
    block = program.global_block()
    for param, grad in params_grads:
        if grad is None or grad.dtype != "float32":
            continue
        index = max((i for i, op in enumerate(block.ops) if grad.name in op.output_arg_names), default=None)
        if index is None or block.ops[index].type != "cast":
            continue
        op = block.ops[index]
        if not int(op.attr("op_role", 0)) & OP_ROLE_BACKWARD:
            raise ValueError(f"the cast op writing {grad.name!r} must be a Backward op")
        op.set_attr("op_role_var", [], kind="strings")
        low_grad = op.input("X")[0]
        writer = _true_prev_op(block, op, low_grad)
        if writer is not None:
            writer.set_attr("op_role_var", [param.name, low_grad] + list(writer.attr("op_role_var") or []),
                            kind="strings")
        op.set_attr("op_role", OP_ROLE_OPTIMIZE)
        if index == len(block.ops) - 1:
            continue
        readers = [o for o in block.ops[index + 1:] if grad.name in o.input_arg_names]
        if readers:
            raise ValueError(f"the cast op's output {grad.name!r} should not be used by a non-optimize op, "
                             f"however it is used by {readers[0].type!r}")
        block.ops.append(block.ops.pop(index))


# -- the decorated optimizer ---------------------------------------------------------------------------


class OptimizerWithMixedPrecision:
    """An optimizer with mixed precision (Paddle's class of the same name): ``minimize``,
    ``backward``, ``apply_gradients`` and ``apply_optimize`` as the optimizer's, plus the rewrite
    and loss scaling (module docstring). Made by :func:`decorate`.
    """

    def __init__(self, optimizer, amp_lists: AutoMixedPrecisionLists, level: str, dtype: str,
                 init_loss_scaling: float, use_dynamic_loss_scaling: bool, incr_every_n_steps: int,
                 decr_every_n_nan_or_inf: int, incr_ratio: float, decr_ratio: float, use_amp_guard=None,
                 use_master_grad: bool = False, use_promote: bool = False) -> None:
        if not isinstance(optimizer, _optimizers.Optimizer):
            raise TypeError(f"decorate needs an optimizer (fj.optimizer.Adam, ...), got {optimizer!r}")
        self._optimizer = optimizer
        self._amp_lists = amp_lists
        self._amp_level = level
        self._amp_dtype = dtype
        self._init_loss_scaling = float(init_loss_scaling)
        self._use_dynamic_loss_scaling = bool(use_dynamic_loss_scaling)
        if dtype == "bfloat16" and self._use_dynamic_loss_scaling:
            self._use_dynamic_loss_scaling = False
            self._init_loss_scaling = 1.0
            warnings.warn("Dynamic loss scaling for bfloat16 amp training is disabled, and the init_loss_scaling "
                          "is changed to 1.0 (as PaddlePaddle does)")
        self._incr_every_n_steps = int(incr_every_n_steps)
        self._decr_every_n_nan_or_inf = int(decr_every_n_nan_or_inf)
        self._incr_ratio = float(incr_ratio)
        self._decr_ratio = float(decr_ratio)
        self._use_pure_fp16 = level == "O2"
        self._use_fp16_guard = use_amp_guard
        self._use_master_grad = bool(use_master_grad) and self._use_pure_fp16   # moot: gradients are float32
        self.use_promote = bool(use_promote)
        self._train_program: Program | None = None
        self._startup: Program | None = None
        self._loss_scaling: Variable | None = None
        self._num_good_steps: Variable | None = None
        self._num_bad_steps: Variable | None = None
        self._scaled_loss: Variable | None = None
        self._to_fp16_var_names: set[str] | None = None

    def get_loss_scaling(self) -> Variable:
        """The loss-scale variable (``[1]`` float32, persistable): fetch it to see the scale."""
        if self._loss_scaling is None:
            raise RuntimeError("Please call minimize() before calling get_loss_scaling().")
        return self._loss_scaling

    def get_scaled_loss(self) -> Variable | None:
        """The loss times the loss scale: what the backward pass differentiates."""
        return self._scaled_loss

    def _init_amp_var(self) -> None:
        self._loss_scaling = create_global_var([1], self._init_loss_scaling, "float32", persistable=True,
                                               name=unique_name.generate("loss_scaling"))
        if self._use_dynamic_loss_scaling:
            self._num_good_steps = create_global_var([1], 0, "int32", persistable=True,
                                                     name=unique_name.generate("num_good_steps"))
            self._num_bad_steps = create_global_var([1], 0, "int32", persistable=True,
                                                    name=unique_name.generate("num_bad_steps"))

    def backward(self, loss: Variable, startup_program: Program | None = None, parameter_list=None,
                 no_grad_set=None, callbacks=None):
        """Rewrite the program, scale the loss and append the backward pass; return
        ``[(parameter, scaled gradient)]``."""
        program = loss.block.program
        startup = startup_program or default_startup_program()
        self._train_program, self._startup = program, startup
        with program_guard(program, startup):
            self._init_amp_var()
            if self._amp_level == "O2":
                self._to_fp16_var_names = cast_model_to_fp16(program, self._amp_lists, self._use_fp16_guard,
                                                             self._amp_dtype, "O2", self.use_promote)
            elif self._amp_level != "O0":
                cast_model_to_fp16(program, self._amp_lists, False, self._amp_dtype, self._amp_level,
                                   self.use_promote)
            if loss.dtype != "float32":
                loss = _cast(loss, "float32")
            if self._use_dynamic_loss_scaling or self._init_loss_scaling != 1.0:
                block = loss.block     # Paddle's `loss * loss_scaling`: elementwise_mul into "tmp_<n>"
                self._scaled_loss = block.create_var(unique_name.generate("tmp"), loss.shape, "float32")
                block.append_op("elementwise_mul", {"X": loss, "Y": self._loss_scaling}, {"Out": self._scaled_loss},
                                {"axis": -1})
            else:
                self._scaled_loss = loss
            return self._optimizer.backward(self._scaled_loss, startup, parameter_list, no_grad_set, callbacks)

    def amp_init(self, place=None, scope=None, test_program: Program | None = None, use_fp16_test: bool = False,
                 rewrite_master_weight: bool = False) -> None:
        """Paddle casts O2's parameters to low precision here; fluidjax keeps them float32 (they are
        the master weights), so this only rewrites ``test_program`` (at O2, or with
        ``use_fp16_test``) as the training program was."""
        if self._train_program is None:
            raise RuntimeError("Please call the minimize method first.")
        if test_program is not None:
            if self._use_pure_fp16:
                cast_model_to_fp16(test_program, self._amp_lists, self._use_fp16_guard, self._amp_dtype, "O2",
                                   self.use_promote)
            elif use_fp16_test:
                cast_model_to_fp16(test_program, self._amp_lists, False, self._amp_dtype, self._amp_level,
                                   self.use_promote)

    def _optimize_guard(self, names: list[str]):
        program = self._train_program
        previous = program._op_role
        block = program.global_block()
        start = len(block.ops)

        @contextlib.contextmanager
        def guard():
            program._op_role = OP_ROLE_OPTIMIZE
            try:
                yield
            finally:
                program._op_role = previous
                for op in block.ops[start:]:
                    op.set_attr("op_role_var", list(names), kind="strings")

        return guard()

    def _tmp(self, prefix: str, shape, dtype) -> Variable:
        block = self._train_program.global_block()
        return block.create_var(unique_name.generate(f"{prefix}.tmp"), shape, dtype, stop_gradient=True)

    def _check_finite_and_unscale(self, params_grads) -> Variable:
        block = self._train_program.global_block()
        grads = [g for _, g in params_grads]
        groups = [("find_infinite_scale", grads)]
        if self._use_pure_fp16:
            groups = [("find_infinite_scale_fp32", [g for g in grads if g.dtype == "float32"]),
                      ("find_infinite_scale_fp16", [g for g in grads if g.dtype == self._amp_dtype])]
        found = []
        for name, group in groups:
            if not group:
                continue
            with self._optimize_guard([g.name for g in group]):
                flag = self._tmp(name, (1,), "bool")
                block.append_op("check_finite_and_unscale", {"X": group, "Scale": self._loss_scaling},
                                {"Out": group, "FoundInfinite": flag})
            found.append(flag)
        if not self._use_pure_fp16:
            return found[0]
        with self._optimize_guard([]):
            joined = self._tmp("concat", (len(found),), "bool")
            block.append_op("concat", {"X": found}, {"Out": joined}, {"axis": 0})
            any_inf = self._tmp("reduce_any", (), "bool")
            block.append_op("reduce_any", {"X": joined}, {"Out": any_inf},
                            {"dim": [], "keep_dim": False, "reduce_all": True})
        return any_inf

    def _add_dynamic_loss_scaling(self, params_grads, found_inf: Variable) -> None:
        block = self._train_program.global_block()
        grads = [g for _, g in params_grads]
        groups = [grads]
        if self._use_pure_fp16:
            groups = [[g for g in grads if g.dtype == "float32"], [g for g in grads if g.dtype == self._amp_dtype]]
        stop = False
        with self._optimize_guard([]):
            for group in groups:
                if not group:
                    continue
                block.append_op(
                    "update_loss_scaling",
                    {"X": group, "FoundInfinite": found_inf, "PrevLossScaling": self._loss_scaling,
                     "InGoodSteps": self._num_good_steps, "InBadSteps": self._num_bad_steps},
                    {"Out": group, "LossScaling": self._loss_scaling, "OutGoodSteps": self._num_good_steps,
                     "OutBadSteps": self._num_bad_steps},
                    {"incr_every_n_steps": self._incr_every_n_steps,
                     "decr_every_n_nan_or_inf": self._decr_every_n_nan_or_inf,
                     "incr_ratio": self._incr_ratio, "decr_ratio": self._decr_ratio, "stop_update": stop})
                stop = True       # at O2 the second op only zeroes its gradients

    def apply_gradients(self, params_grads):
        """Unscale and check the gradients, adapt the loss scale, then append the optimizer ops;
        return those."""
        if self._train_program is None:
            raise RuntimeError("call backward() (or minimize()) before apply_gradients()")
        params_grads = [(p, g) for p, g in params_grads if g is not None]
        _move_param_grad_casts(self._train_program, params_grads)
        if not params_grads or not self._use_dynamic_loss_scaling and self._init_loss_scaling == 1.0:
            return self._optimizer.apply_gradients(params_grads, self._startup)
        found_inf = self._check_finite_and_unscale(params_grads)
        if self._use_dynamic_loss_scaling and self._amp_dtype == "float16":
            self._add_dynamic_loss_scaling(params_grads, found_inf)
        ops = self._optimizer.apply_gradients(params_grads, self._startup)
        # Paddle hands the flag to the optimizer (_set_auxiliary_var("found_inf")); the ops that
        # read it skip the whole update (moments and beta powers too) on an overflow.
        for op in ops:
            if op.type in ("adam", "adamw", "lamb") and not op.input("SkipUpdate"):
                op.inputs["SkipUpdate"] = [found_inf.name]
        return ops

    def apply_optimize(self, loss: Variable, startup_program: Program | None, params_grads):
        """Paddle's name for :meth:`apply_gradients` as :meth:`minimize` calls it."""
        if startup_program is not None:
            self._startup = startup_program
        return self.apply_gradients(params_grads)

    def minimize(self, loss: Variable, startup_program: Program | None = None, parameter_list=None,
                 no_grad_set=None):
        """Rewrite, scale, differentiate and optimize; return ``(optimize_ops, params_grads)``."""
        params_grads = self.backward(loss, startup_program, parameter_list, no_grad_set)
        ops = self.apply_optimize(loss, startup_program, params_grads)
        return ops, params_grads

    def __getattr__(self, name: str):
        # What the decorated object does not define is the optimizer's (get_lr, set_lr, ...).
        if name.startswith("__") or name == "_optimizer":
            raise AttributeError(name)
        return getattr(self._optimizer, name)

    def __repr__(self) -> str:
        return (f"OptimizerWithMixedPrecision({self._optimizer!r}, level={self._amp_level!r}, "
                f"dtype={self._amp_dtype!r})")


# -- decorate --------------------------------------------------------------------------------------------


def _decorate_fluid(optimizer, amp_lists: AutoMixedPrecisionLists | None = None, init_loss_scaling: float = 2 ** 15,
                    incr_every_n_steps: int = 1000, decr_every_n_nan_or_inf: int = 2, incr_ratio: float = 2.0,
                    decr_ratio: float = 0.8, use_dynamic_loss_scaling: bool = True, use_pure_fp16: bool = False,
                    use_fp16_guard: bool | None = None, use_bf16: bool = False,
                    use_promote: bool = False) -> OptimizerWithMixedPrecision:
    """Fluid's ``decorate`` (``fluid.contrib.mixed_precision.decorate``; Paddle's float16-only
    form): O1, or O2 with ``use_pure_fp16``; float16 unless ``use_bf16``."""
    dtype = "bfloat16" if use_bf16 else "float16"
    if amp_lists is None:
        amp_lists = AutoMixedPrecisionLists(dtype=dtype)
    if use_fp16_guard is None:
        use_fp16_guard = use_pure_fp16
    return OptimizerWithMixedPrecision(
        optimizer, amp_lists, level="O2" if use_pure_fp16 else "O1", dtype=dtype,
        init_loss_scaling=init_loss_scaling, use_dynamic_loss_scaling=use_dynamic_loss_scaling,
        incr_every_n_steps=incr_every_n_steps, decr_every_n_nan_or_inf=decr_every_n_nan_or_inf,
        incr_ratio=incr_ratio, decr_ratio=decr_ratio, use_amp_guard=use_fp16_guard, use_promote=use_promote)


def _decorate_common(optimizer, amp_lists: AutoMixedPrecisionLists | None = None, level: str = "O1",
                     dtype: str = "float16", master_weight: bool | None = None, master_grad: bool = False,
                     init_loss_scaling: float = 2 ** 16, incr_every_n_steps: int = 2000,
                     decr_every_n_nan_or_inf: int = 1, incr_ratio: float = 2.0, decr_ratio: float = 0.5,
                     use_dynamic_loss_scaling: bool | None = None, use_amp_guard: bool = False,
                     use_promote: bool = False) -> OptimizerWithMixedPrecision:
    """Paddle 2.x's ``decorate``: ``level`` O1 / O2 / OD (O0: no casts), ``dtype`` float16 /
    bfloat16; dynamic loss scaling by default for float16 only."""
    if not isinstance(level, str) or level.upper() not in ("O0", "OD", "O1", "O2"):
        raise ValueError(f"level should be O0, OD, O1 or O2, got {level!r}")
    level = level.upper()
    dtype = _check_dtype(dtype)
    if amp_lists is None or level == "OD":
        amp_lists = AutoMixedPrecisionLists(dtype=dtype)
    if use_dynamic_loss_scaling is None:
        use_dynamic_loss_scaling = dtype == "float16"
    # master_weight: the parameters stay float32 here, so they are always the master weights.
    return OptimizerWithMixedPrecision(
        optimizer, amp_lists, level=level, dtype=dtype, init_loss_scaling=init_loss_scaling,
        use_dynamic_loss_scaling=use_dynamic_loss_scaling, incr_every_n_steps=incr_every_n_steps,
        decr_every_n_nan_or_inf=decr_every_n_nan_or_inf, incr_ratio=incr_ratio, decr_ratio=decr_ratio,
        use_amp_guard=use_amp_guard, use_promote=use_promote, use_master_grad=master_grad)


_FLUID_ONLY = frozenset({"use_pure_fp16", "use_fp16_guard", "use_bf16"})
_COMMON_ONLY = frozenset({"level", "dtype", "master_weight", "master_grad", "use_amp_guard"})


def decorate(optimizer, amp_lists: AutoMixedPrecisionLists | None = None, *args, **kwargs) -> OptimizerWithMixedPrecision:
    """Wrap ``optimizer`` for mixed-precision training (Paddle 2.6's ``paddle.static.amp.decorate``).

    Paddle overloads it with two forms, and so does this function:

    - ``decorate(optimizer, amp_lists=None, level="O1", dtype="float16", master_weight=None,
      master_grad=False, init_loss_scaling=2**16, incr_every_n_steps=2000,
      decr_every_n_nan_or_inf=1, incr_ratio=2.0, decr_ratio=0.5, use_dynamic_loss_scaling=None,
      use_amp_guard=False, use_promote=False)`` — Paddle 2.x's; dynamic loss scaling is on by
      default for float16 only (for bfloat16 the loss is still scaled by ``init_loss_scaling`` and
      checked, as in Paddle: pass ``init_loss_scaling=1.0`` for none);
    - ``decorate(optimizer, amp_lists=None, init_loss_scaling=2**15, incr_every_n_steps=1000,
      decr_every_n_nan_or_inf=2, incr_ratio=2.0, decr_ratio=0.8, use_dynamic_loss_scaling=True,
      use_pure_fp16=False, use_fp16_guard=None, use_bf16=False, use_promote=False)`` — Fluid's,
      chosen when a keyword only it has is given (``use_pure_fp16``, ``use_fp16_guard``,
      ``use_bf16``) or the third positional argument is a number (Paddle: a float).

    >>> # opt = fj.amp.decorate(fj.optimizer.Adam(1e-3), level="O1", dtype="bfloat16")
    >>> # opt = fj.amp.decorate(fj.optimizer.SGD(0.1), init_loss_scaling=1024.0, use_pure_fp16=True)
    """
    fluid = _FLUID_ONLY.intersection(kwargs)
    common = _COMMON_ONLY.intersection(kwargs)
    if fluid and common:
        raise TypeError(f"decorate: {sorted(fluid)} belong to Fluid's form and {sorted(common)} to Paddle 2.x's; "
                        "give the keywords of one form")
    if fluid or (not common and args and isinstance(args[0], numbers.Number) and not isinstance(args[0], bool)):
        return _decorate_fluid(optimizer, amp_lists, *args, **kwargs)
    return _decorate_common(optimizer, amp_lists, *args, **kwargs)
