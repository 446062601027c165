"""A run of the invariant checks that tells how far it has come and can resume where it stopped.

Progress is a line per check: the table rows covered so far (the estimated rows of the tables each
check reads, as ``check.READS`` lists them), their rate and the time left at that rate. A checkpoint
file records each finished check with its findings; a run given the same file skips what it holds
and reports those findings again, so an interrupted check of a large database restarts at the check
it was in. The findings of the checks done earlier are as of the earlier run. The file is removed
once every check has run: the next run starts afresh.
"""

import datetime as dt
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from django.db import connection

from engine.check import CHECKS, READS, Violation


def check_name(check) -> str:
    return check.__name__.lstrip("_")


def rows_estimate(model) -> int:
    """The table's rows as the server estimates them (an exact count where no estimate is kept)."""
    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT table_rows FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = %s",
                [model._meta.db_table],
            )
            row = cursor.fetchone()
        return int(row[0] or 0) if row else 0
    return model.objects.count()


class CheckpointRefused(ValueError):
    """The file is no checkpoint of this database's check."""


class Checkpoint:
    """The checks a run finished, with their findings, in a JSON file bound to one database."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.database = connection.settings_dict["NAME"]
        self.done: dict[str, list[Violation]] = {}
        if path.exists():
            try:
                saved = json.loads(path.read_text())
                done = {name: [Violation(*v[:2], tuple(v[2])) for v in found] for name, found in saved["done"].items()}
                database = saved["database"]
            except (ValueError, KeyError, TypeError, IndexError) as error:
                raise CheckpointRefused(f"{path} is not a checkpoint of weave_check: {error}") from error
            if database != self.database:
                raise CheckpointRefused(f"{path} is a checkpoint of database {database}, not {self.database}")
            self.done = done

    def record(self, name: str, found: list[Violation]) -> None:
        """Add a finished check; the file is replaced whole, so a kill leaves the old one or the new one."""
        self.done[name] = found
        data = {
            "database": self.database,
            "done": {n: [[v.code, v.message, v.ids] for v in f] for n, f in self.done.items()},
        }
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text(json.dumps(data))
        os.replace(partial, self.path)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


def checks_run(
    *, checkpoint: Checkpoint | None = None, progress: Callable[[str], None] | None = None
) -> Iterator[Violation]:
    """Every violation, check by check; each finished check is recorded in ``checkpoint`` and reported to
    ``progress`` as one line."""
    # Each table estimated once, however many checks read it.
    tables = dict.fromkeys(model for models in READS.values() for model in models)
    rows = {model: rows_estimate(model) for model in tables}
    weights = {check: sum(rows[model] for model in READS[check]) for check in CHECKS}
    total, covered = sum(weights.values()), 0
    # The rate counts the checks run here, not those taken from the checkpoint.
    ran_rows, ran_seconds = 0, 0.0
    for number, check in enumerate(CHECKS, start=1):
        name = check_name(check)
        started = time.monotonic()
        resumed = checkpoint is not None and name in checkpoint.done
        if resumed:
            found = checkpoint.done[name]
            yield from found
        else:
            found = []
            for violation in check():
                found.append(violation)
                yield violation
            if checkpoint is not None:
                checkpoint.record(name, found)
            ran_rows, ran_seconds = ran_rows + weights[check], ran_seconds + time.monotonic() - started
        covered += weights[check]
        if progress is not None:
            took = "from the checkpoint" if resumed else f"{time.monotonic() - started:.1f} s"
            rate = ran_rows / ran_seconds if ran_seconds > 0 else 0.0
            left = dt.timedelta(seconds=round((total - covered) / rate)) if rate else "?"
            progress(
                f"[{number:>2}/{len(CHECKS)}] {name:<19} {took}; {covered} of {total} table rows"
                f" ({covered * 100 // max(total, 1)} %), {rate:.0f} rows/s, {left} left"
            )
    if checkpoint is not None:
        checkpoint.clear()
