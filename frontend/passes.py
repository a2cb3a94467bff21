"""Inference passes on the IR: what Paddle Inference does to a CNN before running it, done on the
program so that XLA compiles the faster graph.

- :func:`fold_conv_bn` — an ``is_test`` ``batch_norm`` right after a ``conv2d`` /
  ``depthwise_conv2d`` (with or without the conv's ``elementwise_add`` bias) is folded into the
  convolution: ``W' = W · γ/√(σ²+ε)`` per output channel and ``b' = (b - μ) · γ/√(σ²+ε) + β``.
  The folded values are computed from the scope (in float64, then cast) and written under **new**
  persistable names (``<filter>.bn_folded``, ``<filter>.bn_folded_bias``): the original
  parameters stay untouched, so a training program sharing the scope runs as before.
- :func:`to_nhwc` — NCHW convolution / pooling / batch-norm chains, and the element-wise ops
  between them, run in NHWC (XLA's CPU convolutions are much faster channel-last); ``transpose2``
  ops are inserted only where a value enters or leaves such a chain. The conv rule takes NHWC
  input with OIHW filters.
- :func:`filters_hwio` — the filter of a channel-last ``conv2d`` / ``depthwise_conv2d`` is stored
  HWIO (a new persistable ``<filter>.hwio``) and turned back to Paddle's OIHW by a ``transpose2`` in the
  program: XLA then folds that transpose into the convolution, while an OIHW parameter costs a
  filter transpose on every call (ResNet-18's last stage at batch 1: 36 ms against 12 ms).
- :func:`per_sample_blocks` — a channel-last conv → depthwise → 1×1 projection block
  (MobileNetV2's inverted residuals) moves into the sub-block of a ``fluidjax_per_sample`` op,
  which runs it over chunks of the batch, so its wide expansion never exists for the whole batch
  (fluidjax's own op: ``optimize_inference(per_sample=False)`` keeps the program Paddle's).
- :func:`optimize_inference` — all of them, on a copy of the program. There the folded and HWIO
  filters are computed last, each in one pass from the saved filter (a folded filter that moves
  to HWIO is multiplied straight into its transposed layout; no OIHW folded copy is made or
  kept), on two threads: the passes are most of a compiled model's load time.

Both passes rewrite only values that nothing outside the rewritten ops reads: ``fetch`` targets,
``keep`` names and every variable another op (in any block) reads keep their meaning and layout.
Intermediates read only inside a folded or re-laid-out chain may disappear; name the ones you
want to fetch in ``keep``.

XLA CPU flags must be set before JAX starts its backend, so no pass can apply them;
:func:`recommended_xla_flags` returns the ones measured to help (see ``docs/inference.md``).

>>> # program, feeds, fetches = fj.io.load_inference_model("out/resnet", optimize=True)
>>> # fast = fj.passes.optimize_inference(train_program.clone(for_test=True), fj.global_scope())
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Iterable

import numpy as np

from ..ir.errors import UninitializedVariableError
from ..ir.program import Operator, Program
from ..lowering.lod_tensor import LoDTensor
from ..lowering.scope import Scope, global_scope

__all__ = ["fold_conv_bn", "to_nhwc", "filters_hwio", "per_sample_blocks", "optimize_inference",
           "recommended_xla_flags"]

_CONVS = ("conv2d", "depthwise_conv2d")
_TO_NHWC, _TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]
# Ops that compute each element from the same element of their input(s): layout does not matter.
_POINTWISE = frozenset({
    "relu", "relu6", "sigmoid", "tanh", "hard_swish", "hard_sigmoid", "swish", "silu", "leaky_relu", "elu",
    "gelu", "mish", "scale", "clip", "abs", "exp", "square", "sqrt"})
_ELEMENTWISE = frozenset({"elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div",
                          "elementwise_max", "elementwise_min"})


# -- helpers ---------------------------------------------------------------------------------------
def _readers(program: Program) -> dict[str, list[Operator]]:
    """Variable name → every op (in any block) that reads it."""
    readers: dict[str, list[Operator]] = defaultdict(list)
    for block in program.blocks:
        for op in block.ops:
            for name in op.input_arg_names:
                readers[name].append(op)
    return readers


def _writers(program: Program) -> dict[str, int]:
    writers: dict[str, int] = defaultdict(int)
    for block in program.blocks:
        for op in block.ops:
            for name in op.output_arg_names:
                writers[name] += 1
    return writers


def _scope_array(scope: Scope, name: str) -> np.ndarray | None:
    holder = scope.find_var(name)
    if holder is None or not holder.holds(LoDTensor):
        return None
    tensor = holder.get(LoDTensor)
    return np.asarray(tensor.value()) if tensor._is_initialized() else None


def _set_scope_array(scope: Scope, name: str, value: np.ndarray) -> None:
    tensor = scope.var(name).get_mutable(LoDTensor)
    tensor.set_lod([])
    tensor.set(value)


def _fresh_name(block, base: str) -> str:
    name, i = base, 0
    while block.program.global_block().find_var(name) is not None or block.find_var(name) is not None:
        i += 1
        name = f"{base}_{i}"
    return name


def _single(names: list[str]) -> str | None:
    return names[0] if len(names) == 1 else None


def _global_stats(op: Operator) -> bool:
    return bool((op.attr("is_test") and not op.attr("trainable_statistics")) or op.attr("use_global_stats"))


# -- conv + batch_norm folding ---------------------------------------------------------------------------
def fold_conv_bn(program: Program, scope: Scope | None = None, keep: Iterable[str] = (), *,
                 _deferred: dict | None = None) -> int:
    """Fold every inference ``batch_norm`` that follows a convolution into that convolution, in
    place; returns how many were folded.

    The folded filter and bias are new persistable variables of the global block, computed from
    ``scope`` (the global scope by default) and written into it; the conv's original filter (and
    bias) are left as they are in the scope. A batch norm is left alone where folding could change
    what anything else sees: its input read elsewhere or named in ``keep``, a parameter missing
    from the scope, training statistics, a layout that does not match the conv's.
    """
    scope = global_scope() if scope is None else scope
    keep = set(keep)
    block = program.global_block()
    readers, writers = _readers(program), _writers(program)
    producer = {}
    for op in block.ops:
        for name in op.output_arg_names:
            producer[name] = op
    folded = 0
    for bn in [op for op in block.ops if op.type == "batch_norm"]:
        plan = _fold_plan(bn, producer, readers, writers, keep, scope)
        if plan is None:
            continue
        _apply_fold(block, bn, plan, scope, _deferred)
        folded += 1
    if folded:
        _drop_dead_bias_reshapes(program, keep)
        _drop_unused_persistables(program)
    return folded


def _drop_dead_bias_reshapes(program: Program, keep: set[str]) -> None:
    """Remove the ``reshape2``/``unsqueeze2`` of a parameter (``paddle.nn.Conv2D``'s bias to
    [1, C, 1, 1]) that nothing reads any more now that the folded bias replaced it."""
    block = program.global_block()
    readers = _readers(program)
    for op in list(block.ops):
        if op.type not in ("reshape2", "unsqueeze2"):
            continue
        src = block.find_var(_single(op.input("X")) or "")
        if src is None or not src.persistable:
            continue
        if any(readers.get(n) or n in keep for n in op.output_arg_names):
            continue
        block.remove_op(block.ops.index(op))


def _only_read_by(name: str, op: Operator, readers, writers, keep) -> bool:
    return name not in keep and writers[name] == 1 and all(r is op for r in readers.get(name, []))


def _fold_plan(bn: Operator, producer, readers, writers, keep, scope):
    """What folding ``bn`` needs (conv, optional bias add, arrays), or None when it must not fold."""
    if not _global_stats(bn):
        return None
    x, y = _single(bn.input("X")), _single(bn.output("Y"))
    if x is None or y is None or not _only_read_by(x, bn, readers, writers, keep):
        return None
    layout = bn.attr("data_layout") or "NCHW"
    if layout not in ("NCHW", "NHWC"):
        return None
    # The statistics outputs: in an inference program they are Mean/Variance themselves, or
    # temporaries nobody reads; anything else reading them would lose its producer.
    stats_in = set(bn.input("Mean") + bn.input("Variance"))
    for slot in ("MeanOut", "VarianceOut", "SavedMean", "SavedVariance", "ReserveSpace"):
        for name in bn.output(slot):
            if name not in stats_in and (readers.get(name) or name in keep):
                return None
    add, conv = None, producer.get(x)
    if conv is not None and conv.type == "elementwise_add":
        add, conv = conv, producer.get(_single(conv.input("X")) or "")
    if conv is None or conv.type not in _CONVS or (conv.attr("data_format") or "NCHW") != layout:
        return None
    conv_out = _single(conv.output("Output"))
    filter_name = _single(conv.input("Filter"))
    if conv_out is None or filter_name is None:
        return None
    weight = _scope_array(scope, filter_name)
    if weight is None or weight.ndim != 4:
        return None
    channels = weight.shape[0]
    bias0 = np.zeros(channels, np.float64)
    if add is not None:
        if not _only_read_by(conv_out, add, readers, writers, keep):
            return None
        b = _conv_bias(add, producer, scope, layout, channels)
        if b is None:
            return None
        bias0 = b.astype(np.float64)
    elif not _only_read_by(conv_out, bn, readers, writers, keep):
        return None
    stats = {}
    for slot in ("Scale", "Bias", "Mean", "Variance"):
        name = _single(bn.input(slot))
        value = None if name is None else _scope_array(scope, name)
        if value is None and slot in ("Mean", "Variance"):
            return None
        if value is not None and value.size != channels:
            return None
        stats[slot] = None if value is None else value.reshape(channels).astype(np.float64)
    scale = stats["Scale"] if stats["Scale"] is not None else np.ones(channels)
    shift = stats["Bias"] if stats["Bias"] is not None else np.zeros(channels)
    factor = scale / np.sqrt(stats["Variance"] + float(bn.attr("epsilon", 1e-5)))
    new_bias = ((bias0 - stats["Mean"]) * factor + shift).astype(weight.dtype)
    return {"conv": conv, "add": add, "conv_out": conv_out, "filter": filter_name, "x": x, "y": y,
            "weight": _Folded(weight, factor), "bias": new_bias, "axis": 1 if layout == "NCHW" else 3}


_ALIGN = 64


def _aligned_empty(shape, dtype) -> np.ndarray:
    """An uninitialised array whose data starts on a 64-byte boundary: JAX's CPU client then takes
    it as a device buffer without copying (``jax.device_put``: 47 MB of ResNet-18 filters, 36 ms
    of CPU copied and page-faulted against 3 ms aliased). NumPy's own large arrays are 16-byte
    aligned, and those are copied."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(size + _ALIGN, np.uint8)
    start = (-raw.ctypes.data) % _ALIGN
    return raw[start:start + size].view(dtype).reshape(shape)


