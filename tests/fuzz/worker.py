"""One mutant through everything a loaded program goes through; the worker process's loop.

:func:`check` is the whole check of one mutant: parse, serialize, parse the result again (it
must parse and serialize to the same bytes), clone, clone(for_test=True), infer_shapes of every
block (block 0 with feeds of its data variables' shapes, -1 read as 2), str and _repr_html_,
and — when asked — an Executor run: the seed's unmutated startup program initialises a fresh
scope, then the mutant runs with random feeds and fetches the seed's fetch targets.

A fluidjax error (:class:`FluidJaxError`) anywhere is an accepted outcome; any other exception
is a bug. :func:`serve` is a worker process's loop; it imports JAX only after pinning it to the
CPU with one thread, so that workers and their memory checks behave the same on every machine.
"""

from __future__ import annotations

import os
import resource
import time
import traceback

MIB = 1 << 20
_FEED_LIMIT = 1 << 16      # elements: a data variable with more known elements is not fed
_UNKNOWN_DIM = 2           # what -1 becomes in feeds


class Outcome(dict):
    """``stage`` -> what happened there (``"ok"`` or an error class name); ``bug`` holds the first
    failure that is not a fluidjax error (stage, class, message, traceback)."""


def _feeds(fj, program, rng, *, arrays: bool):
    """Shapes (or random arrays) for block 0's data variables whose shape and dtype are usable."""
    from fluidjax.ir import dtypes

    out = {}
    for var in program.global_block().vars.values():
        if not var.is_data or var.dtype is None or var.type != dtypes.LOD_TENSOR:
            continue
        shape = tuple(_UNKNOWN_DIM if d < 0 else d for d in var.shape)
        size = 1
        for d in shape:
            size *= d
        if size > _FEED_LIMIT:
            continue
        if not arrays:
            out[var.name] = shape
            continue
        np_dtype = dtypes.to_numpy(var.dtype)
        if var.dtype.startswith(("int", "uint")):
            value = rng.integers(0, 2, shape).astype(np_dtype)
        elif var.dtype == "bool":
            value = rng.random(shape) < 0.5
        elif var.dtype.startswith("complex"):
            value = (rng.random(shape) + 1j * rng.random(shape)).astype(np_dtype)
        else:
            value = rng.random(shape).astype(np_dtype)
        if var.lod_level:
            if var.lod_level > 8 or not shape:
                continue
            # One sequence per row at every level (offsets 0, 1, ..., rows).
            value = fj.LoDTensor(value, [list(range(shape[0] + 1))] * var.lod_level)
        out[var.name] = value
    return out


