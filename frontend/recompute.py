"""Recomputation (Fluid 1.8's ``RecomputeOptimizer``, Paddle's fleet ``recompute``): keep only the
checkpoints of the forward pass and compute the activations between them again in the backward.

>>> # opt = fj.optimizer.RecomputeOptimizer(fj.optimizer.Adam(1e-3))
>>> # opt._set_checkpoints([h6, h12, h18])          # Variables (or names) of the forward pass
>>> # opt.minimize(loss)

What ``minimize`` does to the program is what Paddle's ``append_backward(..., checkpoints=...)``
does (``_append_backward_ops_with_checkpoints_``), so Paddle runs the result too:

1. every training-mode ``dropout`` without a ``Seed`` input gets one, from a ``seed`` op inserted
   before it (its output is kept), so the recomputed dropout draws the same mask;
2. the forward ops are cut into *segments*: from the first reader of checkpoint *i* to the op
   that computes checkpoint *i + 1*, and from the first op to the first segment; the ops after
   the last checkpoint (the loss) are not recomputed;
3. the ordinary backward pass is appended (``append_backward``, ``<type>_grad`` ops as always);
4. for every segment whose values the backward reads, copies of its forward ops are inserted
   just before the first backward op that reads one, with op_role Backward, their variables
   renamed ``<name>.subprog_<n>`` (``n`` counts the segments from the last, as Paddle's), and
   the backward ops read the renamed values. Checkpoints, parameters, fed data, ``seed`` outputs
   and values read across segments are not renamed: those are the values that stay in memory.

Every random op of a segment (see :func:`draws_random_numbers`) and its copy carry the same
``recompute_key`` number; the lowering gives the copy its forward op's key, so the recomputation
draws the forward's numbers (noise, ``randint`` indices, ``sampling_id``, crops, sampled losses),
not only dropout's mask, and the gradients are those of the forward pass that ran.

The copies carry the attribute ``recompute_segment`` (``n``), which Paddle ignores: fluidjax's
lowering runs each such group behind ``lax.optimization_barrier`` on its inputs and on the values
the backward has just computed, so XLA neither merges it with the forward computation (CSE) nor
schedules it early, and frees each forward activation after its last forward use. Two
differences from Paddle: a copy never writes a persistable variable again (a recomputed
``batch_norm`` does not update the running statistics twice), and a copy's outputs that are kept
anyway are written to renamed variables too, so the backward reads the forward's values there.

The cost is one more forward computation of every segment (about a third more arithmetic for a
network of matmuls); the saving is every activation inside the segments. ``docs/training.md``
has the figures.
"""

from __future__ import annotations

import inspect
from typing import Sequence

from ..ir import registry, unique_name
from ..ir.errors import NotOfferedError
from ..ir.names import OP_ROLE_BACKWARD, OP_ROLE_OPTIMIZE, RECOMPUTE_KEY_ATTR, RECOMPUTE_SEGMENT_ATTR
from ..ir.program import Block, Operator, Program
from ..ir.variable import Variable, names_of
from .minimize import Minimizes

__all__ = ["RecomputeOptimizer", "recompute_segments", "apply_gradients_of"]

_BLOCK_ATTR_TYPES = frozenset({registry.ATTR_TYPES["block"], registry.ATTR_TYPES["blocks"]})


