"""What the plan tests read from MariaDB's own account of a query it ran (ANALYZE FORMAT=JSON)."""

import json
import re

import pytest
from django.db import connection

# A plan test module's marks (``pytestmark = MARIADB_PLANS``).
MARIADB_PLANS = [
    # ANALYZE TABLE commits: each test starts from emptied tables instead of a rolled-back transaction.
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "mysql", reason="query plans are MariaDB's"),
]

_CONDITION = re.compile(r'^(\s*"\w*condition": )".*"(,?)$', re.MULTILINE)


def analysed(sql: str, params=None) -> tuple[list[dict], str]:
    """Run ``sql`` under ANALYZE: every table it read (each node naming one, however deeply nested), and the report.
    Without ``params`` the SQL runs as it is (a captured query, its values in place)."""
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE FORMAT=JSON {sql}", params)
        report = cursor.fetchone()[0]

    def tables(node):
        if isinstance(node, dict):
            if "table_name" in node:
                yield node
            for value in node.values():
                yield from tables(value)
        elif isinstance(node, list):
            for value in node:
                yield from tables(value)

    # MariaDB prints a condition's text unescaped (a JSON path's quotes break the document): the plan tests read
    # the rows and keys, never the conditions.
    readable = _CONDITION.sub(r'\1"…"\2', report)
    return list(tables(json.loads(readable))), report
