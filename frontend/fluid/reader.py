"""``fluid.reader`` / ``fluidjax.reader``: the reader decorators (``paddle.reader``'s: batch,
shuffle, buffered, ...) and Fluid's loaders that feed a program from Python (re-exports only)."""

from ..data_loader import DataLoader, PyReader
from ..reader import *  # noqa: F401,F403
from ..reader import __all__ as _decorators

__all__ = [*_decorators, "DataLoader", "PyReader"]
