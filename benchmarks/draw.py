"""Drawing large programs with ``fj.draw``: the 5,000-op fc stack of benchmarks/build.py and a
ResNet-50 (forward, and the training program with backward and optimizer folded).

Target (issue 12): each draws (graph, layout and SVG text) in under 2 s. Prints the median time of
a few repetitions and the size of the SVG.

    python benchmarks/draw.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fluidjax as fj  # noqa: E402

from build import build_program  # noqa: E402
from resnet50 import resnet50_program  # noqa: E402


def timed(fn, repeats=3):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def report(name, program, **kwargs) -> None:
    seconds, svg = timed(lambda: fj.draw(program, **kwargs).svg)
    n_ops = len(program.global_block().ops)
    print(f"{name:<34} {n_ops:5d} ops  {seconds * 1e3:7.0f} ms  SVG {len(svg) / 1e6:5.2f} MB   target < 2000 ms")


def main() -> None:
    fc_stack, _ = build_program()
    report("5,000-op fc stack", fc_stack)
    report("5,000-op fc stack, collapse=True", fc_stack, collapse=True)
    forward, _ = resnet50_program(train=False)
    report("ResNet-50 forward", forward)
    report("ResNet-50 forward, collapse=True", forward, collapse=True)
    train, _ = resnet50_program(train=True)
    report("ResNet-50 train (parts folded)", train)


if __name__ == "__main__":
    main()