def _frozen(value: np.ndarray) -> np.ndarray:
    """``value`` made read-only: a device array may alias it (see :func:`_aligned_empty`), so it
    must not change under it."""
    value.flags.writeable = False
    return value


class _Folded:
    """A folded filter ``weight · factor`` (per output channel) not computed yet: the HWIO pass
    computes it straight into its transposed layout (one pass over the filter instead of two), and
    :func:`optimize_inference` computes what is left on two threads."""

    def __init__(self, weight: np.ndarray, factor: np.ndarray):
        self.weight, self.factor = weight, factor
        self.shape, self.dtype = weight.shape, weight.dtype

    def compute(self, perm: list[int] | None = None) -> np.ndarray:
        """The folded filter (transposed by ``perm``): float64 arithmetic rounded once into the
        filter's dtype, written straight into the result (no float64 copy of the filter)."""
        weight, factor = self.weight, self.factor[:, None, None, None]
        if perm is not None:
            weight, factor = weight.transpose(perm), factor.transpose(perm)
        out = _aligned_empty(weight.shape, self.dtype)
        np.multiply(weight, factor, out=out, dtype=np.float64, casting="same_kind")
        return _frozen(out)


def _conv_bias(add: Operator, producer, scope: Scope, layout: str, channels: int) -> np.ndarray | None:
    """The per-channel bias ``add`` adds to the conv output, or None when it is not one: a
    persistable vector at the channel axis (Fluid's ``elementwise_add(axis=1)``), or — as
    ``paddle.nn.Conv2D`` saves it — that vector ``reshape2``d to [1, C, 1, 1] and added with axis -1."""
    name = _single(add.input("Y"))
    if name is None:
        return None
    value = _scope_array(scope, name)
    source = producer.get(name)
    if value is None and source is not None and source.type in ("reshape2", "unsqueeze2"):
        value = _scope_array(scope, _single(source.input("X")) or "")
        if value is not None and source.input("Shape") + source.input("ShapeTensor") + source.input("AxesTensor") \
                + source.input("AxesTensorList"):
            return None  # a shape known only at run time
    var = add.block.find_var(name)
    if value is None or value.size != channels or var is None:
        return None
    shape, axis = tuple(var.shape), add.attr("axis", -1)
    channel_shape = (1, channels, 1, 1) if layout == "NCHW" else (1, 1, 1, channels)
    if len(shape) == 1:
        aligned = axis == (1 if layout == "NCHW" else 3) or (layout == "NHWC" and axis == -1)
    else:
        aligned = shape == channel_shape and axis in (-1, 0)
    return value.reshape(channels) if aligned else None


