"""``append_backward``: gradient ops in the program itself, as Paddle builds them.

For a loss, the pass appends (with ``op_role`` = Backward):

1. ``fill_constant`` of ones into ``loss@GRAD`` (the seed);
2. for every forward op on a path from a variable that needs a gradient to the loss, in
   reverse order, its ``<type>_grad`` op: inputs are the forward op's inputs and outputs and the
   gradients of its outputs (``Out@GRAD``); outputs are the gradients of its inputs (``X@GRAD``);
   slots without a gradient hold ``@EMPTY@``;
3. where several ops contribute to one variable's gradient, each writes a renamed copy
   (``X@GRAD@RENAME@<n>``) and a ``sum`` op adds them into ``X@GRAD`` before it is read.

A variable needs a gradient when it is not ``stop_gradient``, not in ``no_grad_set``, has a float
dtype, and is a leaf (a parameter, say) or is computed from one that needs a gradient. Data
variables are ``stop_gradient`` and so never get one.
"""

from __future__ import annotations

from typing import Iterable

from . import dtypes, registry
from .program import EMPTY_VAR_NAME, OP_ROLE_BACKWARD, OP_ROLE_LOSS, Block, Operator
from .registry import grad_var_name
from .variable import Parameter, Variable


def _names(items) -> set[str]:
    return {v.name if isinstance(v, Variable) else v for v in (items or ())}


def _differentiable_inputs(op: Operator) -> list[tuple[str, int, str]]:
    """(slot, index, name) of op's inputs that can carry a gradient."""
    opdef = registry.get(op.type)
    return [(slot, i, n) for slot, names in op.inputs.items() if slot not in opdef.no_grad_inputs
            for i, n in enumerate(names) if n != EMPTY_VAR_NAME]


def _has_grad_op(op: Operator) -> bool:
    opdef = registry.get(op.type)
    return opdef.grad_maker is not None or (opdef.grad is not None and registry.has(op.type + "_grad"))


def _grad_op_spec(op: Operator, out_grads, in_grads):
    """``<type>_grad`` with its slots filled by the naming convention (see the module docstring)."""
    gdef = registry.get(op.type + "_grad")
    inputs: dict[str, list[str]] = {}
    for slot in gdef.inputs:
        if slot.name.endswith("@GRAD"):
            if slot.name[:-5] in out_grads:
                inputs[slot.name] = out_grads[slot.name[:-5]]
        elif slot.name in op.inputs or slot.name in op.outputs:
            inputs[slot.name] = list(op.inputs.get(slot.name, op.outputs.get(slot.name, [])))
    outputs = {slot.name: in_grads[slot.name[:-5]] for slot in gdef.outputs if slot.name[:-5] in in_grads}
    attrs = {k: v for k, v in op.attrs.items() if k not in ("op_callstack", "op_role")}
    return op.type + "_grad", inputs, outputs, attrs


