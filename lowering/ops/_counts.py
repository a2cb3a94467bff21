"""Which ops take a *counted* value row by row (docs/ops_data_dependent.md), by family.

A counted value is the output of an op whose row count is data (``where_index``,
``masked_select``, ``unique``, the NMS and proposal ops, ``sequence_expand`` of a plain X), and
what row-wise ops make of it: rows padded to a static capacity carrying their real count. The
lowering (``lower._count_rule``) refuses it at any op that declares no role for the slot it
arrives in (``registry.declare_counts``); this table declares the row-wise families, whose outputs
keep the count. Ops whose rules honour the count themselves (shape, concat, slice, sort, ...)
declare ``"count"`` next to their rules; LoD-aware ops (``lower.lod_aware``: the reductions,
``mean``, sequence ops) take it as a LoD value of one sequence.
"""

from __future__ import annotations

import jax.numpy as jnp

from ...ir.registry import declare_counts, has
from ..checks import bound_checked, several_counted
from ..lod_value import LoDValue

_ROWS = {"X": "rows"}


# -- helpers for the rules that honour a count ------------------------------------------------------
def given(values, slot: str) -> bool:
    """Whether the op's input ``slot`` holds a value (an optional slot may be absent or empty)."""
    return any(v is not None for v in values.get(slot) or ())


def is_counted(value) -> bool:
    """Whether ``value`` reached a rule as a counted value (a LoDValue: slots declared ``"count"``)."""
    return value.__class__ is LoDValue


def count_of(value):
    """The real row count of a counted value (int32, traced), or the static row count of an array."""
    if value.__class__ is LoDValue:
        return value.row_count().astype(jnp.int32)
    return jnp.asarray(value.shape[0], jnp.int32)


def rows_of(value):
    """The padded rows of a counted value, or the array itself."""
    return value.data if value.__class__ is LoDValue else value


def counted(data, count) -> LoDValue:
    """``data`` (padded rows) carrying ``count`` real rows; the rows past it are zeroed."""
    count = jnp.asarray(count, jnp.int32)
    real = (jnp.arange(data.shape[0]) < count).reshape((-1,) + (1,) * (data.ndim - 1))
    return LoDValue(jnp.where(real, data, jnp.zeros((), data.dtype)),
                    [jnp.stack([jnp.zeros((), jnp.int32), count])])


def real_rows(value):
    """A bool mask [rows, 1, ...] of a counted value's real rows (all true for an array)."""
    data = rows_of(value)
    return (jnp.arange(data.shape[0]) < count_of(value)).reshape((-1,) + (1,) * (data.ndim - 1))


def _ndim(values, slot) -> int:
    vals = values.get(slot) or [None]
    return len(getattr(vals[0], "shape", ())) if vals[0] is not None else 0


def _aligned_rows(op, values) -> dict:
    """Broadcasting ops: an input is row-wise when its dim 0 is the output's dim 0 (the rank of the
    output, or Paddle's elementwise ``axis`` placing it there)."""
    slots = [s for s in values if values[s] and values[s][0] is not None and s not in ("Rtol", "Atol")]
    ranks = {s: _ndim(values, s) for s in slots}
    top = max(ranks.values(), default=0)
    axis = op.attrs.get("axis", -1)
    roles = {}
    for s, r in ranks.items():
        start = top - r if (axis is None or axis == -1 or r == top) else axis
        if r and start == 0:
            roles[s] = "rows"
    return roles


def _not_axis0(attr: str, default=-1, slots=("X",)):
    """Ops along one axis (``attr``): row-wise when that axis is not the rows."""

    def roles(op, values):
        n = _ndim(values, slots[0])
        axis = op.attrs.get(attr, default)
        axis = axis[0] if isinstance(axis, (list, tuple)) and axis else axis
        if n and isinstance(axis, int) and axis % n != 0:
            return {s: "rows" for s in slots}
        return {}

    return roles


def _arg_extreme(op, values) -> dict:
    if op.attrs.get("flatten"):
        return {}
    return _not_axis0("axis", 0)(op, values)


def _transpose(op, values) -> dict:
    perm = list(op.attrs.get("axis") or [])
    return _ROWS if perm and perm[0] == 0 else {}