class Checker:
    """Runs mutants; keeps each seed's initialised parameters for Executor runs."""

    def __init__(self, seeds: dict) -> None:
        import fluidjax as fj

        self.fj = fj
        self.seeds = seeds                    # name -> fuzz.seeds.Seed
        self.seed_bytes = {k: s.main for k, s in seeds.items()}
        self._params: dict[str, dict] = {}

    def params(self, seed_name: str) -> dict:
        """The seed's parameters after its startup program ran (computed once per process)."""
        import numpy as np

        if seed_name not in self._params:
            fj = self.fj
            values = {}
            startup = self.seeds[seed_name].startup
            if startup is not None:
                prog = fj.Program.parse(startup)
                scope = fj.Scope()
                fj.Executor().run(prog, scope=scope)
                for var in prog.global_block().vars.values():
                    holder = scope.find_var(var.name) if var.persistable else None
                    if holder is not None:
                        values[var.name] = np.asarray(holder.get_tensor())
            self._params[seed_name] = values
        return self._params[seed_name]

    def check(self, seed_name: str, index: int, run: bool, data: bytes | None = None) -> Outcome:
        """Mutant ``index`` of ``seed_name`` (or ``data``) through every stage."""
        from fuzz.mutate import mutant

        if data is None:
            data, _ = mutant(seed_name, self.seed_bytes, index)
        return self.check_bytes(seed_name, index, data, run)

    def check_bytes(self, seed_name: str, index: int, data: bytes, run: bool) -> Outcome:
        fj = self.fj
        out = Outcome()
        program = None

        def stage(name, fn):
            try:
                result = fn()
            except fj.FluidJaxError as exc:
                out[name] = type(exc).__name__
                out.setdefault("first_error", (name, type(exc).__name__, str(exc)[:1000]))
                return None
            except BaseException as exc:  # noqa: BLE001 - a bug, whatever it is
                if isinstance(exc, KeyboardInterrupt):
                    raise
                out[name] = "BUG"
                out["bug"] = (name, type(exc).__name__, _text(exc), traceback.format_exc(limit=12))
                return None
            out[name] = "ok"
            return result if result is not None else True

        program = stage("parse", lambda: fj.Program.parse(data))
        if program is None:
            return out
        first = stage("serialize", program.serialize)
        if first is None:
            return out

        def reparse():
            try:
                again = fj.Program.parse(first)
            except fj.FluidJaxError as exc:  # what we accepted we must be able to read back
                raise AssertionError(f"our own serialization is refused: {type(exc).__name__}: {exc}") from exc
            if again.serialize() != first:
                raise AssertionError("parse(serialize(p)).serialize() differs from serialize(p)")
            return again

        if stage("reparse", reparse) is None:
            return out
        for name, fn in (("clone", program.clone), ("clone_for_test", lambda: program.clone(for_test=True))):
            if stage(name, fn) is None and "bug" in out:
                return out
        feeds = _feeds(fj, program, None, arrays=False)
        for bi in range(program.num_blocks):
            if stage(f"infer_shapes[{bi}]" if bi else "infer_shapes",
                     lambda: fj.infer_shapes(program, feeds if bi == 0 else {}, block_idx=bi)) is None \
                    and "bug" in out:
                return out
        for name, fn in (("str", lambda: str(program)), ("html", program._repr_html_), ("repr", lambda: repr(program))):
            if stage(name, fn) is None and "bug" in out:
                return out
        # The Executor runs block 0: run a mutant that got through everything but sub-block shapes.
        if run and all(v == "ok" for k, v in out.items() if not k.startswith(("infer_shapes[", "first_error"))):
            self._run(seed_name, index, program, out, stage)
        return out

    def _run(self, seed_name, index, program, out, stage) -> None:
        import numpy as np

        fj = self.fj
        params = self.params(seed_name)
        rng = np.random.default_rng(max(index, 0))
        block = program.global_block()
        fetch = [n for n in self.seeds[seed_name].fetch if n in block.vars]

        def run():
            scope = fj.Scope()
            for name, value in params.items():
                scope.var(name).get_mutable(fj.LoDTensor).set(value)
            return fj.Executor().run(program, feed=_feeds(fj, program, rng, arrays=True), fetch_list=fetch,
                                     scope=scope)

        stage("run", run)


def _text(exc: BaseException) -> str:
    try:
        return str(exc)[:500]
    except Exception:  # noqa: BLE001
        return f"<unprintable {type(exc).__name__}>"


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def serve(conn, seeds: dict, memory_headroom: int, rss_budget: int) -> None:
    """A worker process: receive batches of ``(seed, index, run)``, answer one result each.

    Memory: after warming up (every seed parsed, checked and, where it has a startup program,
    run) the address space is capped at its size plus ``memory_headroom`` (RLIMIT_AS: JAX on
    CPU reserves ~1.5 GiB of address space, not terabytes, so the cap works), and each mutant's
    growth of the peak RSS (ru_maxrss) beyond ``rss_budget`` is reported as a failure.
    """
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import fluidjax  # noqa: F401  (JAX first: see the project's README)

    checker = Checker(seeds)
    for name in seeds:  # warm up: imports, compile caches, each seed's parameters
        checker.check_bytes(name, -1, seeds[name].main, run=True)
        checker.params(name)
    if memory_headroom:
        limit = _vm_size() + memory_headroom
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    conn.send(("ready", os.getpid()))
    while True:
        batch = conn.recv()
        if batch is None:
            return
        for seed_name, index, run in batch:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            start = time.perf_counter()
            out = checker.check(seed_name, index, run)
            grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
            if grown > rss_budget and "bug" not in out:
                out["bug"] = ("memory", "PeakRSS", f"peak RSS grew by {grown / MIB:.0f} MiB "
                              f"(budget {rss_budget / MIB:.0f} MiB)", "")
            conn.send((seed_name, index, dict(out), time.perf_counter() - start))