def _apply_fold(block, bn: Operator, plan, scope: Scope, deferred: dict | None = None) -> None:
    filter_name = plan["filter"]
    w_name = _fresh_name(block, f"{filter_name}.bn_folded")
    b_name = _fresh_name(block, f"{filter_name}.bn_folded_bias")
    for name, value in ((w_name, plan["weight"]), (b_name, plan["bias"])):
        block.create_var(name, value.shape, value.dtype.name, persistable=True)
        if deferred is not None and isinstance(value, _Folded):
            deferred[name] = value               # computed later, by filters_hwio or optimize_inference
        else:
            _set_scope_array(scope, name, value.compute() if isinstance(value, _Folded) else value)
    plan["conv"].inputs["Filter"] = [w_name]
    add = plan["add"]
    if add is not None:
        add.inputs["Y"] = [b_name]
        add.outputs["Out"] = [plan["y"]]
        add.set_attr("axis", plan["axis"])
        block.remove_op(block.ops.index(bn))
        return
    index = block.ops.index(bn)
    block.remove_op(index)
    block.insert_op(index, "elementwise_add", {"X": [plan["conv_out"]], "Y": [b_name]}, {"Out": [plan["y"]]},
                    {"axis": plan["axis"]})


def _drop_unused_persistables(program: Program) -> None:
    """Forget the declarations of persistable variables no op reads or writes any more (the BN
    statistics and the unfolded filters): a save of the optimized program writes only what it uses."""
    used = set()
    for block in program.blocks:
        for op in block.ops:
            used.update(op.input_arg_names)
            used.update(op.output_arg_names)
    block = program.global_block()
    for name in [n for n, v in block.vars.items() if v.persistable and n not in used
                 and n not in ("feed", "fetch")]:
        del block.vars[name]


