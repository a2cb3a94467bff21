"""The reliability soak (issue 21): training, checkpoints, Ctrl-C and memory refusals at once.

``tests/soak_worker.py`` (its docstring says what it does) runs in a process of its own, so that
its Ctrl-Cs never reach pytest; this test starts it and asserts on the JSON line it prints. See
"The soak" in ``docs/reliability.md``.
"""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _soak(tmp_path, *args, **environ) -> dict:
    """Run the soak worker with ``args`` (and ``environ`` set); its result, once it found no failure."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", **environ)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "soak_worker.py"), str(tmp_path), *args,
                           "--hang", "400"], capture_output=True, text=True, timeout=600, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("SOAK ")]
    assert lines, f"the soak printed no result (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    soak = json.loads(lines[-1][5:])
    print(json.dumps({k: v for k, v in soak.items() if k != "failures"}, indent=1))
    assert not soak["failures"], "\n\n".join(soak["failures"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return soak


@pytest.mark.slow
def test_soak_training_with_checkpoints_ctrl_c_and_memory_refusals(tmp_path):
    soak = _soak(tmp_path, "--runs", "3000")
    counts = soak["counts"]
    # Every kind of fault happened, often enough to mean something.
    assert counts["interrupted after commit"] >= 100, counts
    assert counts["interrupted before commit"] >= 10, counts
    assert counts["refused"] + counts["refused (big batch) and interrupted"] >= 100, counts
    assert counts["main-thread saves interrupted"] >= 5 and counts["main-thread saves"] >= 1, counts
    assert soak["committed"] >= 1000 and soak["checkpoints"] >= 20, soak
    assert soak["distinct checkpoint steps"] >= 10, soak


@pytest.mark.slow
def test_soak_of_a_dynamic_rnn_step_on_the_interruptible_path(tmp_path):
    """The same soak, the recurrent part a Fluid ``DynamicRNN``: its step holds ``while`` ops, so
    it runs undonated in a worker thread, Ctrl-C abandoning it at any moment (its loops poll)."""
    soak = _soak(tmp_path, "--model", "drnn", "--runs", "800")
    counts = soak["counts"]
    assert counts["interrupted while the step ran in its worker"] >= 40, counts
    assert soak["polls"]["polls that ended an abandoned loop"] >= 10, soak["polls"]
    assert counts["refused"] + counts["refused (big batch) and interrupted"] >= 40, counts
    # 16 main-thread saves: all of them may be interrupted (an interrupted one may have completed)
    assert counts["main-thread saves interrupted"] >= 1, counts
    assert counts["main-thread saves"] + counts["main-thread saves interrupted"] == 16, counts
    assert soak["committed"] >= 250 and soak["checkpoints"] >= 10, soak
    assert soak["distinct checkpoint steps"] >= 5 and soak["step threads"] <= 4, soak


@pytest.mark.slow
def test_soak_of_a_dense_model_on_the_prepared_fast_path(tmp_path):
    """The same soak, the model dense (fc relu -> fc softmax, Adam) and its small batches of one
    shape: a repeated run takes the prepared fast path (``Executor._run_fast``), so its Ctrl-C
    deferral, commit and refusals are soaked too (the big batches are refused on the general path)."""
    soak = _soak(tmp_path, "--model", "mlp", "--runs", "3000", FLAGS_fast_run="1")
    counts = soak["counts"]
    assert soak["fast runs"] >= 1500, soak
    assert counts["interrupted after commit"] >= 100 and counts["interrupted before commit"] >= 10, counts
    assert counts["refused"] + counts["refused (big batch) and interrupted"] >= 100, counts
    assert soak["committed"] >= 1000 and soak["checkpoints"] >= 20, soak
    assert soak["distinct checkpoint steps"] >= 10, soak
