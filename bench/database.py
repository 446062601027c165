"""The benchmarks' database: MariaDB/MySQL only, created when missing and migrated."""

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import MySQLdb
from django.conf import settings
from django.core.management import call_command
from django.db import connection


def _mysql_only() -> None:
    if connection.vendor != "mysql":
        raise SystemExit("the benchmarks run on MariaDB/MySQL: set WEAVE_DATABASE_URL=mysql://...")


def database_ready() -> None:
    """Create the MariaDB database WEAVE_DATABASE_URL names when it is missing, then migrate it."""
    _mysql_only()
    db = settings.DATABASES["default"]
    server = MySQLdb.connect(
        host=db["HOST"] or "127.0.0.1", port=int(db["PORT"] or 3306), user=db["USER"], password=db["PASSWORD"] or ""
    )
    server.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{db['NAME']}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    server.close()
    call_command("migrate", verbosity=0)


def database_switch(name: str) -> None:
    """Use the database ``name`` on the server WEAVE_DATABASE_URL names, in this process and in the ones it
    starts (a bench that keeps one database per size), created when missing and migrated."""
    _mysql_only()
    os.environ["WEAVE_DATABASE_URL"] = urlunsplit(urlsplit(os.environ["WEAVE_DATABASE_URL"])._replace(path=f"/{name}"))
    connection.close()
    connection.settings_dict["NAME"] = name
    database_ready()


def seed_summary_path() -> Path:
    """Where bench/seed.py records what it seeded in this database (one file per database)."""
    return Path(__file__).resolve().parents[1] / "var" / f"bench-seed-{settings.DATABASES['default']['NAME']}.json"


def buffer_pool_mib() -> int:
    """The server's InnoDB buffer pool in MiB: its owner's setting, which a bench reports and never changes."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@innodb_buffer_pool_size")
        return cursor.fetchone()[0] // 2**20
