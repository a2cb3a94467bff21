"""Where the time of ``big_model.py``'s training step goes: fluidjax's step against the
hand-written JAX step, kernel by kernel, from a ``jax.profiler`` trace.

Per side: the wall time of ``exe.run`` (and of the jitted step alone, called with its arguments
already on the device), then the trace of ``--steps`` steps: the device time summed per kernel
name, grouped into matrix multiplies (GEMM/cuBLAS/cutlass/dot), fusions, copies/transfers and
the rest, with the kernel count per step. The difference between the two sides' tables is the
cost of fluidjax's lowering; the difference between wall time and device time is host overhead.

    python benchmarks/kernel_breakdown.py [--layers 12 --width 768 --heads 12 --seq 256 --batch 16]
                                          [--steps 5] [--top 25] [--json out.json]

On a CPU the trace has no device kernels; the table then shows XLA's host thunks, if any.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _kind(name: str) -> str:
    low = name.lower()
    if re.search(r"gemm|cublas|cutlass|sm\d+_xmma|\bdot|matmul|triton_gemm", low):
        return "matmul"
    if "memcpy" in low or "memset" in low or "copy" in low or "transpose" in low:
        return "copy/transpose"
    if "fusion" in low or "triton" in low:
        return "fusion"
    return "other"


def _device_events(trace_dir: str) -> list[dict]:
    files = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)
    if not files:
        return []
    with gzip.open(max(files, key=os.path.getmtime), "rt") as f:
        trace = json.load(f)
    events = trace.get("traceEvents", [])
    procs, threads = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e.get("args", {}).get("name", "")
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e.get("tid"))] = e.get("args", {}).get("name", "")
    gpus = {pid for pid, n in procs.items() if "/device:gpu" in n.lower()}
    # the kernels, on the device's stream lines (its "XLA Ops"/"XLA Modules" lines repeat them)
    streams = {key for key, n in threads.items() if key[0] in gpus and "stream" in n.lower()}
    if gpus and not streams:
        print("no stream lines in the trace; its device lines:", sorted({threads[k] for k in threads if k[0] in gpus}))
    return [e for e in events if e.get("ph") == "X" and "dur" in e and (e.get("pid"), e.get("tid")) in streams]


def _profile(run, steps: int) -> dict:
    import jax

    out = tempfile.mkdtemp(prefix="fj-trace-")
    with jax.profiler.trace(out):
        for _ in range(steps):
            run()
    events = _device_events(out)
    per_name = collections.Counter()
    count = collections.Counter()
    for e in events:
        per_name[e["name"]] += e["dur"] / steps
        count[e["name"]] += 1 / steps
    kinds = collections.Counter()
    for name, us in per_name.items():
        kinds[_kind(name)] += us
    return {"device_ms_per_step": sum(per_name.values()) / 1e3, "kernels_per_step": round(sum(count.values())),
            "by_kind_ms": {k: round(v / 1e3, 3) for k, v in kinds.most_common()},
            "top": [(n, round(us / 1e3, 3), round(count[n], 1)) for n, us in per_name.most_common(40)]}


def _timed(fn, repeats: int) -> dict:
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return {"median_ms": round(statistics.median(ts) * 1e3, 2), "min_ms": round(min(ts) * 1e3, 2),
            "max_ms": round(max(ts) * 1e3, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in (("layers", 12), ("width", 768), ("heads", 12), ("seq", 256), ("batch", 16),
                          ("vocab", 8192), ("steps", 5), ("repeats", 10), ("top", 25)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--json", default=None)
    cfg = parser.parse_args()
    cfg.merge = 1

    import jax

    import big_model as bm
    import fluidjax as fj

    main_p, startup, loss, names = bm.build_fluidjax(cfg)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    params = {n: np.array(scope.find_var(n).get_tensor(), copy=True) for n in names}
    feeds = bm.batches(cfg, cfg.batch, 4)
    i = [0]

    def fj_run():
        i[0] += 1
        return exe.run(main_p, feed=feeds[i[0] % 4], fetch_list=[loss], scope=scope)[0]

    for _ in range(3):
        fj_run()
    _, _, plan, args = exe._prepare(main_p, feeds[0], [loss], scope)
    alone = jax.jit(plan.step_fn)
    jax.block_until_ready(alone(*args))

    step, _, jfeeds = bm.jax_runner(cfg, params, names)
    for f in jfeeds:
        step(f)

    def jax_run():
        i[0] += 1
        return step(jfeeds[i[0] % 4])

    result = {"config": vars(cfg), "device": str(jax.devices()[0]),
              # first: exe.run donates the state buffers these arguments hold
              "fluidjax jitted step alone": _timed(lambda: jax.block_until_ready(alone(*args)), cfg.repeats)}
    del args
    result["fluidjax exe.run"] = _timed(fj_run, cfg.repeats)
    result["hand-written JAX step"] = _timed(jax_run, cfg.repeats)
    result["fluidjax exe.run (again)"] = _timed(fj_run, cfg.repeats)
    for side, run in (("fluidjax", fj_run), ("jax", jax_run)):
        result[f"profile {side}"] = _profile(run, cfg.steps)
    for key, value in result.items():
        if key.startswith("profile"):
            print(f"== {key}: device {value['device_ms_per_step']:.2f} ms/step, {value['kernels_per_step']} kernels/step,"
                  f" by kind {value['by_kind_ms']}")
            for name, ms, n in value["top"][:cfg.top]:
                print(f"   {ms:8.3f} ms  x{n:<5}  {name[:110]}")
        else:
            print(f"{key}: {value}")
    if cfg.json:
        with open(cfg.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
