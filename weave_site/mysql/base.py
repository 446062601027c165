"""Django's MySQL/MariaDB backend, with a transaction costing two control round trips instead of three.

Django opens an ``atomic`` block by turning autocommit off (``SET autocommit=0``) and turns it
back on after the COMMIT (``SET autocommit=1``). Here the block opens with ``START TRANSACTION``
and the session stays in autocommit mode: after the COMMIT or ROLLBACK there is nothing to turn
back on (mysqlclient sends no ``SET autocommit=1`` when the server already reports it on). This is
the hook Django's SQLite backend uses for its BEGIN; it applies to ``atomic`` only: a manual
``set_autocommit(False)`` still turns autocommit off.
"""

from django.db.backends.mysql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def _start_transaction_under_autocommit(self) -> None:
        with self.cursor() as cursor:
            cursor.execute("START TRANSACTION")
