"""``fluid.contrib``: of Fluid 1.x's contributed modules, ``mixed_precision`` is offered
(``fluid.contrib.mixed_precision.decorate``, :mod:`fluidjax.frontend.amp`); any other name raises
:class:`~fluidjax.ir.errors.NotOfferedError`."""

from ...ir.errors import NotOfferedError
from . import mixed_precision  # noqa: F401

REASON = ("of fluid.contrib, fluidjax offers mixed_precision (fluid.contrib.mixed_precision.decorate; "
          "fluidjax.amp); the other contributed modules (slim, quantization, the contrib layers, ...) "
          "are not offered")


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotOfferedError(f"fluid.contrib.{name}: {REASON}")
