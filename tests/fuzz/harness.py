"""Running many mutants in a pool of worker processes, and counting what happened.

:func:`run` hands ``(seed, index)`` tasks to worker processes (``fuzz.worker.serve``) in small
batches and collects one result per mutant. A worker that dies (a segfault, an abort, a kill by
the OOM killer) is a *crash* of the mutant it was on; one that takes longer than the per-mutant
timeout is a *hang*: it is killed, and in both cases a fresh worker takes over the rest of its
batch. Every failure names its seed and index; replay one with::

    cd tests && python -m fuzz.harness SEED INDEX        # prints the mutations and the traceback
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import multiprocessing
import os
import re
import sys
import time
from multiprocessing.connection import wait

from . import worker as worker_mod

TIMEOUT_S = 30.0          # one mutant, without an Executor run
RUN_TIMEOUT_S = 120.0     # one mutant with an Executor run (it compiles with XLA)
WORKER_START_S = 180.0
BATCH = 25
MEMORY_HEADROOM = 3 << 30  # address space a worker may add after warming up (RLIMIT_AS)
RSS_BUDGET = 512 << 20     # peak-RSS growth allowed while checking one mutant


@dataclasses.dataclass
class Report:
    mutants: int = 0
    seconds: float = 0.0
    by_seed: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    parsed: int = 0
    refused: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    refused_reasons: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    later_errors: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    reached_run: int = 0
    runs: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    failures: list = dataclasses.field(default_factory=list)
    known: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    known_examples: dict = dataclasses.field(default_factory=dict)

    def add(self, seed: str, index: int, out: dict) -> None:
        self.mutants += 1
        self.by_seed[seed] += 1
        if "bug" in out:
            stage, cls, message, trace = out["bug"]
            known = _known_elsewhere(stage, cls, trace)
            if known:
                self.known[known] += 1
                self.known_examples.setdefault(known, f"{seed}:{index}")
            else:
                self.failures.append(f"{seed}:{index} {stage}: {cls}: {message}\n{trace}")
        parse = out.get("parse")
        if parse is None:
            return
        if parse != "ok":
            self.refused[parse] += 1
            if "first_error" in out:
                self.refused_reasons[_reason(out["first_error"][2])] += 1
            return
        self.parsed += 1
        for stage, result in out.items():
            if stage in ("parse", "bug", "first_error") or result == "ok":
                continue
            if stage == "run":
                continue
            self.later_errors[f"{_BLOCK_INDEX.sub('[k]', stage)}: {result}"] += 1
        if "run" in out:
            self.reached_run += 1
            self.runs[out["run"]] += 1

    def failure(self, seed: str, index: int, what: str) -> None:
        self.mutants += 1
        self.by_seed[seed] += 1
        self.failures.append(f"{seed}:{index} {what}")

    def text(self) -> str:
        lines = [f"fuzz: {self.mutants} mutants in {self.seconds:.1f} s "
                 f"({', '.join(f'{k} {v}' for k, v in sorted(self.by_seed.items()))})",
                 f"  refused at parse: {sum(self.refused.values())} "
                 f"({', '.join(f'{k} {v}' for k, v in self.refused.most_common())})"]
        for reason, count in self.refused_reasons.most_common():
            lines.append(f"    {count:7d}  {reason}")
        lines.append(f"  parsed: {self.parsed}; later typed errors (a mutant can have several):")
        for what, count in sorted(self.later_errors.items()):
            lines.append(f"    {count:7d}  {what}")
        lines.append(f"  Executor runs: {self.reached_run} "
                     f"({', '.join(f'{k} {v}' for k, v in self.runs.most_common())})")
        for what, count in self.known.items():
            lines.append(f"  known bug in code owned elsewhere, not counted as a failure: {count} x {what} "
                         f"(e.g. {self.known_examples[what]})")
        lines.append(f"  failures: {len(self.failures)}")
        lines.extend("    " + f.replace("\n", "\n    ") for f in self.failures[:20])
        return "\n".join(lines)


# Untyped errors from code this fuzzer's owner does not own, reported to its owner: listed here
# (stage, exception class, a line of the traceback) so they are counted and shown but do not fail
# the test. A fix changes the traceback, and the entry stops matching: delete it then.
KNOWN_ELSEWHERE: list[tuple[str, str, str, str]] = []


def _known_elsewhere(stage: str, cls: str, trace: str) -> str | None:
    for k_stage, k_cls, k_line, what in KNOWN_ELSEWHERE:
        if stage == k_stage and cls == k_cls and k_line in trace:
            return what
    return None


_BLOCK_INDEX = re.compile(r"\[\d+\]")

_REASONS = [
    ("not a ProgramDesc", "protobuf cannot decode the bytes"),
    ("not valid UTF-8", "a string field is not UTF-8"),
    ("cycle", "block parents form a cycle"),
    ("parent", "block parent_idx out of range / root misplaced"),
    ("BlockDesc.idx", "block idx does not match its position"),
    ("forward_block_idx", "forward_block_idx out of range"),
    ("names block", "BLOCK/BLOCKS attribute names no child block"),
    ("declared twice", "duplicate variable in a block"),
    ("is not declared in block", "block 0 op names an undeclared variable"),
    ("data_type", "data_type missing or not an element type"),
    ("lod_level", "negative lod_level"),
    ("Attr.type", "attribute type missing or unknown"),
    ("it is of kind", "attribute of the wrong kind"),
    ("VarType", "variable kind missing or unknown"),
    ("has no tensor", "LoDTensorDesc without its TensorDesc"),
    ("value lacks required fields", "Scalar attribute missing required fields"),
    ("without its value", "SCALAR attribute without its value"),
    ("missing", "another required field missing"),
]


def _reason(message: str) -> str:
    for key, reason in _REASONS:
        if key in message:
            return reason
    return re.sub(r"\d+", "N", message.split("\n")[0])[:80]


@contextlib.contextmanager
def _worker_env():
    """Environment the spawned workers start with (the parent's own JAX is already set up)."""
    saved = {k: os.environ.get(k) for k in ("JAX_PLATFORMS",)}
    os.environ["JAX_PLATFORMS"] = "cpu"
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _Worker:
    def __init__(self, ctx, seeds, memory_headroom, rss_budget) -> None:
        self.conn, child = ctx.Pipe()
        with _worker_env():
            self.proc = ctx.Process(target=worker_mod.serve, args=(child, seeds, memory_headroom, rss_budget),
                                    daemon=True)
            self.proc.start()
        child.close()
        self.pending: collections.deque = collections.deque()
        self.ready = False
        self.since = time.monotonic()

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
        self.proc.join(5)
        with contextlib.suppress(Exception):
            self.conn.close()


def run(seeds: dict, tasks: list, *, workers: int = 2, memory_headroom: int = MEMORY_HEADROOM,
        rss_budget: int = RSS_BUDGET, progress=None) -> Report:
    """Check ``tasks`` (``(seed name, index, run?)``) in ``workers`` processes; the counts."""
    ctx = multiprocessing.get_context("spawn")
    report = Report()
    start = time.monotonic()
    queue = collections.deque(tasks)
    pool = [_Worker(ctx, seeds, memory_headroom, rss_budget) for _ in range(min(workers, max(1, len(tasks))))]
    try:
        while queue or any(w.pending for w in pool):
            for w in pool:
                if w.ready and not w.pending and queue:
                    batch = [queue.popleft() for _ in range(min(BATCH, len(queue)))]
                    w.pending.extend(batch)
                    w.since = time.monotonic()
                    w.conn.send(batch)
            ready = wait([w.conn for w in pool], timeout=1.0)
            now = time.monotonic()
            for i, w in enumerate(pool):
                if w.conn in ready:
                    try:
                        msg = w.conn.recv()
                    except (EOFError, OSError):
                        msg = None
                    if msg is None:  # the worker died
                        w.proc.join(5)
                        code = w.proc.exitcode
                        if w.pending:
                            seed, index, _ = w.pending.popleft()
                            report.failure(seed, index, f"crash: the worker exited with code {code}")
                        elif not w.ready:
                            raise RuntimeError(f"a fuzz worker died while starting (exit code {code})")
                        queue.extendleft(reversed(w.pending))
                        w.kill()
                        pool[i] = _Worker(ctx, seeds, memory_headroom, rss_budget)
                        continue
                    if msg[0] == "ready":
                        w.ready = True
                        continue
                    seed, index, out, _ = msg
                    w.pending.popleft()
                    w.since = now
                    report.add(seed, index, out)
                    if progress and report.mutants % 1000 == 0:
                        progress(report)
                    continue
                if not w.ready:
                    if now - w.since > WORKER_START_S:
                        raise RuntimeError("a fuzz worker did not start in time")
                    continue
                if w.pending:
                    seed, index, runs = w.pending[0]
                    limit = RUN_TIMEOUT_S if runs else TIMEOUT_S
                    if now - w.since > limit:
                        w.pending.popleft()
                        report.failure(seed, index, f"hang: no result after {limit:.0f} s")
                        queue.extendleft(reversed(w.pending))
                        w.kill()
                        pool[i] = _Worker(ctx, seeds, memory_headroom, rss_budget)
    finally:
        for w in pool:
            with contextlib.suppress(Exception):
                w.conn.send(None)
        for w in pool:
            w.proc.join(5)
            if w.proc.is_alive():
                w.kill()
    report.seconds = time.monotonic() - start
    return report


def tasks_for(seed_names, per_seed: int, run_every: int, first: int = 0) -> list:
    """``per_seed`` mutants of each seed, interleaved; every ``run_every``-th one asks for a run."""
    return [(name, i, run_every > 0 and i % run_every == run_every - 1)
            for i in range(first, first + per_seed) for name in seed_names]


def main(argv: list[str]) -> int:
    """``python -m fuzz.harness SEED INDEX [--run]``: replay one mutant here, loudly."""
    import fluidjax  # noqa: F401  (before Paddle)
    from . import mutate, seeds as seeds_mod
    from .worker import Checker

    seed_name, index = argv[0], int(argv[1])
    seeds = seeds_mod.build_all()
    data, mutations = mutate.mutant(seed_name, {k: s.main for k, s in seeds.items()}, index)
    print(f"mutant {seed_name}:{index} ({len(data)} bytes):")
    for m in mutations:
        print("  ", m)
    out = Checker(seeds).check_bytes(seed_name, index, data, run="--run" in argv)
    for stage, result in out.items():
        if stage == "bug":
            print("BUG at", result[0], "-", result[1], result[2])
            print(result[3])
        else:
            print(f"  {stage}: {result}")
    return 1 if "bug" in out else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
