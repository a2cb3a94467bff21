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


def compare(runners: dict[str, Callable], inputs: Sequence[tuple], steps: int, warmup: int = 10) -> dict:
    """fluidjax against hand-written JAX, then fluidjax against Paddle, each pair interleaved.

    Paddle's runtime is large and cache-hungry: interleaving it with the two JAX sides slows
    whichever follows it, so each ratio is taken from its own pair (both passes are in one run).
    """
    jax_pass = interleaved_medians({k: runners[k] for k in ("fluidjax", "jax")}, inputs, steps, warmup)
    paddle_pass = interleaved_medians({k: runners[k] for k in ("fluidjax", "paddle")}, inputs, steps, warmup)
    return {"fluidjax": jax_pass["fluidjax"], "jax": jax_pass["jax"], "paddle": paddle_pass["paddle"],
            "fluidjax/jax": jax_pass["fluidjax"] / jax_pass["jax"],
            "paddle/fluidjax": paddle_pass["paddle"] / paddle_pass["fluidjax"]}


def row(batch: int, ms: dict) -> str:
    """One line of the table: the three medians and the two ratios (from :func:`compare`)."""
    return (f"{batch:>6} {ms['fluidjax']:>12.3f} {ms['jax']:>9.3f} {ms['paddle']:>10.3f} "
            f"{ms['fluidjax/jax']:>13.2f} {ms['paddle/fluidjax']:>16.2f}")
