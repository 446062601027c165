"""The benchmarks' database: MariaDB/MySQL only, created when missing and migrated."""

import MySQLdb
from django.conf import settings
from django.core.management import call_command
from django.db import connection


def database_ready() -> None:
    """Create the MariaDB database WEAVE_DATABASE_URL names when it is missing, then migrate it."""
    if connection.vendor != "mysql":
        raise SystemExit("the benchmarks run on MariaDB/MySQL: set WEAVE_DATABASE_URL=mysql://...")
    db = settings.DATABASES["default"]
    server = MySQLdb.connect(
        host=db["HOST"] or "127.0.0.1", port=int(db["PORT"] or 3306), user=db["USER"], password=db["PASSWORD"] or ""
    )
    server.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{db['NAME']}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    server.close()
    call_command("migrate", verbosity=0)
