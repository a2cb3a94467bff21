"""Timing shared by the benchmarks: interleaved medians and the ratio table."""

from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence

HEADER = (f"{'batch':>6} {'fluidjax ms':>12} {'JAX ms':>9} {'Paddle ms':>10} {'fluidjax/JAX':>13} "
          f"{'Paddle/fluidjax':>16}")


def interleaved_medians(runners: dict[str, Callable], inputs: Sequence[tuple], steps: int,
                        warmup: int = 10) -> dict[str, float]:
    """Median milliseconds per call of each runner, called with the next tuple of ``inputs``.

    The sides take turns call by call (in an order that rotates every round), so a busy machine
    slows all of them alike instead of whichever happened to run while it was busy.
    """
    names = list(runners)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(warmup + steps):
        args = inputs[i % len(inputs)]
        for name in names[i % len(names):] + names[:i % len(names)]:
            start = time.perf_counter()
            runners[name](*args)
            if i >= warmup:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def row(batch: int, ms: dict[str, float]) -> str:
    """One line of the table: the three medians and the two ratios."""
    return (f"{batch:>6} {ms['fluidjax']:>12.3f} {ms['jax']:>9.3f} {ms['paddle']:>10.3f} "
            f"{ms['fluidjax'] / ms['jax']:>13.2f} {ms['paddle'] / ms['fluidjax']:>16.2f}")
