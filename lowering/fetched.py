"""How a fetched value reaches the user: the rules for 0-d and one-element results.

Paddle 2.6 computes a mean, an accuracy or a full reduction as a 0-d tensor; Fluid 1.x gave them
shape ``[1]``, and Fluid scripts read them as ``avg_cost_value[0]``. Programs built through the
Fluid 1.x layers declare those results ``[1]`` and get that shape (``ir.shape.one_element_shape``);
a Paddle 2.x program's bytes declare ``[]``, and its fetched 0-d result is a NumPy 0-d array that
also answers ``[0]`` and ``[-1]`` — the only thing Fluid 1.x code did with a shape-``[1]`` result
that a 0-d array refuses. Everything else (``float(v)``,
``v.item()``, ``v.shape == ()``, arithmetic, ``np.mean``) is a plain 0-d array's, so Paddle 2.6
code sees what it expects too.

Fluid 1.x scripts also turn one-element arrays of any rank into numbers: ``"%.2f" % row`` for a
row of a ``[N, 1]`` prediction, ``float(acc)`` of a shape-``[1]`` accuracy. NumPy allowed that
until 2.x (deprecated in 1.25, an error since 2.4), so every fetched array is a
:class:`FetchedArray`: a NumPy array (its views and arithmetic results too) whose ``float()``,
``int()`` and ``complex()`` accept exactly one element, as NumPy 1.x did. Nothing else differs
from ``np.ndarray``; ``np.asarray(v)`` gives the plain array.

One Fluid 1.x idiom no 0-d array can serve: ``np.array(value)[0]`` (NumPy copies the value into a
plain 0-d array first). ``FLAGS_fetch_0d_as_1d`` (:mod:`.flags`) makes fetched 0-d results shape
``[1]``, as Fluid 1.x computed them, for scripts that do that.
"""

from __future__ import annotations

import numpy as np

from . import flags

__all__ = ["FetchedArray", "Scalar", "fetched_array"]


class FetchedArray(np.ndarray):
    """A fetched array whose one-element values convert to Python numbers at any rank."""

    def _one(self):
        if self.size != 1:
            raise TypeError(f"only one-element arrays can be converted to Python scalars (this one has shape "
                            f"{self.shape})")
        return self.view(np.ndarray).reshape(())[()]

    def __float__(self) -> float:
        return float(self._one())

    def __int__(self) -> int:
        return int(self._one())

    def __complex__(self) -> complex:
        return complex(self._one())

    def __repr__(self) -> str:
        return repr(self.view(np.ndarray))


class Scalar(FetchedArray):
    """A fetched 0-d array that Fluid 1.x code may index as ``value[0]`` (or ``value[-1]``)."""

    def __getitem__(self, key):
        if self.ndim == 0 and type(key) is int and key in (0, -1):
            return np.ndarray.__getitem__(self, ())
        return np.ndarray.__getitem__(self, key)


def fetched_array(value) -> np.ndarray:
    """``value`` as a NumPy array: 0-d results as :class:`Scalar` (shape [1] under
    ``FLAGS_fetch_0d_as_1d``), others as :class:`FetchedArray`."""
    array = np.asarray(value)
    if array.ndim == 0:
        return array.reshape(1).view(FetchedArray) if flags.fetch_0d_as_1d else array.view(Scalar)
    return array.view(FetchedArray)