class RecomputeOptimizer(Minimizes):
    """Wraps an optimizer: its backward pass recomputes the forward between checkpoints.

    ``_set_checkpoints([vars])`` (Variables of the forward pass, or their names) must be called
    before ``minimize``/``backward``. Everything else (``apply_gradients``, ``apply_optimize``,
    the learning rate) is the inner optimizer's. The inner optimizer may be another wrapper
    (``GradientMergeOptimizer``), and a ``GradientMergeOptimizer`` may wrap this one.
    """

    def __init__(self, optimizer) -> None:
        if optimizer is None or not hasattr(optimizer, "apply_optimize"):
            raise TypeError(f"RecomputeOptimizer wraps an optimizer (fj.optimizer.Adam(...), ...), got {optimizer!r}")
        self._optimizer = optimizer
        self._checkpoints: list[str] | None = None
        self.type = "recompute"

    def __getattr__(self, name: str):
        # The inner optimizer's learning rate, accumulators, get_lr/set_lr (as Paddle delegates them).
        if name.startswith("__") or name in ("_optimizer", "_checkpoints"):
            raise AttributeError(name)
        return getattr(self._optimizer, name)

    def _set_checkpoints(self, checkpoints: Sequence[Variable | str]) -> None:
        """The variables kept in memory; the forward between two of them is recomputed."""
        if isinstance(checkpoints, (Variable, str)) or not isinstance(checkpoints, (list, tuple)):
            raise TypeError(f"_set_checkpoints needs a list of Variables (or names), got {checkpoints!r}")
        self._checkpoints = names_of(checkpoints, "_set_checkpoints' checkpoints")

    def _get_checkpoints(self) -> list[str]:
        return list(self._checkpoints or [])

    def load(self, state_dict) -> None:
        raise NotOfferedError("RecomputeOptimizer.load: load the program's persistable variables instead "
                              "(fj.io.load_persistables)")

    def backward(self, loss: Variable, startup_program: Program | None = None, parameter_list=None,
                 no_grad_set=None, callbacks=None, checkpoints=None) -> list:
        """The inner optimizer's backward pass, rewritten to recompute the segments."""
        if checkpoints is not None:
            self._set_checkpoints(checkpoints)
        if self._checkpoints is None:
            raise ValueError("RecomputeOptimizer: call _set_checkpoints([...]) before minimize/backward")
        block = loss.block
        if block.idx != 0:
            raise NotOfferedError("RecomputeOptimizer: the loss must be in the program's global block")
        add_dropout_seeds(block, _forward_ops(block, loss))
        loss_op = block.ops[max(i for i, op in enumerate(block.ops) if loss.name in op.output_arg_names)]
        params_grads = self._optimizer.backward(loss, startup_program, parameter_list, no_grad_set)
        # The forward as the inner backward left it (fj.amp inserts its casts there first): the ops
        # before the first backward op after the loss's.
        at = block.ops.index(loss_op)
        first = next(i for i in range(at, len(block.ops))
                     if int(block.ops[i].attrs.get("op_role", 0)) & OP_ROLE_BACKWARD)
        forward = [op for op in block.ops[:first]
                   if not int(op.attrs.get("op_role", 0)) & (OP_ROLE_BACKWARD | OP_ROLE_OPTIMIZE)]
        backward = [op for op in block.ops[first:] if int(op.attrs.get("op_role", 0)) & OP_ROLE_BACKWARD]
        recompute_backward(block, forward, self._checkpoints, backward)
        return params_grads

    def apply_gradients(self, params_grads, startup_program: Program | None = None) -> list:
        return apply_gradients_of(self._optimizer, params_grads, startup_program)

    def apply_optimize(self, loss: Variable, startup_program: Program | None, params_grads) -> list:
        return self._optimizer.apply_optimize(loss, startup_program, params_grads)

    def __repr__(self) -> str:
        return f"RecomputeOptimizer({self._optimizer!r}, checkpoints={self._checkpoints!r})"


def apply_gradients_of(optimizer, params_grads, startup_program: Program | None) -> list:
    """``optimizer.apply_gradients`` with the startup program where it takes one (an
    ``fj.amp`` optimizer takes the one its ``backward`` was given)."""
    try:
        takes_startup = len(inspect.signature(optimizer.apply_gradients).parameters) > 1
    except (TypeError, ValueError):
        takes_startup = True
    if takes_startup:
        return optimizer.apply_gradients(params_grads, startup_program)
    return optimizer.apply_gradients(params_grads)


# -- the rewrite --------------------------------------------------------------------------------------
def _forward_ops(block: Block, loss: Variable) -> list[Operator]:
    """The ops up to the one that computes the loss, without backward and optimizer ops."""
    last = max((i for i, op in enumerate(block.ops) if loss.name in op.output_arg_names), default=None)
    if last is None:
        raise ValueError(f"no op of block {block.idx} computes the loss {loss.name!r}")
    return [op for op in block.ops[: last + 1]
            if not int(op.attrs.get("op_role", 0)) & (OP_ROLE_BACKWARD | OP_ROLE_OPTIMIZE)]


