"""Start N local processes of one training script: ``python -m fluidjax.distributed.launch``.

    python -m fluidjax.distributed.launch --nproc 2 train.py --epochs 3

Each process gets the environment :func:`fluidjax.distributed.init` reads — fluidjax's
``FLUIDJAX_COORDINATOR_ADDRESS`` / ``FLUIDJAX_NUM_PROCESSES`` / ``FLUIDJAX_PROCESS_ID`` and
Paddle's ``PADDLE_TRAINER_ID`` / ``PADDLE_TRAINERS_NUM`` / ``PADDLE_TRAINER_ENDPOINTS`` /
``PADDLE_CURRENT_ENDPOINT`` — with a coordinator port picked free on localhost.
``--devices-per-proc K`` gives each process K forced host (CPU) devices. When one process fails,
the others are stopped; ``--timeout`` bounds the whole run. The exit status is the first
failure's (0 when all succeed; 124 on timeout).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def process_env(rank: int, nproc: int, endpoints: list[str], devices_per_proc: int | None,
                base: dict | None = None) -> dict:
    """The environment of process ``rank`` of ``nproc``."""
    env = dict(os.environ if base is None else base)
    env.update({
        "FLUIDJAX_COORDINATOR_ADDRESS": endpoints[0], "FLUIDJAX_NUM_PROCESSES": str(nproc),
        "FLUIDJAX_PROCESS_ID": str(rank),
        "PADDLE_TRAINER_ID": str(rank), "PADDLE_TRAINERS_NUM": str(nproc),
        "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints), "PADDLE_CURRENT_ENDPOINT": endpoints[rank],
    })
    if devices_per_proc:
        flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
        env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={devices_per_proc}"])
    return env


def launch(script_args: list[str], nproc: int, devices_per_proc: int | None = None, timeout: float | None = None,
           host: str = "127.0.0.1") -> int:
    """Run ``python script_args...`` in ``nproc`` processes; the exit status of the run."""
    if nproc < 1:
        raise ValueError(f"--nproc must be at least 1, got {nproc}")
    ports = [free_port(host) for _ in range(nproc)]
    endpoints = [f"{host}:{p}" for p in ports]
    procs = [subprocess.Popen([sys.executable, *script_args],
                              env=process_env(rank, nproc, endpoints, devices_per_proc))
             for rank in range(nproc)]
    deadline = None if timeout is None else time.monotonic() + timeout
    status = 0
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [c for c in codes if c not in (None, 0)]
            if failed:
                status = failed[0]
                break
            if all(c == 0 for c in codes):
                break
            if deadline is not None and time.monotonic() > deadline:
                print(f"fluidjax.distributed.launch: the run took more than {timeout:g} s; stopping it",
                      file=sys.stderr)
                status = 124
                break
            time.sleep(0.05)
    finally:
        _stop(procs)
    return status


def _stop(procs) -> None:
    """Stop the processes this launcher started that are still running."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        p.send_signal(signal.SIGTERM)
    end = time.monotonic() + 5
    for p in running:
        try:
            p.wait(timeout=max(end - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fluidjax.distributed.launch",
                                     description="Start N local processes of a fluidjax training script.")
    parser.add_argument("--nproc", type=int, required=True, help="number of processes")
    parser.add_argument("--devices-per-proc", type=int, default=None,
                        help="forced host (CPU) devices per process (XLA_FLAGS)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds before the run is stopped")
    parser.add_argument("script", help="the Python script each process runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the script")
    args = parser.parse_args(argv)
    return launch([args.script, *args.args], args.nproc, args.devices_per_proc, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
