"""What the benchmarks share: the product under gunicorn on 127.0.0.1, an admin login for the in-process client,
percentiles and a process's resident memory."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def admin_client(namespace, username: str = "bench-admin"):
    """A test client logged in as a superuser operating ``namespace`` on every queue."""
    from django.contrib.auth.models import User
    from django.test import Client

    from history.models import Operator

    user, _ = User.objects.get_or_create(username=username, defaults={"is_staff": True, "is_superuser": True})
    Operator.objects.update_or_create(
        user=user, defaults={"namespace": namespace, "actor_id": "e" * 32, "queue_access": "*"}
    )
    client = Client()
    client.force_login(user)
    return client


def reader_token(namespace) -> str:
    """A bearer token reading the history and the audit of ``namespace`` on every queue."""
    from history.credentials import credential_issue
    from history.models import Scope

    reads = {"scopes": [Scope.READ, Scope.AUDIT_READ], "queue_access": "*", "label": "bench"}
    return credential_issue(namespace_id=namespace.id, application_id=None, actor_id="e" * 32, **reads).token


def rss_mib(pid: int | str = "self", field: str = "VmRSS") -> float:
    """A process's resident memory now (``VmHWM``: its peak so far), in MiB (0 once it is gone)."""
    path = Path(f"/proc/{pid}/status")
    lines = path.read_text().splitlines() if path.exists() else []
    return next((int(line.split()[1]) / 1024 for line in lines if line.startswith(f"{field}:")), 0.0)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def free_port() -> int:
    """A port nothing listens on now: two benches (or two runs) never serve on the same one."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve(port: int, *, timeout: int = 30, app: str = "bench.wsgi:application") -> subprocess.Popen:
    """One gunicorn sync worker of ``app`` (by default the product under bench.settings) on ``port``, with this
    process's environment."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings"}
    gunicorn = Path(sys.executable).with_name("gunicorn")
    command = [str(gunicorn), app, "-b", f"127.0.0.1:{port}", "-w", "1"]
    process = subprocess.Popen([*command, "--timeout", str(timeout), "--log-level", "warning"], cwd=ROOT, env=env)
    for _ in range(100):
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            return process
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("gunicorn did not start")
