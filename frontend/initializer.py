"""Initializers append Paddle's init ops (``fill_constant``, ``uniform_random``, …) to a startup block."""

from __future__ import annotations

import math

from ..ir import dtypes
from ..ir.program import Block
from ..ir.variable import Variable


def fill_constant_attrs(shape, dtype, value) -> dict:
    """``fill_constant``'s attributes; integers also go in ``str_value`` so large ones stay exact."""
    attrs = {"shape": list(shape), "dtype": dtypes.to_enum(dtype), "value": float(value)}
    if not dtypes.is_float(dtype):
        attrs["str_value"] = str(int(value))
    return attrs


class Initializer:
    """Appends the op that gives ``var`` its initial value to ``block`` (a startup program's)."""

    def __call__(self, var: Variable, block: Block):
        raise NotImplementedError

    def _out(self, var: Variable, block: Block) -> Variable:
        """``var``'s twin in the startup block (same name, shape, dtype, persistable)."""
        return block.create_var(var.name, var.shape, var.dtype, var.lod_level, persistable=True,
                                stop_gradient=var.stop_gradient)


class Constant(Initializer):
    """Fill with ``value``."""

    def __init__(self, value: float = 0.0) -> None:
        self.value = value

    def __call__(self, var, block):
        out = self._out(var, block)
        return block.append_op("fill_constant", outputs={"Out": out}, attrs=fill_constant_attrs(
            var.shape, var.dtype, self.value))

    def __repr__(self):
        return f"Constant({self.value})"


class Uniform(Initializer):
    """Uniform in [low, high)."""

    def __init__(self, low: float = -1.0, high: float = 1.0, seed: int = 0) -> None:
        if low > high:
            raise ValueError(f"Uniform needs low <= high, got low={low}, high={high}")
        self.low, self.high, self.seed = low, high, seed

    def __call__(self, var, block):
        out = self._out(var, block)
        return block.append_op("uniform_random", outputs={"Out": out}, attrs={
            "shape": list(var.shape), "dtype": dtypes.to_enum(var.dtype), "min": float(self.low),
            "max": float(self.high), "seed": self.seed})


class Normal(Initializer):
    """Normal with mean ``loc`` and standard deviation ``scale``."""

    def __init__(self, loc: float = 0.0, scale: float = 1.0, seed: int = 0) -> None:
        self.loc, self.scale, self.seed = loc, scale, seed

    def __call__(self, var, block):
        out = self._out(var, block)
        return block.append_op("gaussian_random", outputs={"Out": out}, attrs={
            "shape": list(var.shape), "dtype": dtypes.to_enum(var.dtype), "mean": float(self.loc),
            "std": float(self.scale), "seed": self.seed})


class TruncatedNormal(Initializer):
    """Normal with mean ``loc`` and std ``scale``, cut at two standard deviations."""

    def __init__(self, loc: float = 0.0, scale: float = 1.0, seed: int = 0) -> None:
        self.loc, self.scale, self.seed = loc, scale, seed

    def __call__(self, var, block):
        out = self._out(var, block)
        return block.append_op("truncated_gaussian_random", outputs={"Out": out}, attrs={
            "shape": list(var.shape), "dtype": dtypes.to_enum(var.dtype), "mean": float(self.loc),
            "std": float(self.scale), "seed": self.seed})


def _fans(shape) -> tuple[int, int]:
    """Paddle's fan-in / fan-out: rows/cols for matrices, channels × receptive field for kernels."""
    if not shape:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


class Xavier(Initializer):
    """Glorot: uniform in ±sqrt(6 / (fan_in + fan_out)), or normal with std sqrt(2 / (fan_in + fan_out))."""

    def __init__(self, uniform: bool = True, fan_in: float | None = None, fan_out: float | None = None,
                 seed: int = 0) -> None:
        self.uniform, self.fan_in, self.fan_out, self.seed = uniform, fan_in, fan_out, seed

    def __call__(self, var, block):
        f_in, f_out = _fans(var.shape)
        f_in = self.fan_in if self.fan_in is not None else f_in
        f_out = self.fan_out if self.fan_out is not None else f_out
        if self.uniform:
            limit = math.sqrt(6.0 / (f_in + f_out))
            return Uniform(-limit, limit, self.seed)(var, block)
        return Normal(0.0, math.sqrt(2.0 / (f_in + f_out)), self.seed)(var, block)


class MSRA(Initializer):
    """He/Kaiming: uniform in ±sqrt(6 / fan_in), or normal with std sqrt(2 / fan_in)."""

    def __init__(self, uniform: bool = True, fan_in: float | None = None, seed: int = 0) -> None:
        self.uniform, self.fan_in, self.seed = uniform, fan_in, seed

    def __call__(self, var, block):
        f_in = self.fan_in if self.fan_in is not None else _fans(var.shape)[0]
        if self.uniform:
            limit = math.sqrt(6.0 / f_in)
            return Uniform(-limit, limit, self.seed)(var, block)
        return Normal(0.0, math.sqrt(2.0 / f_in), self.seed)(var, block)


# Paddle's long names.
ConstantInitializer = Constant
UniformInitializer = Uniform
NormalInitializer = Normal
TruncatedNormalInitializer = TruncatedNormal
XavierInitializer = Xavier
MSRAInitializer = MSRA
