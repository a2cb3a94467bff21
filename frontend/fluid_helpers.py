"""Fluid 1.x's small helper modules that scripts import by path: ``fluid.layers.utils`` (nested
structures), ``fluid.wrapped_decorator``, ``fluid.log_helper``, ``fluid.layers.layer_function_generator``'s
decorators, ``fluid.layers.math_op_patch`` and ``fluid.contrib.memory_usage``. Fluid's module paths
(``frontend/fluid/paths.py``) re-export these; the code is here, written for fluidjax.

>>> flatten([1, (2, {"a": 3})])
[1, 2, 3]
"""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from collections.abc import Sequence
from typing import Callable

from ..ir import dtypes
from .rnn_cells import assert_same_structure, flatten, map_structure, pack_sequence_as

__all__ = ["convert_to_list", "is_sequence", "flatten", "pack_sequence_as", "map_structure",
           "hold_mutable_vars", "copy_mutable_vars", "assert_same_structure", "wrap_decorator",
           "signature_safe_contextmanager", "get_logger", "deprecated", "autodoc", "templatedoc",
           "monkey_patch_variable", "memory_usage", "no_grad", "device_guard",
           "require_version", "FLUID_API_VERSION", "get_cuda_device_count"]

# The Fluid release whose Python API fluidjax follows (``require_version`` compares with it).
FLUID_API_VERSION = "1.8.5"


def convert_to_list(value, n: int, name: str, dtype=int) -> list:
    """``value`` (one number, or an iterable of ``n``) as a list of ``n`` numbers; a
    ``ValueError`` naming ``name`` otherwise (Fluid's ``layers.utils.convert_to_list``)."""
    if isinstance(value, dtype):
        return [value] * n
    try:
        values = list(value)
    except TypeError:
        raise ValueError(f"{name} must be a number or a list or tuple of {n}; got {value!r}") from None
    if len(values) != n:
        raise ValueError(f"{name} must have {n} entries; got {value!r}")
    for item in values:
        try:
            dtype(item)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must hold {n} values of {dtype}; got {item!r} in {value!r}") from None
    return values


def is_sequence(value) -> bool:
    """Whether ``value`` is a nested structure (a dict, or a sequence that is not a string)."""
    return isinstance(value, dict) or (isinstance(value, Sequence) and not isinstance(value, (str, bytes)))


def hold_mutable_vars(structure) -> bool:
    """Whether any entry of ``structure`` is itself a list, tuple or dict."""
    return any(is_sequence(item) for item in structure)


def copy_mutable_vars(structure):
    """A copy of ``structure``'s containers (the leaves are shared)."""
    return pack_sequence_as(structure, list(flatten(structure)))


def wrap_decorator(decorator_func: Callable) -> Callable:
    """A decorator applying ``decorator_func`` that keeps the decorated function's name,
    docstring and signature (Fluid's ``wrapped_decorator.wrap_decorator``)."""

    def decorate(func):
        return functools.wraps(func)(decorator_func(func))

    return decorate


signature_safe_contextmanager = contextlib.contextmanager


