"""Gradient merge (gradient accumulation): Paddle's ``paddle.incubate.optimizer.GradientMergeOptimizer``
and fleet's ``gradient_merge``: the parameters are updated once every ``k_steps`` runs, with the
gradients of those runs summed (``avg=True``: averaged) — ``k`` runs of batch ``b`` train as one
run of batch ``k * b`` would, in the memory of batch ``b``.

>>> # opt = fj.optimizer.GradientMergeOptimizer(fj.optimizer.Adam(1e-3), k_steps=4)
>>> # opt.minimize(loss)        # then exe.run(...) as usual: every 4th run updates

What ``minimize`` adds after the backward pass, as Paddle's builds it (so Paddle runs it too):

1. a step counter: persistable int32 ``gradient_merge_step`` (``[1]``, from 0), advanced by
   ``increment`` then ``elementwise_mod`` by ``gradient_merge_k``, and ``gradient_merge_cond =
   equal(step, gradient_merge_zero)``: true on every ``k``-th run;
2. for every parameter a persistable ``<param>@GRAD@GradientMerge`` (zeros from the startup
   program) and an ``elementwise_add`` of the run's gradient into it (op_role Backward, with
   ``op_role_var`` and Paddle's ``grad_merge_cond_name`` attribute);
3. a ``conditional_block`` on the condition holding: with ``avg``, ``scale`` of each merged
   gradient by ``1 / k``; the inner optimizer's ops (clipping, regularization, the update, as its
   ``apply_gradients`` builds them) on the merged gradients; ``fill_constant`` zeros back into
   them.

The step, the condition and the ``conditional_block`` carry op_role Optimize here (Paddle leaves
the first two Forward), so ``clone(for_test=True)`` drops them. The update runs under
``lax.cond``: the other ``k - 1`` runs do not compute it. The cost: one more copy of the
parameters (the merged gradients) in memory, and one ``elementwise_add`` per parameter per run.
"""

from __future__ import annotations

from ..ir import dtypes
from ..ir.names import OP_ROLE_BACKWARD
from ..ir.program import Program, default_startup_program
from ..ir.variable import Variable
from .clip import optimize_guard
from .control_flow_layers import cond, increment
from .framework import program_guard
from .initializer import Constant
from .lr_decay_layers import create_global_var
from .minimize import Minimizes
from .recompute import apply_gradients_of

__all__ = ["GradientMergeOptimizer"]


