"""How much memory a compiled step needs, how much its device has free, and the check between them.

A run donates its state to XLA, so a step that runs out of memory on the device must be stopped
*before* it is called: once XLA has the buffers, a failure takes the parameters with it. The
Executor asks, once per compiled step and feed shape, for XLA's memory analysis of the step
(:func:`step_figures`), and compares what the step needs beyond the state it already holds with
what the device has free (:func:`free_bytes`):

- it does not fit: :class:`~fluidjax.ResourceExhaustedError` with both figures; nothing ran;
- it fits, but needs more than 90% of what is free: the step runs *undonated* (when it fits so
  too: its outputs cannot reuse the state's buffers) and is waited for before the commit, so if
  XLA still runs out the scope keeps its old values;
- otherwise the step runs donated, as always.

What "free" means: on an accelerator, ``device.memory_stats()``'s ``bytes_limit - bytes_in_use``;
on the CPU (where JAX reports no statistics) the host's ``MemAvailable`` (``/proc/meminfo``), and,
when the process's address space is capped (``RLIMIT_AS``), no more than the room left under the
cap. Where neither is known the check is skipped. Free memory is asked again only when a step
needs more than a quarter of what was free at the last check, so the cost per run is a dict
lookup and a comparison.
"""

from __future__ import annotations

import os
import resource

__all__ = ["free_bytes", "step_figures", "RISKY", "QUIET"]

# A step needing more than this fraction of the free memory runs undonated and is waited for.
RISKY = 0.9
# A step needing less than this fraction of the free memory at the last check asks no more.
QUIET = 0.25

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def free_bytes(device) -> tuple[int | None, str]:
    """Bytes free on ``device`` (None when unknown) and where the figure comes from."""
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001  (a backend without statistics)
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)), \
            f"{device}'s memory_stats(): bytes_limit - bytes_in_use"
    if getattr(device, "platform", "cpu") != "cpu":
        return None, "unknown"
    figures = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    figures.append((int(line.split()[1]) * 1024, "the host's MemAvailable"))
                    break
    except OSError:
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        try:
            with open("/proc/self/statm") as f:
                size = int(f.read().split()[0]) * _PAGE
            figures.append((max(soft - size, 0), "the room left under the process's address-space limit (RLIMIT_AS)"))
        except OSError:
            pass
    if not figures:
        return None, "unknown"
    return min(figures)


def step_figures(compiled) -> dict | None:
    """XLA's memory analysis of a compiled step as a dict of ints: ``temp_bytes``,
    ``argument_bytes``, ``output_bytes``, ``alias_bytes`` (outputs written into donated
    arguments), ``generated_code_bytes`` and ``peak_bytes``; None where XLA gives none."""
    try:
        m = compiled.memory_analysis()
    except Exception:  # noqa: BLE001  (not every backend implements it)
        return None
    if m is None:
        return None
    temp, arg = int(m.temp_size_in_bytes), int(m.argument_size_in_bytes)
    out, alias = int(m.output_size_in_bytes), int(m.alias_size_in_bytes)
    # XLA allocates a step's temporaries as one buffer for the whole call, next to its arguments
    # and the outputs that do not reuse a donated argument: that sum is what the call holds at
    # once (XLA's own peak_memory_in_bytes, where given, is taken when larger).
    peak = int(getattr(m, "peak_memory_in_bytes", 0) or 0)
    return {"temp_bytes": temp, "argument_bytes": arg, "output_bytes": out, "alias_bytes": alias,
            "generated_code_bytes": int(m.generated_code_size_in_bytes),
            "peak_bytes": max(peak, arg + out - alias + temp)}


def extra_need(figures: dict, resident: int) -> int:
    """What a step needs beyond the ``resident`` bytes of its arguments already on the device
    (its state): its fed arguments, outputs that do not reuse a donated buffer, temporaries."""
    return max(figures["peak_bytes"] - resident, 0)
