"""Startup programs run on the host: initial values cost what drawing the numbers costs.

Compiling a startup program as one XLA computation takes time in proportion to its ops (about
50 ms a layer on a 2-core CPU: 14 s for 200 fc layers), while the numbers themselves take
milliseconds. So a program whose ops are all initializers — no feeds, no state read, no op
inputs, every op with a host rule here (``uniform_random``, ``gaussian_random``,
``truncated_gaussian_random``, ``randint``, ``fill_constant``) — runs with NumPy and is put on
the device in one transfer. Nothing compiles; time grows with the number of parameters only.

The numbers come from NumPy's PCG64 generator seeded by a ``SeedSequence`` of
``(seed, op index)`` for a program with a ``random_seed`` (the same numbers every run, in every
process, on every backend — stronger than XLA's RNG, which may differ across backends), of
``(executor seed, run count, op index)`` for an unseeded program (new numbers every run), and of
the op's own ``seed`` attribute when it is non-zero (Paddle's rule). They differ from what the
same op draws inside a compiled step (JAX's generator); both are reproducible for a seed.
"""

from __future__ import annotations

import os
from typing import Callable

import numpy as np

from ..ir import dtypes, registry
from .signals import thread_map

# op type -> fn(ctx: HostInitContext) -> np.ndarray (the op's "Out")
HOST_RULES: dict[str, Callable] = {}


def host_rule(op_type: str):
    """Register the NumPy rule of an initializer op (next to its JAX rule)."""
    def register(fn):
        HOST_RULES[op_type] = fn
        return fn
    return register


class HostInitContext:
    """What a host rule sees: the op's attributes (with defaults), its output dtype, a generator."""

    def __init__(self, op, entropy: tuple[int, ...]) -> None:
        self.op = op
        self._opdef = registry.get(op.type)
        self._entropy = entropy

    def attr(self, name: str):
        """Attribute ``name``, or the op definition's default."""
        if name in self.op.attrs:
            return self.op.attrs[name]
        spec = self._opdef.attrs.get(name)
        return spec.default if spec is not None else None

    def shape(self) -> tuple[int, ...]:
        """The ``shape`` attribute as a tuple."""
        return tuple(int(d) for d in self.attr("shape"))

    def dtype(self) -> np.dtype:
        """The NumPy dtype of the ``dtype`` attribute."""
        return dtypes.to_numpy(dtypes.from_enum(self.attr("dtype")))

    def rng(self) -> np.random.Generator:
        """This op's generator: its own non-zero ``seed`` wins, else the run's entropy."""
        seed = int(self.attr("seed") or 0)
        entropy = (seed,) if seed else self._entropy
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(e) & 0xFFFFFFFF for e in entropy])))


def can_run(ops) -> bool:
    """Whether every op of ``ops`` is an initializer with a host rule and no inputs."""
    return bool(ops) and all(op.type in HOST_RULES and not op.input_arg_names for op in ops)


def run(ops, entropy_of: Callable[[int], tuple[int, ...]]) -> dict[str, np.ndarray]:
    """The NumPy values of every output of ``ops`` (op ``i`` draws from ``entropy_of(i)``).

    Each op has its own generator, so ops are independent: they are drawn on a few threads
    (NumPy's generators release the GIL while they fill an array), the largest first.
    """
    def draw(index: int):
        return HOST_RULES[ops[index].type](HostInitContext(ops[index], entropy_of(index)))

    ops = list(ops)
    sizes = [int(np.prod(op.attrs.get("shape") or [1])) for op in ops]
    values: list = [None] * len(ops)
    big = [i for i in sorted(range(len(ops)), key=lambda i: -sizes[i]) if sizes[i] >= _THREAD_MIN]
    if len(big) > 1 and _WORKERS > 1:
        for i, value in zip(big, thread_map(draw, big, _WORKERS)):   # a Ctrl-C cannot hang it
            values[i] = value
    for i in range(len(ops)):
        if values[i] is None:
            values[i] = draw(i)
    out: dict[str, np.ndarray] = {}
    for op, value in zip(ops, values):
        for name in op.output("Out"):
            out[name] = value
    return out


# Tensors at least this large are drawn on worker threads (smaller ones cost less than a handoff).
_THREAD_MIN = 1 << 16
_WORKERS = min(4, os.cpu_count() or 1)


def float_kind(dtype: np.dtype) -> np.dtype:
    """The dtype NumPy draws in for ``dtype`` (float32 for 16-bit floats, which NumPy cannot draw)."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)
