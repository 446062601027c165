"""What a process sends its MariaDB server: statements, round trips and commits, counted at the client.

Every request the client library makes is one round trip: a statement (``query``), a COMMIT or
ROLLBACK, and an ``autocommit`` switch when it changes the session's mode. Transaction control
sent as a statement (START TRANSACTION, BEGIN, COMMIT, ROLLBACK, SET autocommit) is a round trip
but not a statement. The engine's processes and the floor's are counted the same way.
"""

import dataclasses
import re

_CONTROL = re.compile(rb"^\s*(START\s+TRANSACTION|BEGIN|COMMIT|ROLLBACK|SET\s+autocommit)\b", re.IGNORECASE)


@dataclasses.dataclass
class Wire:
    statements: int = 0
    round_trips: int = 0
    commits: int = 0

    def __add__(self, other: "Wire") -> "Wire":
        return Wire(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other), strict=True)))

    def __sub__(self, other: "Wire") -> "Wire":
        return Wire(*(a - b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other), strict=True)))

    def per(self, tasks: int) -> tuple[float, float, float]:
        return self.statements / tasks, self.round_trips / tasks, self.commits / tasks


HEADER = f"{'tasks/s':>8} {'stmts':>7} {'trips':>7} {'commits':>8} {'p50 ms':>7} {'p95 ms':>7}"


def wire_collect(results, processes) -> Wire:
    """The sum of the wires the stopped ``processes`` put on ``results``, once each has ended."""
    wire = sum((results.get(timeout=60) for _ in processes), Wire())
    for process in processes:
        process.join(timeout=30)
    return wire


def wire_count(raw, wire: Wire) -> None:
    """Count what the MySQLdb connection ``raw`` sends into ``wire`` (its methods are wrapped per instance)."""
    query, commit, rollback, autocommit = raw.query, raw.commit, raw.rollback, raw.autocommit

    def counted_query(sql):
        text = sql if isinstance(sql, bytes | bytearray) else str(sql).encode()
        wire.round_trips += 1
        if text[:24].upper().lstrip().startswith(b"COMMIT"):
            wire.commits += 1
        elif not _CONTROL.match(text[:24]):
            wire.statements += 1
        return query(sql)

    def counted_commit():
        wire.round_trips += 1
        wire.commits += 1
        return commit()

    def counted_rollback():
        wire.round_trips += 1
        return rollback()

    def counted_autocommit(on):
        if raw.get_autocommit() != bool(on):
            wire.round_trips += 1
        return autocommit(on)

    raw.query, raw.commit, raw.rollback, raw.autocommit = (
        counted_query,
        counted_commit,
        counted_rollback,
        counted_autocommit,
    )
