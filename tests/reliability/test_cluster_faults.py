"""Node faults of a three-node Galera cluster under the soak's mixed load: kill -9 one node and restart it
(it rejoins by IST or SST), then another, then freeze one (SIGSTOP: the others stop hearing it and go on
without it, as across a network partition) and let it come back. The background's processes and the
server are spread over the nodes (``WEAVE_DATABASE_NODE``); node 1, where this test's own connection
goes, stays up.

Afterwards: no acknowledged write lost or doubled, every keyed retry answered by its stored receipt, no
task leased twice, quota counters equal to the permits held, ``weave_check`` clean. An answer given while a
node was lost is 503 UNAVAILABLE, never 500; clients send it again with its key.

Runs on a cluster URL (several nodes) with ``WEAVE_GALERA`` naming the cluster's control script
(``make test-cluster`` sets both).
"""

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import MySQLdb
import pytest
from django.db import connection

from history.models import Attempt
from tests.reliability.load import Background, Clients, outcome_of, workload_define
from tests.reliability.test_soak import _permit_drift

GALERA = os.environ.get("WEAVE_GALERA", "")
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not (connection.settings_dict.get("NODES") and GALERA),
        reason="needs a cluster URL and WEAVE_GALERA (make test-cluster)",
    ),
]
SECONDS = 90
SEED = 1804


def _galera(*args: str) -> None:
    done = subprocess.run([GALERA, *args], capture_output=True, text=True, timeout=240)
    if done.returncode != 0:
        raise AssertionError(f"galera.sh {' '.join(args)}: {done.stderr[-2000:]}")


def _frozen(node: int, seconds: float) -> None:
    pid = int((Path(GALERA).resolve().parents[1] / "var" / "galera" / f"node{node}" / "mysqld.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def _faults(done: list, errors: list) -> None:
    """Node 2 killed and restarted, node 3 killed and restarted, node 2 frozen for 10 s."""
    try:
        for node in (2, 3):
            time.sleep(6)
            _galera("kill", str(node))
            done.append(f"kill {node}")
            time.sleep(10)  # the others evict it first (evs.inactive_timeout 6 s): it rejoins as a new member
            _galera("node-start", str(node))  # returns once the node is Synced again
        time.sleep(4)
        _frozen(2, 10)
        done.append("partition 2")  # once it runs again it rejoins by itself (IST)
    except Exception as exc:  # surfaced by the test
        errors.append(exc)


def _cluster_counts() -> dict[str, int]:
    """Transactions committed and certification conflicts on every node, since each node's last start."""
    settings = connection.settings_dict
    counts = {"transactions since each node's last start": 0, "certification conflicts since then": 0}
    for host, port in settings["NODES"]:
        node = MySQLdb.connect(host=host, port=port, user=settings["USER"], password=settings["PASSWORD"])
        try:
            cursor = node.cursor()
            cursor.execute(
                "SHOW STATUS WHERE Variable_name IN "
                "('wsrep_local_commits', 'wsrep_local_cert_failures', 'wsrep_local_bf_aborts')"
            )
            status = {name: int(value) for name, value in cursor.fetchall()}
        finally:
            node.close()
        counts["transactions since each node's last start"] += status["wsrep_local_commits"]
        counts["certification conflicts since then"] += (
            status["wsrep_local_cert_failures"] + status["wsrep_local_bf_aborts"]
        )
    return counts


def _leased_twice() -> list:
    """Tasks with two attempts whose leases overlap: one began before the one before it ended."""
    overlapping = []
    attempts = Attempt.objects.order_by("task_id", "number").values_list(
        "task_id", "number", "started_at", "finished_at", "lease_expires_at"
    )
    previous = None
    for task_id, number, started, finished, lease_end in attempts:
        if previous is not None and previous[0] == task_id and started < previous[1]:
            overlapping.append((task_id, number))
        previous = (task_id, finished or lease_end or started)
    return overlapping


def test_node_kills_and_a_partition_under_load_lose_and_double_nothing(tmp_path, request, reliability_report):
    token = workload_define()
    background = Background.started(tmp_path, token, request.addfinalizer)
    clients = Clients(background.url, token, seed=SEED)
    done, errors = [], []
    faults = threading.Thread(target=_faults, args=(done, errors), daemon=True)
    faults.start()
    clients.run(SECONDS)
    faults.join(120)
    background.wait_ready(token)
    outcome = outcome_of(background, clients)
    acknowledged = sum(effect.acknowledged for effect in clients.effects)
    reliability_report(
        "cluster",
        _cluster_counts()
        | {
            "node kills": sum(f.startswith("kill") for f in done),
            "partitions": sum(f.startswith("partition") for f in done),
            "acknowledged": acknowledged,
            "lost": len(outcome.lost),
            "doubled": len(outcome.duplicated),
            "503 answers": sum(" 503 " in e for e in clients.server_errors),
            "replays": clients.counts["replayed"],
        },
    )
    assert errors == [] and done == ["kill 2", "kill 3", "partition 2"]
    assert outcome.exited == {}, {role: background.log_tail(role) for role in outcome.exited}
    assert clients.failures == []
    assert [e for e in clients.server_errors if " 503 " not in e] == [], background.log_tail("server")
    assert outcome.violations == []
    assert outcome.check.returncode == 0, outcome.check.stdout + outcome.check.stderr
    assert (outcome.lost, outcome.duplicated) == ([], [])
    assert _leased_twice() == []
    assert _permit_drift() == {}
    assert outcome.settled, "the runner still had work due after the settle period"
    assert outcome.stuck == []
    assert acknowledged and clients.counts["recovery"]
