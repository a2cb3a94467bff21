"""How a fetched value reaches the user: the one rule for 0-d results.

Paddle 2.6 computes a mean, an accuracy or a full reduction as a 0-d tensor; Fluid 1.x gave them
shape ``[1]``, and Fluid scripts read them as ``avg_cost_value[0]``. fluidjax's programs follow
Paddle 2.6 (the op semantics, the shapes in the program, what Paddle runs), and a fetched 0-d
result is a NumPy 0-d array that also answers ``[0]`` and ``[-1]`` — the only thing Fluid 1.x
code did with a shape-``[1]`` result that a 0-d array refuses. Everything else (``float(v)``,
``v.item()``, ``v.shape == ()``, arithmetic, ``np.mean``) is a plain 0-d array's, so Paddle 2.6
code sees what it expects too.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Scalar", "fetched_array"]


class Scalar(np.ndarray):
    """A fetched 0-d array that Fluid 1.x code may index as ``value[0]`` (or ``value[-1]``)."""

    def __getitem__(self, key):
        if self.ndim == 0 and type(key) is int and key in (0, -1):
            return np.ndarray.__getitem__(self, ())
        return np.ndarray.__getitem__(self, key)

    def __repr__(self) -> str:
        return repr(self.view(np.ndarray))


def fetched_array(value) -> np.ndarray:
    """``value`` as a NumPy array; 0-d results as :class:`Scalar`."""
    array = np.asarray(value)
    return array.view(Scalar) if array.ndim == 0 else array