# -- NCHW → NHWC ------------------------------------------------------------------------------------------
def _is_image(block, name: str | None) -> bool:
    var = block.find_var(name) if name else None
    return var is not None and len(var.shape) == 4


def _layout_role(op: Operator, block, nhwc: set[str]) -> str | None:
    """How ``op`` moves to NHWC: "anchor" (a conv/pool/bn that turns channel-last by an attr),
    "pointwise"/"binary"/"bias" (follows its input's layout), or None (stays as it is)."""
    t = op.type
    if t in _CONVS and (op.attr("data_format") or "NCHW") == "NCHW" and _is_image(block, _single(op.input("Input"))):
        return "anchor"
    if t == "pool2d" and (op.attr("data_format") or "NCHW") == "NCHW" and _is_image(block, _single(op.input("X"))):
        return "anchor"
    if t == "batch_norm" and (op.attr("data_layout") or "NCHW") == "NCHW" and _is_image(block, _single(op.input("X"))):
        return "anchor"
    if t in _POINTWISE:
        x = _single(op.input("X"))
        return "pointwise" if x in nhwc and len(op.output_arg_names) == 1 else None
    if t in _ELEMENTWISE:
        x, y = _single(op.input("X")), _single(op.input("Y"))
        if x is None or y is None or not (x in nhwc or y in nhwc):
            return None
        if _is_image(block, x) and _is_image(block, y) and op.attr("axis", -1) in (-1, 0):
            return "binary"
        var = block.find_var(y)
        if x in nhwc and var is not None and len(var.shape) == 1 and op.attr("axis", -1) == 1:
            return "bias"
    return None


_IMAGE_SLOTS = {"conv2d": ("Input", "Output"), "depthwise_conv2d": ("Input", "Output"), "pool2d": ("X", "Out"),
                "batch_norm": ("X", "Y")}