def get_logger(name: str, level, fmt: str | None = None) -> logging.Logger:
    """A logger ``name`` at ``level`` with one stream handler (``fmt`` its format), not
    propagating to the root logger (Fluid's ``log_helper.get_logger``)."""
    logger = logging.getLogger(name)
    logger.setLevel(level)
    if not any(getattr(h, "_fluidjax_log_helper", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler._fluidjax_log_helper = True
        if fmt:
            handler.setFormatter(logging.Formatter(fmt=fmt))
        logger.addHandler(handler)
    logger.propagate = False
    return logger


def deprecated(since: str = "", instead: str = "", extra_message: str = "") -> Callable:
    """A decorator that warns (``DeprecationWarning``) when the function is called."""

    def decorate(func):
        message = f"{func.__name__} is deprecated since {since}" + (f"; use {instead}" if instead else "")
        message += f". {extra_message}" if extra_message else ""

        @functools.wraps(func)
        def call(*args, **kwargs):
            warnings.warn(message, DeprecationWarning, stacklevel=2)
            return func(*args, **kwargs)

        return call

    return decorate


def autodoc(comment: str = "") -> Callable:
    """Fluid generated layer docstrings from op protos; here the function is returned as it is."""
    return lambda func: func


def templatedoc(op_type: str | None = None) -> Callable:
    """Fluid filled docstring templates from op protos; here the function is returned as it is."""
    return lambda func: func


def monkey_patch_variable() -> None:
    """Fluid installed Variable's operators with this call; fluidjax's Variable has them
    already (``frontend/math_sugar.py``), so it does nothing."""


def no_grad(func: Callable | None = None):
    """Fluid's ``dygraph.no_grad``: in a static program (the only mode here) it changes nothing,
    as in Fluid, whether used as a decorator or as ``with no_grad():``."""
    if func is None:
        return contextlib.nullcontext()
    return func


def _version(text: str) -> tuple[int, ...]:
    parts = str(text).split(".")
    if not 1 <= len(parts) <= 4 or not all(p.isdigit() for p in parts):
        raise ValueError(f"require_version: a version is like '1.6.0', got {text!r}")
    return tuple(int(p) for p in parts) + (0,) * (4 - len(parts))


def require_version(min_version: str, max_version: str | None = None) -> None:
    """Fluid 1.8's version check, against the Fluid API fluidjax follows (1.8.5): an
    ``Exception`` when that is older than ``min_version`` or newer than ``max_version``."""
    have = _version(FLUID_API_VERSION)
    if have < _version(min_version) or (max_version is not None and have > _version(max_version)):
        raise Exception(f"fluidjax follows the Fluid {FLUID_API_VERSION} API; this script requires "  # noqa: TRY002
                        f"{min_version}{' to ' + max_version if max_version else ' or newer'}")


@contextlib.contextmanager
def device_guard(device: str | None = None):
    """Fluid 1.8's ``device_guard`` ("cpu" / "gpu" / "gpu:N" for the ops appended inside). XLA
    places a compiled step as a whole, so it changes nothing here."""
    if device is not None and str(device).split(":")[0] not in ("cpu", "gpu"):
        raise ValueError(f"device_guard: device must be 'cpu', 'gpu' or 'gpu:N', got {device!r}")
    yield


def memory_usage(program, batch_size: int) -> tuple[float, float, str]:
    """An estimate of the memory of ``program``'s tensors at ``batch_size`` (Fluid 1.x's
    ``fluid.contrib.memory_usage``): the bytes of every LoD tensor an op of the global block
    writes, an unknown dim counting ``batch_size``, scaled to B / KB / MB. Returns
    ``(lower, upper, unit)``, the lower bound 5 % and the upper 10 % above the sum, as Fluid's.
    XLA's real plan is usually smaller (it fuses and reuses buffers): ``fj.compiled_memory``
    measures a compiled step."""
    from ..ir.program import Program

    if not isinstance(program, Program):
        raise TypeError(f"memory_usage needs a Program; got {type(program).__name__}")
    if batch_size <= 0:
        raise ValueError(f"memory_usage: batch_size must be positive; got {batch_size}")
    block = program.global_block()
    seen: set[str] = set()
    total = 0.0
    for op in block.ops:
        for names in op.outputs.values():
            for name in names:
                if name in seen or not block.has_var(name):
                    continue
                seen.add(name)
                var = block.var(name)
                if var.type != dtypes.LOD_TENSOR or var.dtype is None:
                    continue
                count = 1
                for dim in var.shape:
                    count *= batch_size * -dim if dim < 0 else dim
                total += count * dtypes.to_numpy(var.dtype).itemsize
    unit = "B"
    for bigger in ("KB", "MB"):
        if total > 1024:
            total /= 1024
            unit = bigger
    return total * 1.05, total * 1.1, unit


def get_cuda_device_count() -> int:
    """The number of NVIDIA GPUs JAX can use in this process (Fluid's
    ``fluid.core.get_cuda_device_count()``): 0 on a CPU-only machine."""
    from ..lowering.places import cuda_places

    return len(cuda_places())
