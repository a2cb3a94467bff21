"""``fluid.dygraph``: not offered. fluidjax runs static programs; every name here raises
:class:`~fluidjax.ir.errors.NotOfferedError` saying so."""

from ...ir.errors import NotOfferedError

REASON = ("fluidjax runs Fluid's static graph (programs lowered to jax.jit); dygraph (eager mode) is "
          "not offered. Build the model with fluid.layers inside a Program, or use JAX directly for "
          "eager code")


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotOfferedError(f"fluid.dygraph.{name}: {REASON}")
