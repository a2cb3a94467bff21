"""``fj.to_flax``: a program as a ``flax.linen`` Module (docs/jax.md). Needs flax installed.

The Module wraps :func:`fluidjax.to_jax`'s function: trainable parameters are the ``params``
collection, the other persistable values (batch-norm statistics) the ``batch_stats`` collection,
both keyed by the program's variable names and initialised from the scope's values.
"""

from __future__ import annotations

from typing import Sequence

from ..ir.errors import NotOfferedError
from ..ir.program import Program
from ..ir.variable import Variable
from ..lowering.jax_function import to_jax
from ..lowering.scope import Scope


def to_flax(program: Program | None = None, feed: Sequence[str | Variable] = (),
            fetch_list: Sequence[str | Variable] = (), scope: Scope | None = None, for_test: bool = False):
    """``program`` as a ``flax.linen`` Module: ``module.init(key, *inputs)`` gives ``{"params": ...,
    "batch_stats": ...}`` holding the scope's current values (``key`` is not used to draw them),
    ``module.apply(variables, *inputs, rngs={"dropout": key}, mutable=["batch_stats"])`` runs the
    program (exactly as :func:`fluidjax.to_jax`'s ``fn``) and returns the list of fetches (and the
    updated ``batch_stats`` when that collection is mutable). A program without random ops needs
    no ``rngs``.

    >>> # module = fj.to_flax(main, feed=["x"], fetch_list=[y]); variables = module.init(key, xs)
    >>> # (y_value,), updates = module.apply(variables, xs, rngs={"dropout": key}, mutable=["batch_stats"])
    """
    try:
        import flax.linen as nn
    except ImportError:
        raise NotOfferedError("fj.to_flax needs flax: pip install flax") from None
    fn, variables = to_jax(program, feed, fetch_list, scope=scope, for_test=for_test)
    initial_params, initial_state = variables["params"], variables["state"]

    class FluidProgram(nn.Module):
        """A fluidjax program: ``__call__(*inputs)`` returns its fetches, in order."""

        @nn.compact
        def __call__(self, *inputs):
            params = {n: self.param(n, lambda _key, v=v: v) for n, v in initial_params.items()}
            stats = {n: self.variable("batch_stats", n, lambda v=v: v) for n, v in initial_state.items()}
            rng = self.make_rng("dropout") if fn.needs_rng and self.has_rng("dropout") else None
            outputs, new_state = fn({"params": params, "state": {n: s.value for n, s in stats.items()}},
                                    *inputs, rng=rng)
            if self.is_mutable_collection("batch_stats") and not self.is_initializing():
                for name, value in new_state.items():
                    if name in stats:
                        stats[name].value = value
            return outputs

    FluidProgram.__name__ = FluidProgram.__qualname__ = "FluidProgram"
    return FluidProgram()