def to_nhwc(program: Program, keep: Iterable[str] = ()) -> int:
    """Run the global block's NCHW conv/pool/batch-norm chains channel-last, in place; returns the
    number of ops moved to NHWC. Every value read outside a chain (by another op, a ``fetch``, or
    named in ``keep``) is transposed back to NCHW under its own name right after it is made."""
    keep = set(keep)
    block = program.global_block()
    writers = _writers(program)
    # Pass 1 (in program order): which ops move, and which values they make channel-last.
    moved: dict[int, str] = {}
    nhwc: set[str] = set()
    for op in block.ops:
        role = _layout_role(op, block, nhwc)
        if role is None:
            continue
        if any(writers[n] != 1 for n in op.output_arg_names):
            continue  # a value written twice: its layout would depend on which write ran
        moved[id(op)] = role
        image_out = _IMAGE_SLOTS.get(op.type, (None, "Out"))[1]
        nhwc.update(op.output(image_out))
    if not moved:
        return 0
    # Which channel-last values are read by an op that did not move (or kept): those get an
    # NCHW copy under their original name.
    needs_nchw = set(keep) & nhwc
    for b in program.blocks:
        for op in b.ops:
            if id(op) in moved and b is block:
                continue
            needs_nchw.update(n for n in op.input_arg_names if n in nhwc)
    # Pass 2: rename channel-last values, flip the attrs, insert the edge transposes.
    renamed: dict[str, str] = {}
    new_ops: list[tuple[str, dict, dict, dict]] = []
    ops = list(block.ops)
    index = 0
    for op in ops:
        role = moved.get(id(op))
        if role is None:
            index += 1
            continue
        in_slot, out_slot = _IMAGE_SLOTS.get(op.type, ("X", "Out"))
        image_inputs = [in_slot] if role != "binary" else ["X", "Y"]
        for slot in image_inputs:
            name = _single(op.input(slot))
            if name in renamed:
                op.inputs[slot] = [renamed[name]]
            else:
                # Entering a chain: transpose this op's NCHW input once, here.
                new = _transpose(block, index, name, _TO_NHWC, _fresh_name(block, f"{name}.nhwc"))
                renamed[name] = new
                op.inputs[slot] = [new]
                index += 1
        if role == "anchor":
            op.set_attr("data_layout" if op.type == "batch_norm" else "data_format", "NHWC")
        elif role in ("binary",):
            op.set_attr("axis", -1)
        elif role == "bias":
            op.set_attr("axis", 3)
        out = _single(op.output(out_slot))
        new_out = _fresh_name(block, f"{out}.nhwc")
        var = block.var(out)
        block.create_var(new_out, [var.shape[i] for i in _TO_NHWC], var.dtype, var.lod_level)
        op.outputs[out_slot] = [new_out]
        renamed[out] = new_out
        index += 1
        if out in needs_nchw:
            _transpose(block, index, new_out, _TO_NCHW, out)
            index += 1
    return len(moved)


def _transpose(block, index: int, src: str, perm: list[int], dst: str) -> str:
    """Insert ``dst = transpose2(src, perm)`` at ``index`` (creating ``dst`` if new); returns dst."""
    var = block.var(src)
    if block.find_var(dst) is None:
        block.create_var(dst, [var.shape[i] for i in perm], var.dtype, var.lod_level)
    xshape = _fresh_name(block, f"{dst}.xshape")
    block.create_var(xshape, (0, *var.shape), var.dtype)
    block.insert_op(index, "transpose2", {"X": [src]}, {"Out": [dst], "XShape": [xshape]}, {"axis": perm})
    return dst


# -- HWIO filters ----------------------------------------------------------------------------------------
_OIHW_TO_HWIO, _HWIO_TO_OIHW = [2, 3, 1, 0], [3, 2, 0, 1]


