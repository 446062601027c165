"""A bounded mixed soak on MariaDB: runners, workers and a server in real processes, clients in threads.

WEAVE_SOAK_SECONDS sets how long the clients send (default 45).
"""

import os

import pytest
from django.db import connection

from history.models import Application, Queue, Task
from tests.reliability.load import NAMESPACE, OPERATIONS, Background, Clients, outcome_of, workload_define

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "mysql", reason="other processes cannot open SQLite's test database"),
]
SECONDS = float(os.environ.get("WEAVE_SOAK_SECONDS", "45"))


def _permit_drift() -> dict:
    """Quota rows of the soak's namespace whose active_tasks is not the number of permits its tasks hold."""
    held = Task.objects.filter(permit_held=True, namespace__name=NAMESPACE)
    drift = {}
    for model, field in ((Queue, "queue_id"), (Application, "application_id")):
        rows = model.objects.filter(namespace__name=NAMESPACE).values_list("id", "name", "active_tasks")
        for row_id, name, active in rows:
            permits = held.filter(**{field: row_id}).count()
            if active != permits:
                drift[name] = (active, permits)
    return drift


def test_a_mixed_soak_keeps_the_invariants_and_leaves_no_instance_stuck(tmp_path, request, reliability_report):
    token = workload_define()
    background = Background.started(tmp_path, token, request.addfinalizer)
    clients = Clients(background.url, token, seed=7)
    clients.run(SECONDS)
    outcome = outcome_of(background, clients)
    reliability_report(
        "soak",
        {
            "starts": clients.counts["start"],
            "signals": clients.counts["signal"],
            "recoveries": clients.counts["recovery"],
            "reads": clients.counts["reads"],
            "5xx": len(clients.server_errors),
            "violations": len(outcome.violations),
        },
    )
    reliability_report("soak recoveries", {op: clients.counts[op] for op in OPERATIONS})
    assert outcome.exited == {}, {role: background.log_tail(role) for role in outcome.exited}
    assert clients.failures == []
    assert clients.server_errors == [], background.log_tail("server")
    assert outcome.violations == []
    assert outcome.check.returncode == 0, outcome.check.stdout + outcome.check.stderr
    assert _permit_drift() == {}
    assert outcome.settled, "the runner still had work due after the settle period"
    assert outcome.stuck == []
    assert (outcome.lost, outcome.duplicated) == ([], [])
    # The load reached every kind of write it is meant to exercise.
    assert clients.counts["start"] >= 24 and clients.counts["signal"] and clients.counts["control"]
    assert clients.counts["recovery"]
