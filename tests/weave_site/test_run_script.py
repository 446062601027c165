"""`make run PORT=… METRICS_PORT=…`: the demo script checks its ports before anything else and serves on them.

The script runs in a copy of the tree whose scripts/setup.sh and .venv/bin/python only write down how they were
called, so a run takes no time, installs nothing and starts no server.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tree(tmp_path):
    """A copy of Makefile and scripts/ with stand-ins for setup.sh and python; ``calls`` lists what they ran."""
    shutil.copy(ROOT / "Makefile", tmp_path)
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    calls = tmp_path / "calls"
    for stand_in in (tmp_path / "scripts" / "setup.sh", tmp_path / ".venv" / "bin" / "python"):
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stand_in.write_text(f'#!/bin/sh\necho "$(basename "$0") $*" >> {calls}\n')
        stand_in.chmod(0o755)
    return tmp_path


def run(tree: Path, *command: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """``command`` in ``tree`` with only ``env`` besides PATH and HOME; the answer and the stand-ins' calls."""
    base = {"PATH": os.environ["PATH"], "HOME": str(tree), "WEAVE_SECRET_KEY": "k" * 50}
    calls = tree / "calls"
    calls.unlink(missing_ok=True)
    # SIGTERM ignored from the start, and so in every process the command starts: the script's exit trap stops its
    # background jobs with it, and here every stand-in writes its call down before the output ends.
    ignoring_term = ["sh", "-c", 'trap "" TERM; exec "$@"', "sh", *command]
    done = subprocess.run(
        ignoring_term, cwd=tree, env=base | env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    return done, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize("variable", ["PORT", "METRICS_PORT"])
@pytest.mark.parametrize("bad", ["http", "0", "65536", "08000", "80 ", "-1", "8e3", "99999999999999999999"])
def test_a_port_that_is_not_1_to_65535_stops_the_script_in_one_line_before_anything_runs(tree, variable, bad):
    done, calls = run(tree, "bash", "scripts/run.sh", **{variable: bad})
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"run.sh: {variable}: '{bad}' is not a port number from 1 to 65535"]
    assert (done.stdout, calls) == ("", [])


def test_the_same_port_for_both_is_refused(tree):
    done, calls = run(tree, "bash", "scripts/run.sh", PORT="9000", METRICS_PORT="9000")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["run.sh: METRICS_PORT: 9000 is PORT too; the metrics need a port of their own"]
    assert calls == []


def _served(calls: list[str]) -> tuple[str, str]:
    """The address runserver and weave_metrics were given, after collectstatic ran."""
    commands = [call.split()[2] if call.startswith("python manage.py") else call for call in calls]
    assert commands.index("collectstatic") < commands.index("runserver")
    runserver = next(call for call in calls if " runserver " in call).split()
    metrics = next(call for call in calls if " weave_metrics " in call).split()
    assert "--insecure" not in runserver
    return runserver[3], metrics[metrics.index("--bind") + 1]


def test_the_demo_serves_on_8000_and_its_metrics_on_9108_by_default(tree):
    done, calls = run(tree, "bash", "scripts/run.sh")
    assert done.returncode == 0, done.stderr
    assert _served(calls) == ("127.0.0.1:8000", "127.0.0.1:9108")
    assert "API: http://127.0.0.1:8000/v1/" in done.stdout and "http://127.0.0.1:9108/metrics" in done.stdout


def test_make_run_hands_its_ports_to_the_script(tree):
    done, calls = run(tree, "make", "-s", "run", "PORT=8080", "METRICS_PORT=9200")
    assert done.returncode == 0, done.stderr
    assert _served(calls) == ("127.0.0.1:8080", "127.0.0.1:9200")
    assert "admin: http://127.0.0.1:8080/admin/" in done.stdout and "http://127.0.0.1:9200/metrics" in done.stdout
    refused, calls = run(tree, "make", "-s", "run", "PORT=eighty")
    assert refused.returncode != 0 and calls == []
    assert "run.sh: PORT: 'eighty' is not a port number from 1 to 65535" in refused.stderr.splitlines()
