"""``fluid.memory_optimize`` and ``fluid.release_memory``: deprecated no-ops, as in Fluid 1.6+.

Fluid 1.6 stopped rewriting programs in these calls (its executor reuses memory by default) and
warned that they do nothing; fluidjax does the same: XLA plans the memory of a compiled step
(buffer reuse, donation of the state). Each warns once per process.
"""

from __future__ import annotations

import warnings

__all__ = ["memory_optimize", "release_memory"]

_warned: set[str] = set()


def _warn_once(what: str, message: str) -> None:
    if what not in _warned:
        _warned.add(what)
        warnings.warn(message, DeprecationWarning, stacklevel=3)


def memory_optimize(input_program, skip_opt_set=None, print_log: bool = False, level: int = 0,
                    skip_grads: bool = True) -> None:
    """Does nothing (deprecated in Fluid 1.6+): XLA plans the step's memory."""
    _warn_once("memory_optimize", "Caution! paddle.fluid.memory_optimize() is deprecated and does nothing: "
               "fluidjax's compiled steps reuse memory as XLA plans them (as Fluid 1.6+'s executor did by default)")


def release_memory(input_program, skip_opt_set=None) -> None:
    """Does nothing (deprecated in Fluid 1.6+)."""
    _warn_once("release_memory", "paddle.fluid.release_memory() is deprecated and does nothing: XLA frees a "
               "step's intermediate buffers itself")
