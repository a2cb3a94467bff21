"""Initializers append Paddle's init ops (``fill_constant``, ``uniform_random``, …) to a startup block."""

from __future__ import annotations

import contextlib
import math

import numpy as np

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

    def __init__(self, value: float = 0.0, force_cpu: bool = False) -> None:
        self.value = value
        self.force_cpu = force_cpu   # Fluid's; placement is XLA's here

    def __call__(self, var, block):
        out = self._out(var, block)
        return block.append_op("fill_constant", outputs={"Out": out}, attrs=fill_constant_attrs(
            var.shape, var.dtype, self.value))

    def __repr__(self):
        return f"Constant({self.value})"


class Uniform(Initializer):
    """Uniform in [low, high)."""

    def __init__(self, low: float = -1.0, high: float = 1.0, seed: int = 0, diag_num: int = 0, diag_step: int = 0,
                 diag_val: float = 1.0) -> None:
        if low > high:
            raise ValueError(f"Uniform needs low <= high, got low={low}, high={high}")
        self.low, self.high, self.seed = low, high, seed
        # Fluid's: the first diag_num elements at stride diag_step (of the flattened value) set to diag_val
        self.diag_num, self.diag_step, self.diag_val = int(diag_num), int(diag_step), float(diag_val)

    def __call__(self, var, block):
        out = self._out(var, block)
        attrs = {"shape": list(var.shape), "dtype": dtypes.to_enum(var.dtype), "min": float(self.low),
                 "max": float(self.high), "seed": self.seed}
        if self.diag_num:
            attrs.update(diag_num=self.diag_num, diag_step=self.diag_step, diag_val=self.diag_val)
        return block.append_op("uniform_random", outputs={"Out": out}, attrs=attrs)


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


_ASSIGN_FIELDS = {"float32": "fp32_values", "float64": "fp64_values", "int32": "int32_values",
                  "int64": "int64_values", "bool": "bool_values"}


class NumpyArray(Initializer):
    """The values of a NumPy array (Fluid's ``NumpyArrayInitializer``: an ``assign_value`` op in
    the startup program; the array's shape must be the variable's)."""

    def __init__(self, value) -> None:
        self.value = np.asarray(value)

    def __call__(self, var, block):
        dtype = np.dtype(dtypes.to_numpy(var.dtype)).name
        if dtype not in _ASSIGN_FIELDS:
            raise TypeError(f"NumpyArrayInitializer: {var.name!r} is {var.dtype}; assign_value holds "
                            f"{', '.join(_ASSIGN_FIELDS)}")
        if tuple(self.value.shape) != tuple(var.shape):
            raise ValueError(f"NumpyArrayInitializer: the array has shape {list(self.value.shape)}, "
                             f"{var.name!r} has {list(var.shape)}")
        out = self._out(var, block)
        values = self.value.astype(dtype).reshape(-1)
        return block.append_op("assign_value", outputs={"Out": out}, attrs={
            "shape": list(var.shape), "dtype": dtypes.to_enum(var.dtype),
            _ASSIGN_FIELDS[dtype]: [v.item() for v in values]})


class Bilinear(Initializer):
    """Fluid's ``BilinearInitializer`` for a ``conv2d_transpose`` filter [C, 1 or C, K, K]: element
    i (flat) gets (1 - |x/f - c|)(1 - |y/f - c|) with f = ceil(K / 2), c = (2f - 1 - f mod 2) / (2f),
    x = i mod K and y = (i / K) mod K. As Fluid 1.x (on Python 3) and Paddle 2.6 compute it, i / K
    is a true division, so y is fractional: not the textbook bilinear kernel, but the numbers
    Fluid-trained models started from."""

    def __call__(self, var, block):
        shape = tuple(var.shape)
        if len(shape) != 4 or shape[2] != shape[3]:
            raise ValueError(f"BilinearInitializer: {var.name!r} must be a 4-D filter with square kernels, "
                             f"got shape {list(shape)}")
        k = shape[3]
        f = math.ceil(k / 2)
        c = (2 * f - 1 - f % 2) / (2.0 * f)
        i = np.arange(int(np.prod(shape)), dtype=np.float64)
        x, y = i % k, (i / k) % k
        weight = ((1 - np.abs(x / f - c)) * (1 - np.abs(y / f - c))).reshape(shape)
        return NumpyArray(weight.astype(dtypes.to_numpy(var.dtype)))(var, block)


_ON_CPU = [False]


def force_init_on_cpu() -> bool:
    """Whether initializers run inside :func:`init_on_cpu` (Fluid 1.x). Under fluidjax every
    startup value is made where the startup program runs; the flag is kept for scripts that read it."""
    return _ON_CPU[0]


@contextlib.contextmanager
def init_on_cpu():
    """Fluid 1.x's ``with fluid.initializer.init_on_cpu():`` (initializers placed on the CPU).
    Accepted; placement changes nothing here (a startup program's values are made on the host
    or the executor's device and copied where a run needs them)."""
    before, _ON_CPU[0] = _ON_CPU[0], True
    try:
        yield
    finally:
        _ON_CPU[0] = before


# Paddle's long names.
ConstantInitializer = Constant
UniformInitializer = Uniform
NormalInitializer = Normal
TruncatedNormalInitializer = TruncatedNormal
XavierInitializer = Xavier
MSRAInitializer = MSRA
NumpyArrayInitializer = NumpyArray
BilinearInitializer = Bilinear
