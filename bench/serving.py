"""What the HTTP benchmarks share: the product under gunicorn on 127.0.0.1, and percentiles."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def free_port() -> int:
    """A port nothing listens on now: two benches (or two runs) never serve on the same one."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve(port: int, *, timeout: int = 30) -> subprocess.Popen:
    """One gunicorn sync worker of bench.settings on ``port``, with this process's environment."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings"}
    gunicorn = Path(sys.executable).with_name("gunicorn")
    command = [str(gunicorn), "bench.wsgi:application", "-b", f"127.0.0.1:{port}", "-w", "1"]
    process = subprocess.Popen([*command, "--timeout", str(timeout), "--log-level", "warning"], cwd=ROOT, env=env)
    for _ in range(100):
        try:
            httpx.get(f"http://127.0.0.1:{port}/v1/credentials/self", timeout=1)
            return process
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("gunicorn did not start")