def filters_hwio(program: Program, scope: Scope | None = None, keep: Iterable[str] = (), *,
                 _deferred: dict | None = None) -> int:
    """Store the filters of channel-last ``conv2d`` and ``depthwise_conv2d`` ops HWIO, in place;
    returns how many filters moved (a depthwise conv's per-channel weights are then contiguous for
    its sum of shifted slices: 3.6x faster at 1×56×56×144).

    A filter moves when it is a persistable parameter with a value in ``scope`` (the global scope
    by default), no op writes it, every op reading it is such a conv (not 1×1: those run as matrix
    products) and it is not named in ``keep``. Its HWIO copy is written into the scope under a
    **new** name (``<filter>.hwio``; the original is not touched, as with folding), and one
    ``transpose2`` before its first reader gives the convs Paddle's OIHW filter again, so the
    program still means what Paddle's ``conv2d`` means. Why: with an HWIO argument XLA's CPU
    convolution reads the filter as it is, and the transpose in the program folds into it; with an
    OIHW argument it transposes the filter on every call (docs/inference.md).
    """
    scope = global_scope() if scope is None else scope
    keep = set(keep)
    block = program.global_block()
    readers, writers = _readers(program), _writers(program)
    moved = 0
    for name in list(dict.fromkeys(n for op in block.ops if op.type in _CONVS for n in op.input("Filter"))):
        var = block.find_var(name)
        users = readers.get(name, [])
        if (var is None or not var.persistable or writers[name] or name in keep or len(var.shape) != 4
                or tuple(var.shape[2:]) == (1, 1)
                or not all(op.type in _CONVS and op.block is block
                           and (op.attr("data_format") or "NCHW") in ("NHWC", "NDHWC") for op in users)):
            continue
        folded = (_deferred or {}).get(name)
        value = folded if folded is not None else _scope_array(scope, name)
        if value is None or len(value.shape) != 4:
            continue
        hwio = _fresh_name(block, f"{name}.hwio")
        block.create_var(hwio, [var.shape[i] for i in _OIHW_TO_HWIO], var.dtype, persistable=True)
        if _deferred is not None:                 # optimize_inference computes it (on two threads)
            _deferred[hwio] = _Transposed(value, _OIHW_TO_HWIO)
        else:
            _set_scope_array(scope, hwio, np.ascontiguousarray(value.transpose(_OIHW_TO_HWIO)))
        first = min(block.ops.index(op) for op in users)
        oihw = _transpose(block, first, hwio, _HWIO_TO_OIHW, _fresh_name(block, f"{name}.from_hwio"))
        for op in users:
            op.inputs["Filter"] = [oihw if n == name else n for n in op.input("Filter")]
        moved += 1
    if moved:
        _drop_unused_persistables(program)
    return moved


class _Transposed:
    """A filter (an array, or a :class:`_Folded` one) to be stored transposed by ``perm``."""

    def __init__(self, value, perm: list[int]):
        self.value, self.perm = value, perm

    def compute(self) -> np.ndarray:
        if isinstance(self.value, _Folded):
            return self.value.compute(self.perm)
        source = self.value.transpose(self.perm)
        out = _aligned_empty(source.shape, source.dtype)
        np.copyto(out, source)
        return _frozen(out)


def _materialize(program: Program, scope: Scope, deferred: dict) -> None:
    """Compute the deferred values the program still declares, on up to two threads (NumPy's
    loops release the GIL), and write them into ``scope``."""
    block = program.global_block()
    todo = [(name, value) for name, value in deferred.items() if block.find_var(name) is not None]
    if not todo:
        return
    workers = min(2, os.cpu_count() or 1, len(todo))
    if workers > 1:
        from concurrent.futures import ThreadPoolExecutor

        todo.sort(key=lambda item: -int(np.prod(item[1].value.shape if isinstance(item[1], _Transposed)
                                                else item[1].shape)))
        with ThreadPoolExecutor(workers) as pool:
            values = list(pool.map(lambda item: item[1].compute(), todo))
    else:
        values = [value.compute() for _, value in todo]
    for (name, _), value in zip(todo, values):
        _set_scope_array(scope, name, value)


# -- per-sample blocks -----------------------------------------------------------------------------------
def _filter_shape(op: Operator) -> tuple | None:
    var = op.block.find_var(_single(op.input("Filter")) or "")
    return tuple(var.shape) if var is not None and len(var.shape) == 4 else None


def _pointwise_conv(op: Operator) -> tuple[int, int] | None:
    """(in, out) channels of a channel-last 1×1 ``conv2d`` with stride 1, no padding, one group."""
    shape = _filter_shape(op) if op.type == "conv2d" else None
    if (shape is None or shape[2:] != (1, 1) or (op.attr("data_format") or "NCHW") != "NHWC"
            or (op.attr("groups") or 1) != 1 or list(op.attr("strides") or [1, 1]) != [1, 1]
            or any(op.attr("paddings") or []) or op.attr("padding_algorithm") == "SAME"):
        return None
    return shape[1], shape[0]


