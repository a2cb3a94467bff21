"""The names of Fluid 1.8's ``fluid.layers`` that fluidjax does not offer, each with the reason.

Every name of Fluid 1.8's ``paddle.fluid.layers`` exists in ``fluidjax.layers``
(``tests/fluid18_layers.txt`` lists them; ``tests/test_fluid1_layers_coverage.py`` checks it). The
names here exist so that a script using one fails with a
:class:`~fluidjax.ir.errors.NotOfferedError` that says what is missing and why, when the layer is
called, never with an ``AttributeError``. docs/fluid1.md has the summary.
"""

from __future__ import annotations

from typing import Callable

from ..ir.errors import NotOfferedError

#: name -> why fluidjax does not offer it.
REFUSED: dict[str, str] = {}


def _refused(name: str, reason: str) -> Callable:
    def layer(*args, **kwargs):
        raise NotOfferedError(f"fluid.layers.{name} is not offered by fluidjax: {reason} (docs/fluid1.md)")

    layer.__name__ = layer.__qualname__ = name
    layer.__doc__ = f"Not offered: {reason}. Calling it raises NotOfferedError."
    layer.__fluidjax_not_offered__ = reason
    return layer


for _name, _reason in REFUSED.items():
    globals()[_name] = _refused(_name, _reason)

__all__ = list(REFUSED)