def add_dropout_seeds(block: Block, forward: Sequence[Operator]) -> None:
    """Give every training-mode ``dropout`` without a ``Seed`` a ``seed`` op's output (Paddle's
    ``modify_forward_desc_for_recompute``): the recomputed dropout then draws the same mask."""
    for op in forward:
        if op.type != "dropout" or op.inputs.get("Seed") or op.attrs.get("is_test"):
            continue
        fixed = bool(op.attrs.get("fix_seed")) and int(op.attrs.get("seed", 0) or 0)
        name = unique_name.generate(unique_name.generate("seed") + ".tmp")
        var = block.create_var(name, (1,), "int32", stop_gradient=True)
        block.insert_op(block.ops.index(op), "seed", outputs={"Out": var},
                        attrs={"seed": int(op.attrs.get("seed", 0)) if fixed else 0, "force_cpu": True,
                               "op_role": int(op.attrs.get("op_role", 0))})
        op.inputs["Seed"] = [name]
        for attr in ("fix_seed", "seed"):
            if attr in op.attrs:
                del op.attrs[attr]
                op.attr_types.pop(attr, None)


class _Stats:
    """Paddle's ``ProgramStats``: for each variable, the forward ops (by index) that read and write it."""

    def __init__(self, block: Block, ops: Sequence[Operator]) -> None:
        self.block, self.ops = block, list(ops)
        self.readers: dict[str, list[int]] = {}
        self.writers: dict[str, list[int]] = {}
        for i, op in enumerate(self.ops):
            for name in op.input_arg_names:
                self.readers.setdefault(name, []).append(i)
                self.writers.setdefault(name, [])
            for name in op.output_arg_names:
                self.writers.setdefault(name, []).append(i)
                self.readers.setdefault(name, [])

    def persistable(self, name: str) -> bool:
        var = self.block.find_var(name)
        return var is not None and var.persistable

    def sort_checkpoints(self, names: Sequence[str]) -> list[str]:
        known = [n for n in dict.fromkeys(names) if n in self.writers]
        return sorted(known, key=lambda n: max(self.writers[n], default=-1))

    def crossing(self, begin: int, end: int) -> set[str]:
        """Values of the segment [begin, end) read after it, or read in it and made before it."""
        out = set()
        for op in self.ops[begin:end]:
            out.update(n for n in op.output_arg_names if any(i >= end for i in self.readers.get(n, ())))
            out.update(n for n in op.input_arg_names if any(i < begin for i in self.writers.get(n, ())))
        return out

    def inputs(self) -> set[str]:
        """Non-persistable variables the forward reads and never writes (the fed data)."""
        return {n for n, w in self.writers.items() if not w and self.readers[n] and not self.persistable(n)}

    def amp_cast_start(self, begin: int) -> int:
        """``begin`` moved back over casts of persistable variables (AMP's casts of parameters),
        which belong to the segment that uses them (Paddle's ``_update_segment_start``)."""
        while begin > 0:
            op = self.ops[begin - 1]
            if op.type == "cast" and self.persistable(op.input_arg_names[0]):
                begin -= 1
            else:
                break
        return begin


def recompute_segments(stats: _Stats, checkpoints: list[str]) -> list[tuple[int, int]]:
    """Paddle's segments: ``[first reader of ckpt i, writer of ckpt i+1 + 1)`` for consecutive
    checkpoints, and ``[0, start of the first)``; one checkpoint makes ``[0, its writer + 1)``."""
    segments: list[tuple[int, int]] = []
    if len(checkpoints) == 1:
        last = max(stats.writers[checkpoints[0]], default=-1)
        if last > 0:
            segments.append((0, last + 1))
    else:
        for first, second in zip(checkpoints, checkpoints[1:]):
            lo = min(stats.readers[first], default=len(stats.ops))
            hi = max(stats.writers[second], default=-1)
            if lo < hi:
                segments.append((stats.amp_cast_start(lo), hi + 1))
    if segments and segments[0][0] != 0:
        segments.insert(0, (0, segments[0][0]))
    return segments