def _squeeze(op, values) -> dict:
    n = _ndim(values, "X")
    axes = [int(a) % n for a in (op.attrs.get("axes") or [])] if n else []
    rows = values["X"][0].shape[0] if n else 0
    return _ROWS if n > 1 and 0 not in axes and (axes or rows != 1) else {}


def _unsqueeze(op, values) -> dict:
    n = _ndim(values, "X")
    axes = list(op.attrs.get("axes") or [])
    if given(values, "AxesTensor") or given(values, "AxesTensorList") or not n:
        return {}
    out_rank, placed = n, []
    for a in axes:
        out_rank += 1
        placed.append(int(a) + out_rank if int(a) < 0 else int(a))
    return _ROWS if 0 not in placed else {}


def _flatten2(op, values) -> dict:
    return _ROWS if int(op.attrs.get("axis", 1)) >= 1 else {}


def _mul(op, values) -> dict:
    return _ROWS if int(op.attrs.get("x_num_col_dims", 1)) == 1 else {}


def _matmul(op, values) -> dict:
    trans = op.attrs.get("trans_x", op.attrs.get("transpose_X", False))
    nx, ny = _ndim(values, "X"), _ndim(values, "Y")
    roles = {}
    if nx >= 3 or (nx == 2 and not trans):
        roles["X"] = "rows"
    if nx >= 3 and ny == nx:
        roles["Y"] = "rows"
    return roles


def _stack(op, values) -> dict:
    n = _ndim(values, "X")
    axis = int(op.attrs.get("axis", 0))
    return {"X": "rows"} if axis % (n + 1) != 0 else {}


def _split(op, values) -> dict:
    return _not_axis0("axis", 0)(op, values) if not given(values, "AxisTensor") else {}


def _expand_v2(op, values) -> dict:
    shape = list(op.attrs.get("shape") or [])
    n = _ndim(values, "X")
    rows = values["X"][0].shape[0] if n else 0
    if given(values, "Shape") or given(values, "expand_shapes_tensor") or len(shape) != n or not n:
        return {}
    return _ROWS if shape[0] in (-1, rows) else {}


def _tile(op, values) -> dict:
    times = list(op.attrs.get("repeat_times") or [])
    n = _ndim(values, "X")
    if given(values, "RepeatTimes") or given(values, "repeat_times_tensor") or not n:
        return {}
    times = [1] * (n - len(times)) + times
    return _ROWS if len(times) == n and times[0] == 1 else {}


def _gather(op, values) -> dict:
    if given(values, "Axis"):
        return {}
    axis = int(op.attrs.get("axis", 0))
    n = _ndim(values, "X")
    if n and axis % n == 0:
        return {"X": "table", "Index": "rows"}
    return {"X": "rows"}


def _index_select(op, values) -> dict:
    n = _ndim(values, "X")
    dim = int(op.attrs.get("dim", 0))
    return {"X": "table", "Index": "rows"} if n and dim % n == 0 else {"X": "rows"}


def _strided_slice(op, values) -> dict:
    n = _ndim(values, "Input")
    axes = [int(a) % n for a in (op.attrs.get("axes") or [])] if n else [0]
    return {"Input": "rows"} if 0 not in axes and 0 not in (op.attrs.get("decrease_axis") or []) else {}


def _layer_norm(op, values) -> dict:
    return _ROWS if int(op.attrs.get("begin_norm_axis", 1)) >= 1 else {}


def _softmax_ce(op, values) -> dict:
    n = _ndim(values, "Logits")
    axis = int(op.attrs.get("axis", -1))
    return {"Logits": "rows", "Label": "rows"} if n and axis % n != 0 else {}


def _batch_size_like(op, values) -> dict:
    """``*_batch_size_like``: one output row per input row when the batch dim is the rows on both sides."""
    idx, odx = int(op.attrs.get("input_dim_idx", 0)), int(op.attrs.get("output_dim_idx", 0))
    return {"Input": "rows"} if idx == 0 and odx == 0 else {}


_UNARY = """
relu relu6 leaky_relu elu selu celu brelu thresholded_relu rrelu gelu sigmoid logsigmoid tanh swish silu
mish hard_swish hard_sigmoid softplus stanh soft_relu softsign softshrink hard_shrink tanh_shrink maxout
exp expm1 log log1p log2 log10 sqrt rsqrt square reciprocal pow erf abs sign floor ceil round trunc clip
sin cos tan asin acos atan sinh cosh logical_not bitwise_not isfinite_v2 isnan_v2 isinf_v2 cast assign
scale fill_any_like fill_zeros_like label_smooth dropout one_hot_v2 one_hot
""".split()

