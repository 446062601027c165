"""A MariaDB server of a bench's own: its own data directory under var/, its own port, the server's defaults
(a 128 MiB buffer pool) and no pool dump or load, so the bench may restart it to read from a cold pool without
touching the shared server or its settings. Its data stays between runs: a seeded database is seeded once."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import MySQLdb
from django.db import connection

from bench.serving import ROOT, free_port

MARIADBD = "/usr/sbin/mariadbd"


class PrivateServer:
    def __init__(self, name: str):
        self.datadir = ROOT / "var" / f"bench-mariadb-{name}"
        self.socket = Path("/tmp") / f"weave-bench-{name}.sock"
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        if not (self.datadir / "mysql").exists():
            self.datadir.mkdir(parents=True, exist_ok=True)
            install = shutil.which("mariadb-install-db") or "mariadb-install-db"
            command = [install, "--no-defaults", f"--datadir={self.datadir}", "--skip-test-db", *self._user()]
            subprocess.run([*command, "--auth-root-authentication-method=normal"], check=True, capture_output=True)
        command = [MARIADBD, "--no-defaults", f"--datadir={self.datadir}", f"--port={self.port}"]
        command += [f"--socket={self.socket}", "--bind-address=127.0.0.1", "--skip-name-resolve", *self._user()]
        # Cold means cold: the pool starts empty rather than reloading what the last run left in it.
        command += ["--innodb-buffer-pool-load-at-startup=0", "--innodb-buffer-pool-dump-at-shutdown=0"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                MySQLdb.connect(host="127.0.0.1", port=self.port, user="root").close()
                return
            except MySQLdb.OperationalError:
                time.sleep(0.2)
        self.stop()
        raise SystemExit(f"the bench's MariaDB server in {self.datadir} did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=120)
            self.process = None

    def restart(self) -> None:
        """Stopped and started again: the next reads come from disk (or the system's file cache), not the pool."""
        connection.close()
        self.stop()
        self.start()

    def use(self, database: str) -> str:
        """Point this process and the ones it starts at ``database`` on this server; its URL."""
        url = f"mysql://root@127.0.0.1:{self.port}/{database}"
        os.environ["WEAVE_DATABASE_URL"] = url
        connection.close()
        connection.settings_dict.update(HOST="127.0.0.1", PORT=self.port, USER="root", PASSWORD="", NAME=database)
        return url

    @staticmethod
    def _user() -> list[str]:
        return ["--user=root"] if os.geteuid() == 0 else []
