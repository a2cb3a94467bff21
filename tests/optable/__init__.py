"""The shared op-test table: one :class:`Case` per row, collected from the ``*_cases.py`` modules.

A row names an op type, its inputs (NumPy arrays, made here from a fixed seed), attributes and
tolerances. ``tests/test_op_table.py`` runs every row: it builds a one-op fluidjax program,
serializes it, runs it in Paddle 2.6.2 and in fluidjax, compares outputs, compares input
gradients (both systems' backward), checks float64 rows against central finite differences and
checks that the build-time shapes (batch dim -1) agree with the run-time ones. Rows whose op
draws random numbers give a ``check`` function instead (statistics, reproducibility).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Any, Callable

import numpy as np


@dataclasses.dataclass
class Case:
    """One row of the op-test table.

    op:        Paddle op type.
    inputs:    slot -> array, or list of arrays for a duplicable slot.
    attrs:     op attributes (the rest take the op's defaults).
    outputs:   output slots to compare (each gets fresh variables; a duplicable slot gets
               ``output_counts[slot]`` of them).
    grad:      input slots whose gradients are compared (None: every float input; [] : none).
    rtol/atol: tolerances for outputs; grad_rtol/grad_atol for gradients.
    batch_dims: input slots whose first dim is declared -1 at build time (default: all inputs
               of rank >= 1); ``()`` keeps every shape fully known.
    paddle:    compare with Paddle; when False, ``oracle(inputs, attrs) -> {slot: array}``
               (NumPy) is the reference.
    check:     for random ops — ``check(run)`` where ``run(seed=...)`` returns the outputs;
               replaces the comparisons.
    no_grad_outputs: output slots left out of the loss used for gradients.
    name:      distinguishes several rows of one op.
    lod:       slot -> recursive sequence lengths: that slot's (first) input is a LoD tensor with
               those lengths (a duplicable slot may give a list of them, one per input) (its variable gets ``lod_level = len(lengths)``), fed as a LoDTensor
               to both systems; LoD outputs are then compared with their LoD, and the build-time
               ``lod_level`` of every output must equal the run-time number of LoD levels.
    """

    op: str
    inputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)
    outputs: tuple[str, ...] = ("Out",)
    output_counts: dict[str, int] = dataclasses.field(default_factory=dict)
    grad: tuple[str, ...] | None = None
    rtol: float = 1e-5
    atol: float = 1e-6
    grad_rtol: float = 1e-4
    grad_atol: float = 1e-5
    batch_dims: tuple[str, ...] | None = None
    paddle: bool = True
    oracle: Callable | None = None
    check: Callable | None = None
    no_grad_outputs: tuple[str, ...] = ()
    name: str = ""
    lod: dict[str, list[list[int]]] = dataclasses.field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.op}-{self.name}" if self.name else self.op


_rng = np.random.default_rng(20261121)


def rand(*shape, dtype="float32", low=-1.0, high=1.0) -> np.ndarray:
    """Uniform floats in [low, high) from the table's fixed generator."""
    return _rng.uniform(low, high, shape).astype(dtype)


def randint(*shape, low=0, high=10, dtype="int64") -> np.ndarray:
    return _rng.integers(low, high, shape).astype(dtype)


def positive(*shape, dtype="float32", low=0.5, high=2.0) -> np.ndarray:
    return rand(*shape, dtype=dtype, low=low, high=high)


def away_from_zero(*shape, dtype="float32", margin=0.2) -> np.ndarray:
    """Values in ±[margin, 1]: keeps kinks (abs, relu, sign) away from finite-difference steps."""
    x = rand(*shape, dtype="float64", low=margin, high=1.0)
    return (x * np.where(rand(*shape) > 0, 1, -1)).astype(dtype)


def own_stream(seed: int):
    """``rand`` and ``randint`` drawing from a generator of their own: rows made with them leave the
    shared stream (and so the inputs of every module loaded after theirs) as it was."""
    rng = np.random.default_rng(seed)

    def own_rand(*shape, dtype="float32", low=-1.0, high=1.0) -> np.ndarray:
        return rng.uniform(low, high, shape).astype(dtype)

    def own_randint(*shape, low=0, high=10, dtype="int64") -> np.ndarray:
        return rng.integers(low, high, shape).astype(dtype)

    return own_rand, own_randint


def all_cases() -> list[Case]:
    """Every row of every ``*_cases`` module of this package."""
    cases: list[Case] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.endswith("_cases"):
            module = importlib.import_module(f"{__name__}.{info.name}")
            cases.extend(module.CASES)
    return cases


def tested_elsewhere() -> dict[str, str]:
    """Ops checked by a dedicated test instead of a row (``ELSEWHERE`` of a ``*_cases`` module):
    op type -> ``"tests/<file>.py::<test>"``. For ops whose inputs a one-op row cannot build
    meaningfully (detection targets and proposals, whose inputs must be consistent boxes, LoD
    and image sizes; ops Paddle 2.6.2 dropped), where the named test compares against Paddle or
    NumPy."""
    found: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.endswith("_cases"):
            module = importlib.import_module(f"{__name__}.{info.name}")
            found.update(getattr(module, "ELSEWHERE", {}))
    return found
