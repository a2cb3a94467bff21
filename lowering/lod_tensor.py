"""``LoDTensor``: an array plus its level-of-detail offsets, as held by a scope variable."""

from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np


class LoDTensor:
    """A tensor value with optional LoD (one list of offsets per level, Paddle's representation).

    Created empty by ``scope.var(name).get_mutable(LoDTensor)``; ``set`` gives it a value, which
    stays a device array until read (``np.asarray(t)``).

    >>> t = LoDTensor(); t.set(np.zeros((5, 3), "float32")); t.set_lod([[0, 2, 5]])
    >>> t.shape(), t.recursive_sequence_lengths()
    ((5, 3), [[2, 3]])
    """

    def __init__(self, value: Any = None, lod: Sequence[Sequence[int]] | None = None) -> None:
        self._value = value
        self._lod: list[list[int]] = [list(map(int, level)) for level in (lod or [])]

    def set(self, value: Any, place=None) -> None:
        """Hold ``value`` (a NumPy or JAX array); ``place`` puts it on that device."""
        if place is not None:
            value = jax.device_put(np.asarray(value) if not isinstance(value, jax.Array) else value,
                                   place.jax_device())
        self._value = value

    def value(self):
        """The held array (a ``jax.Array`` after a run), or None."""
        return self._value

    def _is_initialized(self) -> bool:
        return self._value is not None

    def shape(self) -> tuple[int, ...]:
        """The held array's shape (``()`` when empty)."""
        return tuple(np.shape(self._value)) if self._value is not None else ()

    @property
    def dtype(self):
        """The held array's dtype (None when empty)."""
        return self._value.dtype if self._value is not None else None

    def lod(self) -> list[list[int]]:
        """The offsets, one list per level."""
        return [list(level) for level in self._lod]

    def set_lod(self, lod: Sequence[Sequence[int]]) -> None:
        """Set the offsets, one list per level (``[[0, 2, 5]]``)."""
        self._lod = [list(map(int, level)) for level in lod]

    def recursive_sequence_lengths(self) -> list[list[int]]:
        """The sequence lengths of every level."""
        return [[b - a for a, b in zip(level, level[1:])] for level in self._lod]

    def set_recursive_sequence_lengths(self, lengths: Sequence[Sequence[int]]) -> None:
        """Set the LoD from sequence lengths (``[[2, 3]]``)."""
        lod = []
        for level in lengths:
            offsets = [0]
            for n in level:
                offsets.append(offsets[-1] + int(n))
            lod.append(offsets)
        self._lod = lod

    def numpy(self) -> np.ndarray:
        """The held value as a NumPy array."""
        if self._value is None:
            raise ValueError("this LoDTensor holds no value yet")
        return np.asarray(self._value)

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        return arr.astype(dtype) if dtype is not None else arr

    def __repr__(self) -> str:
        if self._value is None:
            return "LoDTensor(<empty>)"
        lod = f", lod={self._lod}" if self._lod else ""
        return f"LoDTensor(shape={self.shape()}, dtype={self.dtype}{lod})"
