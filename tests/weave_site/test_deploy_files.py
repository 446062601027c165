"""The files a deployment starts from: the systemd units verify, the Procfile names real commands, and
gunicorn.conf.py reads its settings from the environment and refuses a bad one by name."""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import get_commands
from honcho.environ import parse_procfile

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
# The instance a template unit is verified as.
INSTANCES = {
    "weave-runner@.service": "weave-runner@0.service",
    "weave-worker@.service": "weave-worker@payments.service",
}


def _units_for(tmp_path: Path) -> list[Path]:
    """The units as installed from this checkout: /opt/weave is where the docs put the code."""
    installed = []
    for unit in sorted(UNITS.glob("*.service")):
        target = tmp_path / INSTANCES.get(unit.name, unit.name)
        target.write_text(unit.read_text().replace("/opt/weave", str(ROOT)))
        installed.append(target)
    return installed


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None and os.environ.get("CI") != "true",
    reason="systemd-analyze is not installed (CI requires it)",
)
def test_every_systemd_unit_verifies_without_a_word(tmp_path):
    units = _units_for(tmp_path)
    assert {u.name for u in units} == {
        "weave-web.service",
        "weave-runner@0.service",
        "weave-worker@payments.service",
        "weave-metrics.service",
        "weave-notify.service",
    }
    # systemd-analyze only warns (exit 0) about a directive it cannot parse: any output is a failure.
    result = subprocess.run(["systemd-analyze", "verify", *map(str, units)], capture_output=True, text=True)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_a_unit_systemd_cannot_read_is_reported(tmp_path):
    """The check above can fail: a misspelt value is a warning naming it."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    unit = tmp_path / "weave-metrics.service"
    unit.write_text((UNITS / "weave-metrics.service").read_text().replace("Restart=always", "Restart=sometimes"))
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert "sometimes" in result.stderr


def test_every_procfile_process_runs_a_command_that_exists():
    processes = parse_procfile((ROOT / "Procfile").read_text()).processes
    assert {"web", "runner", "notify", "metrics"} <= set(processes) and any(p.startswith("worker") for p in processes)
    commands = get_commands()
    for name, line in processes.items():
        assert line.startswith("exec "), name  # else a shell stands between honcho's signal and the process
        argv = shlex.split(line)[1:]
        if argv[0] == "gunicorn":
            assert argv[1:] == ["weave_site.wsgi:application"], name
        else:
            assert argv[:2] == ["python", "manage.py"] and argv[2] in commands, name


def _gunicorn_settings(**environ) -> subprocess.CompletedProcess:
    script = "import runpy, json; s = runpy.run_path('gunicorn.conf.py'); print(json.dumps([s['workers'], s['bind']]))"
    env = {k: v for k, v in os.environ.items() if k not in ("WEB_CONCURRENCY", "WEAVE_BIND")} | environ
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)


def test_gunicorn_takes_workers_and_address_from_the_environment():
    default = _gunicorn_settings()
    assert default.stdout.strip() == f'[{os.cpu_count() * 2 + 1}, "127.0.0.1:8000"]'
    chosen = _gunicorn_settings(WEB_CONCURRENCY="3", WEAVE_BIND="0.0.0.0:9000")
    assert chosen.stdout.strip() == '[3, "0.0.0.0:9000"]'


def test_gunicorn_refuses_a_bad_setting_by_its_name():
    result = _gunicorn_settings(WEB_CONCURRENCY="many")
    assert result.returncode != 0
    assert "WEB_CONCURRENCY: 'many' is not a positive whole number" in result.stderr