def recompute_backward(block: Block, forward: Sequence[Operator], checkpoints: Sequence[str],
                       backward: Sequence[Operator]) -> list[tuple[int, int]]:
    """Insert the recomputation of each segment of ``forward`` before the ``backward`` ops that
    read its values, and make them read the recomputed ones; return the segments."""
    stats = _Stats(block, forward)
    checkpoints = stats.sort_checkpoints(checkpoints)
    segments = recompute_segments(stats, checkpoints)
    held = set(checkpoints) | stats.inputs()
    for begin, end in segments:
        held |= stats.crossing(begin, end)
    held.update(n for op in forward if op.type == "seed" for n in op.output_arg_names)
    backward = list(backward)
    for number, (begin, end) in enumerate(reversed(segments)):
        seg_ops = stats.ops[begin:end]
        for op in seg_ops:
            if any(t in _BLOCK_ATTR_TYPES for t in op.attr_types.values()):
                raise NotOfferedError(f"RecomputeOptimizer: op {op.type!r} at {op.location} runs a sub-block; "
                                      "choose checkpoints that leave control flow outside the recomputed segments")
        suffix = f".subprog_{number}"
        renamed = {n: n + suffix for op in seg_ops for n in op.input_arg_names + op.output_arg_names
                   if n not in held and not stats.persistable(n)}
        copies = [op for op in seg_ops
                  if any(n not in held and not stats.persistable(n) for n in op.output_arg_names)]
        readers = [i for i, op in enumerate(backward) if renamed.keys() & set(op.input_arg_names)]
        if not copies or not readers:
            continue
        for name, new in renamed.items():
            _declare_like(block, name, new)
        mark_random_ops(block, copies)
        first = backward[readers[0]]
        position = block.ops.index(first)
        for offset, op in enumerate(copies):
            _insert_copy(block, position + offset, op, renamed, suffix, number)
        for op in backward[readers[0]:]:
            for slot, names in op.inputs.items():
                if any(n in renamed for n in names):
                    op.inputs[slot] = [renamed.get(n, n) for n in names]
    return segments


def draws_random_numbers(op: Operator) -> bool:
    """Whether ``op`` draws random numbers: its registry entry says ``random`` or declares a
    ``seed`` attribute (the executor's own test for a program that needs a key)."""
    if not registry.has(op.type):
        return "seed" in op.attrs
    opdef = registry.get(op.type)
    return bool(opdef.random) or "seed" in opdef.attrs or "seed" in op.attrs


def mark_random_ops(block: Block, ops: Sequence[Operator]) -> None:
    """Give every random op of ``ops`` (forward ops about to be copied) a number of its own in the
    attribute ``recompute_key``; the copy inherits it, and the lowering gives the copy the key of
    the forward op with the same number, so the recomputation draws the forward's numbers."""
    taken = [int(op.attrs[RECOMPUTE_KEY_ATTR]) for op in block.ops if RECOMPUTE_KEY_ATTR in op.attrs]
    number = max(taken, default=0)
    for op in ops:
        if draws_random_numbers(op) and RECOMPUTE_KEY_ATTR not in op.attrs:
            number += 1
            op.set_attr(RECOMPUTE_KEY_ATTR, number, "int")


def _declare_like(block: Block, name: str, new: str) -> Variable:
    var = block.var(name)
    return block.create_var(new, var.shape, var.dtype, var.lod_level, type=var.type,
                            stop_gradient=var.stop_gradient)


def _insert_copy(block: Block, position: int, op: Operator, renamed: dict, suffix: str, number: int) -> Operator:
    """A copy of ``op`` at ``position`` reading ``renamed`` values and writing only renamed variables."""
    inputs = {slot: [renamed.get(n, n) for n in names] for slot, names in op.inputs.items()}
    outputs = {}
    for slot, names in op.outputs.items():
        outs = []
        for n in names:
            if n not in renamed:          # a kept value or a persistable one: the copy leaves it alone
                renamed_out = n + suffix
                if not block.has_var(renamed_out):
                    _declare_like(block, n, renamed_out)
                outs.append(renamed_out)
            else:
                outs.append(renamed[n])
        outputs[slot] = outs
    attrs = {k: v for k, v in op.attrs.items() if k not in ("op_callstack", "op_role")}
    attrs["op_role"] = OP_ROLE_BACKWARD
    attrs[RECOMPUTE_SEGMENT_ATTR] = number
    copy = block.insert_op(position, op.type, inputs, outputs, attrs, infer_shape=False)
    for name, type_id in op.attr_types.items():
        if name not in ("op_role",):
            copy.attr_types[name] = type_id
    copy.attrs["op_callstack"] = list(op.attrs.get("op_callstack") or [])
    return copy
