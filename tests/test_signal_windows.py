"""Signal deferral under storms (``lowering/signals.py``): a window never defers nothing.

A run donates its state to XLA inside a ``deferred_signals`` window; a handler that raises there
drops the only copy of the parameters. The reliability soak (``tests/soak_worker.py``) once lost a
run's state so: a Ctrl-C raised while a window was being opened made its clean-up raise again on
entering ``_restore``, before the nesting depth was reset, and every later window took itself for
a nested one and swapped no handler. This storms a loop of windows (each dispatching a jitted
step) with timer signals whose handler sends SIGINT, and checks at every window's start and end
that the SIGINT handler is the recording one, and between windows that the depth is 0 and no
handler is left saved.

It runs in a process of its own: its Ctrl-Cs must never reach pytest.
"""

import json
import os
import subprocess
import sys

WORKER = r'''
import json, signal, sys, time
import jax, jax.numpy as jnp
from fluidjax.lowering import signals as sg

seconds, min_windows = float(sys.argv[1]), int(sys.argv[2])
armed = [False]
counts = {"interrupts": 0, "timer shots": 0, "windows": 0, "interrupted windows": 0}
bad = []

def on_sigint(signum, frame):
    if armed[0]:                      # only inside the loop's try: the harness itself is never hit
        counts["interrupts"] += 1
        raise KeyboardInterrupt

def on_alarm(signum, frame):
    counts["timer shots"] += 1
    signal.raise_signal(signal.SIGINT)

signal.signal(signal.SIGINT, on_sigint)
signal.signal(signal.SIGALRM, on_alarm)
step = jax.jit(lambda x: x * 2 + 1)
x = jnp.ones(16)
step(x)
window = sg.deferred_signals()
signal.setitimer(signal.ITIMER_REAL, 1e-4, 7e-5)
start = time.monotonic()
while time.monotonic() - start < seconds or counts["windows"] < min_windows:
    armed[0] = True
    try:
        with window:
            counts["windows"] += 1
            if sg._getsignal(signal.SIGINT) is not sg._record:
                bad.append(f"window {counts['windows']} opened with SIGINT's handler in place (depth {sg._depth[0]})")
            junk = [object() for _ in range(32)]       # allocations: the GC (and JAX's GC callback) runs
            y = step(x)
            if sg._getsignal(signal.SIGINT) is not sg._record:
                bad.append(f"window {counts['windows']} ends with SIGINT's handler in place")
    except KeyboardInterrupt:
        counts["interrupted windows"] += 1
    finally:
        armed[0] = False
    if sg._depth[0] != 0:
        bad.append(f"after window {counts['windows']}: depth {sg._depth[0]}, {len(sg._saved)} handlers saved")
    if bad or time.monotonic() - start > 4 * seconds:
        break
signal.setitimer(signal.ITIMER_REAL, 0)
print("RESULT " + json.dumps({"counts": counts, "bad": bad[:5]}), flush=True)
'''


def test_a_storm_of_raising_handlers_never_leaves_a_window_open_or_undeferred(tmp_path):
    script = tmp_path / "storm.py"
    script.write_text(WORKER)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, str(script), "6", "20000"], capture_output=True, text=True,
                          timeout=300, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"no result (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    result = json.loads(lines[-1][7:])
    assert not result["bad"], result
    counts = result["counts"]
    # The storm did what it is for: many windows, many of them interrupted (at their opening,
    # or by the delivery of the signals they deferred).
    assert counts["windows"] >= 20000 and counts["interrupted windows"] >= 1000, counts


def _with_handlers(handlers: dict, body):
    """Run ``body()`` with ``handlers`` (signal number -> handler) installed; restored after."""
    import signal

    previous = {s: signal.signal(s, h) for s, h in handlers.items()}
    try:
        return body()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def test_two_ctrl_cs_in_a_window_both_run_at_its_exit_and_none_is_left_over():
    """Two Ctrl-Cs inside one window: both handlers run at its exit (the second while the first's
    KeyboardInterrupt is handled, so one exception leaves the window, chained to the other), and
    none waits for the next window (which once ended a later, unrelated run with a
    KeyboardInterrupt)."""
    import signal

    from fluidjax.lowering import signals as sg

    calls = []

    def on_sigint(signum, frame):
        calls.append(signum)
        raise KeyboardInterrupt("one")

    def body():
        raised = []
        try:
            with sg.deferred_signals():
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt as exc:
            raised.append(exc)
        with sg.deferred_signals():        # the next window: nothing of the first is left
            pass
        return raised

    raised = _with_handlers({signal.SIGINT: on_sigint}, body)
    assert len(raised) == 1 and isinstance(raised[0].__context__, KeyboardInterrupt)
    assert calls == [signal.SIGINT, signal.SIGINT] and not sg._pending


def test_every_recorded_handler_runs_at_the_exit_even_when_one_raises():
    """A timer's signal and a Ctrl-C recorded in one window: both handlers run at its exit, in the
    order the signals came; the Ctrl-C's exception carries the timer's as its context, as Python
    chains an exception raised while another is handled."""
    import signal

    from fluidjax.lowering import signals as sg

    order = []

    def on_alarm(signum, frame):
        order.append("alarm")
        raise RuntimeError("timer")

    def on_sigint(signum, frame):
        order.append("sigint")
        raise KeyboardInterrupt("ctrl-c")

    def body():
        try:
            with sg.deferred_signals():
                signal.raise_signal(signal.SIGALRM)
                signal.raise_signal(signal.SIGINT)
                order.append("window")
        except KeyboardInterrupt as exc:
            return exc
        return None

    exc = _with_handlers({signal.SIGINT: on_sigint, signal.SIGALRM: on_alarm}, body)
    assert order == ["window", "alarm", "sigint"]
    assert isinstance(exc, KeyboardInterrupt) and isinstance(exc.__context__, RuntimeError)
    assert not sg._pending
