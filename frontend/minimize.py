"""``minimize``, once for every optimizer and every optimizer wrapper (recompute, gradient merge):
Fluid's ``backward`` then ``apply_optimize``, each class supplying those two."""

from __future__ import annotations

from ..ir.program import Program
from ..ir.variable import Variable


class Minimizes:
    """Gives a class with ``backward`` and ``apply_optimize`` Fluid's ``minimize``."""

    def minimize(self, loss: Variable, startup_program: Program | None = None, parameter_list=None,
                 no_grad_set=None, *, parameters=None) -> tuple[list, list]:
        """Append the backward pass and the optimizer ops of ``loss`` to its program.

        Returns ``(optimize_ops, params_grads)``. ``startup_program`` (default: the default
        startup program) receives the fill ops of the accumulators and the learning rate.
        """
        if not isinstance(loss, Variable):
            raise TypeError(f"minimize needs the loss Variable, got {loss!r}")
        params = parameters if parameters is not None else parameter_list
        params_grads = self.backward(loss, startup_program, params, no_grad_set)
        ops = self.apply_optimize(loss, startup_program, params_grads)
        return ops, params_grads