class GradientMergeOptimizer(Minimizes):
    """Wraps ``inner_optimizer``: gradients accumulate for ``k_steps`` runs, then one update.

    ``avg=True`` divides the sum by ``k_steps`` (the mean over the ``k`` runs, which for a mean
    loss is the gradient of the ``k``-times larger batch). The inner optimizer may be another
    wrapper (``RecomputeOptimizer``).
    """

    GRAD_MERGE_COND_NAME = "grad_merge_cond_name"

    def __init__(self, inner_optimizer, k_steps: int = 1, avg: bool = True) -> None:
        if inner_optimizer is None or not hasattr(inner_optimizer, "apply_gradients"):
            raise TypeError(f"GradientMergeOptimizer wraps an optimizer (fj.optimizer.Adam(...), ...), "
                            f"got {inner_optimizer!r}")
        self.inner_optimizer = inner_optimizer
        self._set_k_steps(k_steps)
        self.avg = bool(avg)
        self.type = "gradient_merge"
        self._optimize_ops = None

    def __getattr__(self, name: str):
        # The inner optimizer's learning rate and the like (get_lr, set_lr, ...).
        if name.startswith("__") or name == "inner_optimizer":
            raise AttributeError(name)
        return getattr(self.inner_optimizer, name)

    def _set_k_steps(self, k_steps: int) -> None:
        if isinstance(k_steps, bool) or not isinstance(k_steps, int) or k_steps <= 0:
            raise ValueError(f"k_steps must be a positive int, got {k_steps!r}")
        self.k_steps = k_steps

    def _set_avg(self, avg: bool) -> None:
        self.avg = bool(avg)

    def backward(self, loss: Variable, startup_program: Program | None = None, parameter_list=None,
                 no_grad_set=None, callbacks=None) -> list:
        """The inner optimizer's backward pass."""
        if not isinstance(loss, Variable):
            raise TypeError(f"backward needs the loss Variable, got {loss!r}")
        return self.inner_optimizer.backward(loss, startup_program, parameter_list, no_grad_set)

    def apply_optimize(self, loss: Variable, startup_program: Program | None, params_grads) -> list:
        return self.apply_gradients(params_grads, startup_program)

    # -- the ops ----------------------------------------------------------------------------------
    def apply_gradients(self, params_grads, startup_program: Program | None = None) -> list:
        """Accumulate ``params_grads`` into the merge variables; update on every ``k``-th run."""
        params_grads = [(p, g) for p, g in params_grads if g is not None]
        if not params_grads:
            raise ValueError("no (parameter, gradient) pairs to optimize: "
                             "does the loss depend on a trainable parameter?")
        main = params_grads[0][0].block.program
        startup = startup_program or default_startup_program()
        block = main.global_block()
        with program_guard(main, startup):
            with optimize_guard(block):
                condition = self._step_condition(block)
            merged = []
            for param, grad in params_grads:
                merge = block.create_var(f"{param.name}@GRAD@GradientMerge", param.shape, param.dtype,
                                         persistable=True, stop_gradient=True)
                Constant(0.0)(merge, startup.global_block())
                block.append_op("elementwise_add", {"X": grad, "Y": merge}, {"Out": merge}, {
                    "axis": -1, "op_role": OP_ROLE_BACKWARD, "op_role_var": [param.name, merge.name],
                    self.GRAD_MERGE_COND_NAME: condition.name})
                merged.append((param, merge))
            with optimize_guard(block):
                cond(condition, lambda: self._update(main, startup, merged))
        return self._optimize_ops

    def _step_condition(self, block) -> Variable:
        k = create_global_var([1], int(self.k_steps), "int32", persistable=True, force_cpu=True,
                              name="gradient_merge_k")
        zero = create_global_var([1], 0, "int32", persistable=True, force_cpu=True, name="gradient_merge_zero")
        step = create_global_var([1], 0, "int32", persistable=True, force_cpu=True, name="gradient_merge_step")
        condition = block.create_var("gradient_merge_cond", (1,), "bool", stop_gradient=True)
        increment(step, 1.0)
        block.append_op("elementwise_mod", {"X": step, "Y": k}, {"Out": step}, {"axis": -1})
        block.append_op("equal", {"X": step, "Y": zero}, {"Out": condition})
        return condition

    def _update(self, main: Program, startup: Program, merged) -> None:
        """The body of the conditional block (the current block while it runs)."""
        inside = main.current_block()
        if self.avg:
            for _, merge in merged:
                inside.append_op("scale", {"X": merge}, {"Out": merge}, {
                    "scale": 1.0 / self.k_steps, "bias": 0.0, "bias_after_scale": False,
                    "op_role": OP_ROLE_BACKWARD})
        # The inner optimizer appends its ops to the global block: they move into this one.
        outer = main.global_block()
        start = len(outer.ops)
        apply_gradients_of(self.inner_optimizer, list(merged), startup)
        moved = [outer.ops[i] for i in range(start, len(outer.ops))]
        for _ in moved:
            outer.remove_op(start)
        self._optimize_ops = [_append_copy(inside, op) for op in moved]
        for _, merge in merged:
            inside.append_op("fill_constant", outputs={"Out": merge}, attrs={
                "shape": list(merge.shape), "dtype": dtypes.to_enum(merge.dtype), "value": 0.0})


def _append_copy(block, op):
    """``op`` appended to ``block`` as it is (attributes, their types and its call stack)."""
    attrs = {k: v for k, v in op.attrs.items() if k != "op_callstack"}
    copy = block.append_op(op.type, {k: list(v) for k, v in op.inputs.items()},
                           {k: list(v) for k, v in op.outputs.items()}, attrs, infer_shape=False)
    copy.attr_types.update(op.attr_types)
    copy.attrs["op_callstack"] = list(op.attrs.get("op_callstack") or [])
    return copy