def _depthwise(op: Operator) -> bool:
    shape = _filter_shape(op) if op.type in _CONVS else None
    return (shape is not None and shape[1] == 1 and (op.attr("groups") or 1) == shape[0] > 1
            and (op.attr("data_format") or "NCHW") == "NHWC")


def _bias_or_act(op: Operator, cur: str) -> bool:
    if op.type in _POINTWISE:
        return _single(op.input("X")) == cur and len(op.output_arg_names) == 1
    if op.type == "elementwise_add" and _single(op.input("X")) == cur:
        var = op.block.find_var(_single(op.input("Y")) or "")
        return var is not None and len(var.shape) == 1 and op.attr("axis", -1) in (-1, 3)
    return False


def _expansion_chain(ops: list[Operator], start: int, readers, writers, keep) -> list[Operator] | None:
    """The ops of an inverted-residual block starting at ``ops[start]``: a 1×1 expansion conv (at
    least twice the channels), bias adds and activations, a depthwise conv, bias adds and
    activations, a 1×1 projection conv (fewer channels), its bias add and a residual add of the
    block's input; consecutive in the program, each intermediate read only by the next op."""
    first = ops[start]
    shape = _filter_shape(first) if first.type == "conv2d" else None
    if (shape is None or (first.attr("groups") or 1) != 1 or (first.attr("data_format") or "NCHW") != "NHWC"
            or (shape[2:] == (1, 1) and shape[0] < 2 * shape[1])):
        return None                  # a 1x1 conv starts a block when it expands (at least 2x the channels)
    x, cur = _single(first.input("Input")), _single(first.output("Output"))
    if x is None or cur is None or not _is_image(first.block, x):
        return None
    chain, phase = [first], 0          # 0: expanded, 1: after the depthwise conv, 2: projected, 3: + residual
    if start > 0 and _filter_transpose(ops[start - 1]) and ops[start - 1].output("Out") == first.input("Filter"):
        chain.insert(0, ops[start - 1])
    projected_bias = False
    for op in ops[start + 1:]:
        if _filter_transpose(op):      # an HWIO filter turned back to OIHW (filters_hwio) goes in with its conv
            chain.append(op)
            continue
        if cur in keep or writers[cur] != 1 or readers.get(cur, []) != [op]:
            break
        pointwise = _pointwise_conv(op)
        if phase < 2 and _bias_or_act(op, cur):
            out = _single(op.output_arg_names)
        elif phase == 0 and _depthwise(op) and _single(op.input("Input")) == cur:
            phase, out = 1, _single(op.output("Output"))
        elif (phase == 1 and pointwise is not None and pointwise[1] < pointwise[0]
              and _single(op.input("Input")) == cur):
            phase, out = 2, _single(op.output("Output"))
        elif phase == 2 and not projected_bias and op.type == "elementwise_add" and _bias_or_act(op, cur):
            projected_bias, out = True, _single(op.output("Out"))
        elif (phase == 2 and op.type == "elementwise_add" and op.attr("axis", -1) in (-1, 0)
              and {_single(op.input("X")), _single(op.input("Y"))} == {cur, x} and cur != x):
            phase, out = 3, _single(op.output("Out"))
        else:
            break
        if out is None:
            break
        chain.append(op)
        cur = out
        if phase == 3:
            break
    while chain and _filter_transpose(chain[-1]):
        chain.pop()
    inside = set(map(id, chain))
    for op in chain:
        if _filter_transpose(op) and not all(id(r) in inside for n in op.output("Out") for r in readers.get(n, [])):
            return None                # a filter read outside the block too
    return chain if phase >= 2 and writers[cur] == 1 else None


def _filter_transpose(op: Operator) -> bool:
    """A ``transpose2`` of a persistable value (the OIHW view of an HWIO filter)."""
    if op.type != "transpose2":
        return False
    var = op.block.find_var(_single(op.input("X")) or "")
    return var is not None and var.persistable