_BROADCAST = """
elementwise_add elementwise_sub elementwise_mul elementwise_div elementwise_max elementwise_min
elementwise_pow elementwise_mod elementwise_floordiv elementwise_heaviside atan2 equal not_equal less_than
less_equal greater_than greater_equal logical_and logical_or logical_xor bitwise_and bitwise_or
bitwise_xor isclose where sum cross_entropy cross_entropy2 sigmoid_cross_entropy_with_logits huber_loss
index_sample smooth_l1_loss
""".split()

# Ops computing each sample (dim 0) from that sample alone: convolutions, pooling, per-channel
# affine maps (R-CNN's ResNet head over roi_align's ROIs, its mask upsampling).
_PER_SAMPLE = {
    "conv2d": "Input", "depthwise_conv2d": "Input", "conv3d": "Input", "conv2d_transpose": "Input",
    "depthwise_conv2d_transpose": "Input", "conv3d_transpose": "Input",
    "pool2d": "X", "pool3d": "X", "max_pool2d_with_index": "X", "affine_channel": "X",
}

_BY_RULE = {
    "softmax": _not_axis0("axis"), "log_softmax": _not_axis0("axis"),
    "arg_max": _arg_extreme, "arg_min": _arg_extreme,
    "transpose": _transpose, "transpose2": _transpose,
    "squeeze": _squeeze, "squeeze2": _squeeze, "unsqueeze": _unsqueeze, "unsqueeze2": _unsqueeze,
    "flatten": _flatten2, "flatten2": _flatten2,
    "mul": _mul, "matmul": _matmul, "matmul_v2": _matmul,
    "stack": _stack, "split": _split, "unstack": _not_axis0("axis", 0), "unbind": _not_axis0("axis", 0),
    "expand_v2": _expand_v2, "tile": _tile,
    "gather": _gather, "gather_nd": lambda op, values: {"X": "table", "Index": "rows"},
    "index_select": _index_select, "strided_slice": _strided_slice,
    "lookup_table": lambda op, values: {"W": "table", "Ids": "rows"},
    "lookup_table_v2": lambda op, values: {"W": "table", "Ids": "rows"},
    "layer_norm": _layer_norm, "softmax_with_cross_entropy": _softmax_ce,
    # detection: ROIs from NMS / proposals, one output row per ROI
    "roi_align": lambda op, values: {"ROIs": "rows"}, "roi_pool": lambda op, values: {"ROIs": "rows"},
    "box_coder": lambda op, values: {"TargetBox": "rows"},
    "iou_similarity": lambda op, values: {"X": "rows"},
    # its rule counts each image's ROIs by RoisNum, so the padding rows take no part
    "distribute_fpn_proposals": lambda op, values: {"FpnRois": "table"} if given(values, "RoisNum") else {},
    "fill_constant_batch_size_like": _batch_size_like,
    "uniform_random_batch_size_like": _batch_size_like, "gaussian_random_batch_size_like": _batch_size_like,
    # control flow passing a value through (paddle.static.nn.cond): their rules select whole values,
    # a counted one with its count (the branch not taken holds count 0)
    "select_input": lambda op, values: {"X": "count"}, "select_output": lambda op, values: {"X": "count"},
    "gru_unit": lambda op, values: {"Input": "rows", "HiddenPrev": "rows"},
    "lstm_unit": lambda op, values: {"X": "rows", "C_prev": "rows"},
}


def declare_families() -> None:
    """Declare the row-wise families above (``ops/__init__`` calls it once every op is registered)."""
    for t in _UNARY:
        if has(t):
            declare_counts(t, _ROWS)
    for t in _BROADCAST:
        if has(t):
            declare_counts(t, _aligned_rows)
            bound_checked(t, several_counted)      # their counts must agree (lower._check_same_counts)
    for t, rule in _BY_RULE.items():
        if has(t):
            declare_counts(t, rule)
    for t, slot in _PER_SAMPLE.items():
        if has(t):
            declare_counts(t, {slot: "rows"})

