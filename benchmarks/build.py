"""Building, shape-inferring, serializing and parsing a 5,000-op program (a deep stack of fc layers).

Targets (issue 2): build (with shape inference at append) <= 1 s; serialize + parse <= 0.2 s.
Prints median times of several repetitions.

    python benchmarks/build.py
"""

from __future__ import annotations

import statistics
import time

import fluidjax as fj
from fluidjax import layer

N_OPS = 5000


def build_program():
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        h = layer.data("x", input_size=64)
        while len(main.global_block().ops) < N_OPS:
            h = layer.fc(h, output_size=64, activation="relu")
    return main, startup


def timed(fn, repeats=5):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    build_s, (program, startup) = timed(build_program)
    n_ops = len(program.global_block().ops)
    infer_s, shapes = timed(lambda: fj.infer_shapes(program, {"x": (32, 64)}))
    serialize_s, data = timed(program.serialize)
    parse_s, parsed = timed(lambda: fj.Program.parse(data))
    assert parsed.serialize() == data
    print(f"program: {n_ops} ops, {len(program.global_block().vars)} vars, {len(data) / 1e6:.2f} MB serialized")
    print(f"build (append + shape rules):   {build_s * 1e3:8.1f} ms   target <= 1000 ms")
    print(f"infer_shapes (concrete feeds):  {infer_s * 1e3:8.1f} ms")
    print(f"serialize:                      {serialize_s * 1e3:8.1f} ms")
    print(f"parse:                          {parse_s * 1e3:8.1f} ms")
    print(f"serialize + parse:              {(serialize_s + parse_s) * 1e3:8.1f} ms   target <= 200 ms")


if __name__ == "__main__":
    main()