def append_backward(loss: Variable, parameter_list: Iterable | None = None,
                    no_grad_set: Iterable | None = None) -> list[tuple[Parameter, Variable]]:
    """Append the backward pass of ``loss`` to its block; return ``[(parameter, gradient)]``.

    ``parameter_list`` limits the returned pairs (default: every trainable parameter that
    reaches the loss); ``no_grad_set`` names variables that get no gradient.

    >>> # params_grads = fj.append_backward(cost)   # then fetch "fc_0.w_0@GRAD"
    """
    block: Block = loss.block
    program = block.program
    no_grad = _names(no_grad_set)
    loss_index = max((i for i, op in enumerate(block.ops) if loss.name in op.output_arg_names), default=None)
    if loss_index is None:
        raise ValueError(f"no op of block {block.idx} computes the loss {loss.name!r}")
    forward = [op for op in block.ops[: loss_index + 1]
               if not int(op.attrs.get("op_role", 0)) & OP_ROLE_BACKWARD]

    def blocked(name: str) -> bool:
        var = block.var(name)
        return var.stop_gradient or name in no_grad or var.dtype is None or not dtypes.is_float(var.dtype)

    # Forward sweep: which variables carry a gradient (depend on a variable that needs one).
    produced = {n for op in forward for n in op.output_arg_names}
    carries: set[str] = set()
    for op in forward:
        for _, _, name in _differentiable_inputs(op):
            if name not in produced and not blocked(name):
                carries.add(name)
    for op in forward:
        if not _has_grad_op(op):
            continue
        if any(n in carries for _, _, n in _differentiable_inputs(op)):
            carries.update(n for n in op.output_arg_names if not blocked(n))
    if loss.name not in carries:
        raise ValueError(f"loss {loss.name!r} does not depend on any variable that needs a gradient "
                         "(are all its inputs data or stop_gradient?)")

    # Backward sweep: which ops lie on a path to the loss.
    reaches = {loss.name}
    on_path: list[Operator] = []
    for op in reversed(forward):
        if _has_grad_op(op) and reaches.intersection(op.output_arg_names) and \
                any(n in carries for _, _, n in _differentiable_inputs(op)):
            on_path.append(op)
            reaches.update(n for _, _, n in _differentiable_inputs(op) if n in carries)

    # How many grad ops will contribute to each variable's gradient.
    contributions: dict[str, int] = {}
    for op in on_path:
        for _, _, name in _differentiable_inputs(op):
            if name in reaches:
                contributions[name] = contributions.get(name, 0) + 1
    pending: dict[str, list[str]] = {}

    def create_grad_var(name: str, grad_name: str) -> None:
        var = block.var(name)
        block.create_var(grad_name, var.shape, var.dtype, var.lod_level)

    def flush(name: str) -> None:
        parts = pending.pop(name, None)
        if parts and (len(parts) > 1 or parts[0] != grad_var_name(name)):
            create_grad_var(name, grad_var_name(name))
            block.append_op("sum", {"X": parts}, {"Out": grad_var_name(name)})

    previous_role = program._op_role
    program._op_role = OP_ROLE_BACKWARD
    try:
        create_grad_var(loss.name, grad_var_name(loss.name))
        seed_inputs = {}
        if any(d < 0 for d in loss.shape):
            # a target of unknown dims (fluid.gradients of a batch of scores, WGAN-GP's penalty):
            # the seed takes its run-time shape through a shape op, as Paddle's calc_gradient does
            shape_name = loss.name + "_shape"
            if not block.has_var(shape_name):
                block.create_var(shape_name, (len(loss.shape),), "int32", 0, stop_gradient=True)
            block.append_op("shape", {"Input": loss.name}, {"Out": shape_name},
                            {"op_role": OP_ROLE_BACKWARD | OP_ROLE_LOSS})
            seed_inputs = {"ShapeTensor": shape_name}
        block.append_op("fill_constant", seed_inputs, outputs={"Out": grad_var_name(loss.name)}, attrs={
            "shape": list(loss.shape), "dtype": dtypes.to_enum(loss.dtype), "value": 1.0,
            "op_role": OP_ROLE_BACKWARD | OP_ROLE_LOSS})
        has_grad = {loss.name}
        renames = 0
        for op in on_path:
            for name in op.output_arg_names:
                flush(name)
            opdef = registry.get(op.type)
            out_grads = {slot: [grad_var_name(n) if n in has_grad else EMPTY_VAR_NAME for n in names]
                         for slot, names in op.outputs.items()}
            in_grads: dict[str, list[str]] = {}
            allowed = None if opdef.grad_maker is not None else {
                s.name[:-5] for s in registry.get(op.type + "_grad").outputs}
            for slot, fwd_names in op.inputs.items():
                if slot in opdef.no_grad_inputs or (allowed is not None and slot not in allowed):
                    continue
                out_names = []
                for n in fwd_names:
                    if n == EMPTY_VAR_NAME or n not in reaches or n == loss.name:
                        out_names.append(EMPTY_VAR_NAME)
                        continue
                    target = grad_var_name(n)
                    if contributions.get(n, 0) > 1:
                        target = f"{target}@RENAME@block{block.idx}@{renames}"
                        renames += 1
                    pending.setdefault(n, []).append(target)
                    create_grad_var(n, target)
                    has_grad.add(n)
                    out_names.append(target)
                if any(x != EMPTY_VAR_NAME for x in out_names):
                    in_grads[slot] = out_names
            if not in_grads:
                continue
            if opdef.grad_maker is not None:
                specs = opdef.grad_maker(op, out_grads, in_grads)
            else:
                specs = [_grad_op_spec(op, out_grads, in_grads)]
            for type_, inputs, outputs, attrs in specs:
                grad_op = block.append_op(type_, inputs, outputs, attrs)
                grad_op.attrs["op_callstack"] = op.attrs.get("op_callstack", [])
        for name in list(pending):
            flush(name)
    finally:
        program._op_role = previous_role

    wanted = _names(parameter_list) if parameter_list is not None else None
    pairs = []
    for param in program.all_parameters():
        if wanted is not None and param.name not in wanted:
            continue
        if wanted is None and not getattr(param, "trainable", True):
            continue
        if param.name in has_grad:
            pairs.append((param, block.var(grad_var_name(param.name))))
    return pairs


def gradients(targets, inputs, target_gradients=None, no_grad_set=None) -> list[Variable | None]:
    """Fluid's ``fluid.backward.gradients``: append the backward pass of ``targets`` (a Variable
    or a list of one) and return the gradient Variable of each of ``inputs`` (``None`` for an
    input the targets do not depend on). Inputs are differentiated even if they are data
    (``stop_gradient``), as Paddle does for the variables asked for.

    >>> # dx, = fj.gradients(y, [x]); exe.run(feed={"x": xs}, fetch_list=[dx])
    """
    from .errors import NotOfferedError

    targets = list(targets) if isinstance(targets, (list, tuple)) else [targets]
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if len(targets) != 1:
        raise NotOfferedError(f"gradients of {len(targets)} targets at once: pass one target "
                              "(their sum, e.g. layers.sums(targets), has the same input gradients)")
    if target_gradients is not None:
        raise NotOfferedError("gradients(target_gradients=...): seed gradients other than ones are not "
                              "offered; multiply the target by them before differentiating")
    block = targets[0].block
    saved = [(var, var.stop_gradient) for var in inputs]
    for var in inputs:
        var.stop_gradient = False
    try:
        append_backward(targets[0], parameter_list=[], no_grad_set=no_grad_set)
    finally:
        for var, flag in saved:
            var.stop_gradient = flag
    return [block.var(grad_var_name(v.name)) if block.has_var(grad_var_name(v.name)) else None for v in inputs]
