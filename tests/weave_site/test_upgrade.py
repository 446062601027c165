"""An upgrade migrates first, while the previous release's background still runs: the previous release must work
on the new schema. Here it does, on MariaDB (the production database, strict about columns it is not given).

The previous release is the code before the newest migration was added (the working tree's last commit while that
migration is not committed yet): its demo drives every scenario through its own engine, runner and worker code
against a database the new code migrated, its background processes take a pass each, and the new code's
invariant check finds nothing wrong.
"""

import os
import re
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import MySQLdb
import pytest
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / "history" / "migrations"

pytestmark = pytest.mark.skipif(connection.vendor != "mysql", reason="the upgrade is checked on MariaDB")


def _git(*args: str) -> bytes:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, check=True).stdout


def previous_release() -> str:
    """The commit before the newest migration: its parent once the migration is committed, else HEAD."""
    newest = max(p.name for p in MIGRATIONS.glob("0*.py"))
    added = _git("log", "--diff-filter=A", "--format=%H", "-1", "--", f"history/migrations/{newest}").decode().strip()
    return f"{added}^" if added else "HEAD"


@pytest.fixture
def database(worker_id):
    """A database of its own on the test server, dropped afterwards; its URL for the processes."""
    config = settings.DATABASES["default"]
    server = {"host": config["HOST"], "port": int(config["PORT"]), "user": config["USER"], "passwd": config["PASSWORD"]}
    name = f"weave_upgrade_{worker_id}"
    admin = MySQLdb.connect(**server)
    try:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
        admin.cursor().execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
        password = f":{config['PASSWORD']}" if config["PASSWORD"] else ""
        yield f"mysql://{config['USER']}{password}@{config['HOST']}:{config['PORT']}/{name}"
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


def _manage(tree: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WEAVE_DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "weave_site.settings_test"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=tree, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"{tree.name}: manage.py {' '.join(args)}\n{result.stdout}\n{result.stderr}"
    return result


def test_the_previous_release_runs_its_background_on_the_new_schema(tmp_path, database):
    previous = tmp_path / "previous"
    previous.mkdir()
    with tarfile.open(fileobj=BytesIO(_git("archive", previous_release())), mode="r:") as archive:
        archive.extractall(previous, filter="data")
    assert sorted(p.name for p in (previous / "history" / "migrations").glob("0*.py")) < sorted(
        p.name for p in MIGRATIONS.glob("0*.py")
    ), "the previous release lacks the newest migration"

    _manage(ROOT, database, "migrate", "--no-input")
    # Its scenarios run through its engine, runner passes and worker code: every write of the old code.
    seeded = _manage(previous, database, "weave_demo")
    assert "namespace demo" in seeded.stdout and len(_instances(seeded.stdout)) >= 10
    _manage(previous, database, "weave_runner", "--once")
    _manage(previous, database, "weave_worker", "--namespace", "demo", "--queue", "demo-tasks", "--once")
    _manage(previous, database, "weave_worker", "--namespace", "demo", "--queue", "demo-polls", "--once")

    _manage(ROOT, database, "weave_check")
    # The new code reads what the old one wrote: the same instances, found rather than seeded again.
    assert _instances(_manage(ROOT, database, "weave_demo").stdout) == _instances(seeded.stdout)


def _instances(listing: str) -> set[str]:
    return set(re.findall(r"instance ([0-9a-f]{32})", listing))
