"""kill -9 of the server, a runner and a worker under load on MariaDB: nothing acknowledged is lost or doubled.

Clients retry a keyed write with the same Idempotency-Key through an outage, as a careful client does; the
database is then asked how often each write took effect.
"""

import random
import threading
import time

import pytest
from django.db import connection

from tests.reliability.load import Background, Clients, outcome_of, workload_define

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "mysql", reason="other processes cannot open SQLite's test database"),
]
SECONDS = 30
SEED = 20260
RUNNERS, WORKERS = ("runner-1", "runner-2"), ("worker-a", "worker-b")


def _kills(background: Background, rng: random.Random, began: float, errors: list) -> None:
    """The server, a runner and a worker, then two more of any, each at a random moment and restarted."""
    roles = ["server", rng.choice(RUNNERS), rng.choice(WORKERS)]
    roles += rng.choices(["server", *RUNNERS, *WORKERS], k=2)
    moments = sorted(rng.uniform(2, SECONDS - 6) for _ in roles)
    try:
        for at, role in zip(moments, rng.sample(roles, len(roles)), strict=True):
            time.sleep(max(0.0, began + at - time.monotonic()))
            background.kill(role)
            time.sleep(rng.uniform(0.2, 1.0))
            background.start(role)
    except Exception as exc:  # surfaced by the test
        errors.append(exc)


def test_kill_9_under_load_loses_and_duplicates_no_acknowledged_write(tmp_path, request, reliability_report):
    token = workload_define()
    background = Background.started(tmp_path, token, request.addfinalizer)
    clients = Clients(background.url, token, seed=SEED)
    errors: list = []
    killer = threading.Thread(
        target=_kills, args=(background, random.Random(SEED), time.monotonic(), errors), daemon=True
    )
    killer.start()
    clients.run(SECONDS)
    killer.join(10)
    background.wait_ready(token)  # the last restart is serving before the background stops
    outcome = outcome_of(background, clients)
    acknowledged = sum(effect.acknowledged for effect in clients.effects)
    reliability_report(
        "crash",
        {
            "kills": background.kills,
            "acknowledged": acknowledged,
            "lost": len(outcome.lost),
            "duplicated": len(outcome.duplicated),
            "violations": len(outcome.violations),
            "requests without an answer": clients.counts["no answer"],
            "replays": clients.counts["replayed"],
        },
    )
    assert errors == [] and background.kills == 5
    assert outcome.exited == {}, {role: background.log_tail(role) for role in outcome.exited}
    assert clients.failures == []
    assert outcome.violations == []
    assert outcome.check.returncode == 0, outcome.check.stdout + outcome.check.stderr
    assert outcome.lost == []
    assert outcome.duplicated == []
    assert outcome.settled, "the runner still had work due after the settle period"
    assert outcome.stuck == []
    assert clients.server_errors == [], background.log_tail("server")