def per_sample_blocks(program: Program, keep: Iterable[str] = ()) -> int:
    """Run every channel-last inverted-residual block (1×1 expansion, depthwise, 1×1 projection:
    MobileNetV2's) of the global block per chunk of the batch, in place; returns how many blocks.

    Each block's ops move into a sub-block of a ``fluidjax_per_sample`` op, which runs it over
    chunks of the batch (``lax.map``) so that its widest value (MobileNetV2 at batch 8: the
    8×112×112×96 expansion, 38 MB) never exists for the whole batch at once. The op is fluidjax's
    own: Paddle cannot run a program that holds one (``optimize_inference(per_sample=False)``
    leaves it out). Only values read inside a block are hidden in it; names in ``keep`` stay out.
    """
    keep = set(keep)
    block = program.global_block()
    moved = 0
    index = 0
    while index < len(block.ops):
        readers, writers = _readers(program), _writers(program)
        chain = _expansion_chain(block.ops, index, readers, writers, keep)
        if chain is None:
            index += 1
            continue
        convs = [op for op in chain if op.type in _CONVS]
        x = _single(convs[0].input("Input"))
        out = _single(chain[-1].output("Out") or chain[-1].output("Output"))
        index = min(block.ops.index(op) for op in chain)
        made = {n for op in chain for n in op.output_arg_names}
        params = list(dict.fromkeys(n for op in chain for n in op.input_arg_names if n not in made and n != x))
        current = program.current_block().idx
        sub = program.create_block(parent_idx=block.idx)
        program._current_block_idx = current
        for op in chain:
            block.remove_op(block.ops.index(op))
            sub.append_op(op.type, {k: list(v) for k, v in op.inputs.items()},
                          {k: list(v) for k, v in op.outputs.items()},
                          {k: v for k, v in op.attrs.items() if k != "op_callstack"}, infer_shape=False)
        block.insert_op(index, "fluidjax_per_sample", {"X": [x], "Params": params}, {"Out": [out]},
                        {"sub_block": sub.idx}, infer_shape=False)
        moved += 1
        index += 1
    return moved


# -- everything ------------------------------------------------------------------------------------------
def optimize_inference(program: Program, scope: Scope | None = None, *, fold: bool = True,
                       layout: str | None = "NHWC", keep: Iterable[str] = (), per_sample: bool = True) -> Program:
    """A copy of the inference ``program`` (a ``clone(for_test=True)`` or a loaded model) with
    conv+batch_norm folded (``fold``) and conv chains run in ``layout`` ("NHWC", or None to leave
    the layout alone) with HWIO filters, and (``per_sample``, channel-last only) inverted-residual
    blocks run per chunk of the batch (:func:`per_sample_blocks`; Paddle cannot run a program
    holding one). The folded and transposed parameters are written into
    ``scope`` (the global scope by default) under new names; ``program`` and the scope's existing
    values are not changed.
    Results equal the original program's to float32 rounding (1e-5).

    >>> # fast = fj.passes.optimize_inference(main.clone(for_test=True))
    >>> # out, = exe.run(fast, feed={"image": xs}, fetch_list=[prediction.name])
    """
    if layout not in (None, "NHWC", "NCHW"):
        raise ValueError(f"layout must be 'NHWC', 'NCHW' or None, got {layout!r}")
    scope = global_scope() if scope is None else scope
    keep = list(keep)
    new = program.clone()
    # The folded and HWIO filters are computed at the end, each in one pass from the saved filter
    # (a folded filter that moves to HWIO is never made OIHW), on two threads.
    deferred: dict = {}
    if fold:
        try:
            fold_conv_bn(new, scope, keep, _deferred=deferred)
        except UninitializedVariableError:
            pass
    if layout == "NHWC":
        to_nhwc(new, keep)
        filters_hwio(new, scope, keep, _deferred=deferred)
        if per_sample:
            per_sample_blocks(new, keep)
    _materialize(new, scope, deferred)
    return new


def recommended_xla_flags() -> str:
    """``XLA_FLAGS`` worth trying for CNN inference on CPU: XLA's YNNPACK library for convolutions
    and matrix products. With jax/jaxlib 0.10.2 XLA already runs convolutions through YNNPACK by
    default, so only the matrix-product part is new; on the 2-core Xeon it did not reduce the work
    of ResNet-18 or MobileNetV2 (``docs/inference.md``, "XLA:CPU options"), so it is not applied
    by default: measure your model with and without (``benchmarks/inference.py --sweep``). Flags
    only take effect when set before JAX initializes its CPU backend, e.g.
    ``XLA_FLAGS="$(python -c 'import fluidjax.passes as p; print(p.recommended_xla_flags())')"
    python serve.py``.
    """
    return "--xla_cpu_experimental_ynn_fusion_type=individual_convolution,individual_dot"
