"""Survey: do the grad ops Paddle writes run in fluidjax, with Paddle's gradients?

For every row of the op-test table (``tests/optable``) that Paddle checks, the row's one-op
program plus a weighted-mean loss is handed to Paddle 2.6.2, which appends its own backward
(``paddle.static.append_backward``: Paddle's grad op makers choose the grad ops' slots, e.g.
``transpose2_grad`` reads ``XShape`` and no ``X``). That program is serialized, parsed by fluidjax
and run; its input gradients are compared with Paddle's run of the same program. Then the
programs of ``tests/test_paddle_backward_programs_2.py`` (built with Paddle's Python API and its
``gradients``: dropout, batch_norm, the reshape family, ...) are run the same way ("api:" rows).

Run:  .venv/bin/python benchmarks/paddle_grad_coverage.py [op_type ...] [--verbose]
Prints one line per failing row and a per-op count: ops whose every row passes / ops surveyed.
"""

from __future__ import annotations

import collections
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import numpy as np  # noqa: E402

import fluidjax as fj  # noqa: E402  (jax before paddle)
from fluidjax.ir import registry  # noqa: E402
import paddle_oracle as po  # noqa: E402
import paddle  # noqa: E402
import test_op_table as table  # noqa: E402
import test_paddle_backward_programs_2 as api_cases  # noqa: E402


def paddle_grad_types(program) -> list[str]:
    """The grad op types in a Paddle program's global block."""
    return sorted({op.type for op in program.global_block().ops if op.type.endswith("_grad")})


def check_row(case) -> tuple[str, str]:
    """("pass" | "skip" | "fail", detail) for one table row."""
    forward = table.Built(case)
    values = table._run_fluidjax(forward, forward.compared_outputs())
    weights = table._loss_weights(case, forward, values)
    if not weights:
        return "skip", "no float output"
    built = table.Built(case, weights, table._output_lods(case, forward))
    targets = built.grad_inputs()
    if not targets:
        return "skip", "no float input"
    prog = po.parse(built.main.serialize())
    with paddle.static.program_guard(prog):
        paddle.static.append_backward(prog.global_block().var(built.loss.name))
    grad_names = [t + "@GRAD" for t in targets]
    present = [n for n in grad_names if prog.global_block().has_var(n)]
    if not present:
        return "skip", "Paddle writes no input gradient"
    theirs = po.run(prog, built.feed, present, lods=built.lods)
    parsed = fj.Program.parse(prog.desc.serialize_to_string())
    ours = fj.Executor().run(parsed, feed=table._fluidjax_feed(built, built.feed), fetch_list=present,
                             scope=fj.Scope())
    for name, a, e in zip(present, ours, theirs):
        a, e = np.asarray(a), np.asarray(e)
        if a.shape != e.shape:
            return "fail", f"{name}: shape {a.shape} vs Paddle {e.shape}"
        tol = max(case.grad_rtol, 1e-4)
        if not np.allclose(a, e, rtol=tol, atol=max(case.grad_atol, 1e-5), equal_nan=True):
            return "fail", f"{name}: max |diff| {np.max(np.abs(a - e)):.3g} ({', '.join(paddle_grad_types(prog))})"
    return "pass", ", ".join(paddle_grad_types(prog))


def check_api_case(name: str) -> tuple[str, str]:
    """A program built with Paddle's Python API (``tests/test_paddle_backward_programs_2.py``)."""
    names, ours, theirs = api_cases.gradients_in_both(name)
    for g, a, e in zip(names, ours, theirs):
        a, e = np.asarray(a), np.asarray(e)
        if a.shape != e.shape or not np.allclose(a, e, rtol=1e-4, atol=1e-5):
            return "fail", f"{g}: differs from Paddle"
    return "pass", ""


def main(argv: list[str]) -> int:
    verbose = "--verbose" in argv
    only = {a for a in argv if not a.startswith("--")}
    rows = [c for c in table.GRADED if c.paddle and (not only or c.op in only)]
    by_op: dict[str, list[str]] = collections.defaultdict(list)
    for case in rows:
        try:
            status, detail = check_row(case)
        except Exception as exc:  # a survey: record every failure, go on
            status, detail = "fail", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            if verbose:
                traceback.print_exc()
        by_op[case.op].append(status)
        if status == "fail" or verbose:
            print(f"{status:4} {case.id}: {detail}", flush=True)
    # Programs from Paddle's Python API: random ops (dropout), layers (batch_norm, instance_norm).
    for name in api_cases.CASE_NAMES:
        if only and name.split("-")[0] not in only:
            continue
        try:
            status, detail = check_api_case(name)
        except Exception as exc:  # a survey: record every failure, go on
            status, detail = "fail", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        by_op["api:" + name.split("-")[0]].append(status)
        if status == "fail" or verbose:
            print(f"{status:4} api:{name}: {detail}", flush=True)
    surveyed = {op: s for op, s in by_op.items() if any(x != "skip" for x in s)}
    passing = sorted(op for op, s in surveyed.items() if "fail" not in s)
    failing = sorted(op for op, s in surveyed.items() if "fail" in s)
    n_rows = collections.Counter(s for ss in by_op.values() for s in ss)
    print(f"rows: {n_rows['pass']} pass, {n_rows['fail']} fail, {n_rows['skip']} skip")
    print(f"ops: {len(passing)} / {len(surveyed)} run Paddle's backward with Paddle's gradients")
    if failing:
        print("failing ops:", " ".join(failing))
    return 0 if not failing else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
