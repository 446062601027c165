"""kill -9 of the runners executing a repair campaign, at random moments, on MariaDB: every item is decided
exactly once and the ledger is complete.

``WEAVE_CAMPAIGN_CRASH_ITEMS`` sets the campaign's size (200 in the suite; the issue's 2 000 is a run of its own).
"""

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from django.db import connection

from core.identity import Identity
from engine.check import invariants_check
from history.models import (
    Campaign,
    CampaignItem,
    CampaignState,
    Decision,
    InstanceState,
    ItemOutcome,
    Scope,
    WorkflowInstance,
    WorkflowOperation,
)
from recovery.campaigns import campaign_make, campaign_move
from testkit import states
from tests.reliability.load import ROOT, database_url

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "mysql", reason="other processes cannot open SQLite's test database"),
]
ITEMS = int(os.environ.get("WEAVE_CAMPAIGN_CRASH_ITEMS", "200"))
SEED = 20261206
KILLS = 3
DEADLINE = 600  # seconds for the whole campaign, kills included


def _runner(log) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", "weave_runner", "--interval", "0.1"],
        cwd=ROOT,
        env={**os.environ, "WEAVE_DATABASE_URL": database_url(), "PYTHONUNBUFFERED": "1"},
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def test_kill_9_of_the_executors_decides_every_item_exactly_once(engine, tmp_path, reliability_report):
    states.unknown_fleet(engine, ITEMS)
    assert WorkflowInstance.objects.filter(state=InstanceState.NEEDS_REVIEW).count() == ITEMS
    operator = Identity(
        namespace_id=engine.namespace.id, actor_id="d" * 32, scopes=frozenset({Scope.RECOVER, Scope.READ}), queues=None
    )
    command = {
        "title": "gateway outage",
        "kind": "conclude",
        "step_key": "charge",
        "conclusion": "SUCCEEDED",
        "result": {"paid": True},
        "reason": "the settlement report lists every charge as paid",
        "evidence_ref": "ticket:OPS-77",
        "declared": True,
        "canary_size": ITEMS,
        "halt_percent": 1,
        "rate_per_second": 1000,
    }
    campaign = campaign_make(
        identity=operator, instances=WorkflowInstance.objects.all(), source="all", command=command, owner="olga"
    )
    campaign_move(identity=operator, campaign_id=campaign.id, action="started", by="olga")
    rng = random.Random(SEED)
    kills, began = 0, time.monotonic()
    with open(tmp_path / "runners.log", "ab") as log:
        runners = [_runner(log), _runner(log)]
        try:
            while Campaign.objects.get(pk=campaign.pk).state == CampaignState.RUNNING:
                assert time.monotonic() - began < DEADLINE, "the campaign did not finish"
                time.sleep(rng.uniform(0.5, 3.0))
                if kills < KILLS:  # a runner dies mid-item, wherever it is; another takes its place
                    victim = rng.randrange(len(runners))
                    os.killpg(runners[victim].pid, signal.SIGKILL)
                    runners[victim].wait(10)
                    runners[victim] = _runner(log)
                    kills += 1
            # The decisions' last steps, which wait on the runner's inbox and continuations.
            deadline = time.monotonic() + 120
            while Decision.objects.exclude(state="SUCCEEDED").exists() and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            for process in runners:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(10)
    seconds = time.monotonic() - began
    campaign.refresh_from_db()
    outcomes = Counter(CampaignItem.objects.filter(campaign=campaign).values_list("outcome", flat=True))
    decisions = Counter(Decision.objects.values_list("workflow_id", flat=True))
    operations = Counter(WorkflowOperation.objects.values_list("workflow_id", "action"))
    reliability_report(
        "campaign crash",
        {"items": ITEMS, "kills": kills, "seconds": round(seconds, 1), "items/s": round(ITEMS / seconds, 1)},
    )
    assert kills == KILLS and campaign.state == CampaignState.DONE
    assert outcomes == {ItemOutcome.APPLIED: ITEMS}  # the ledger is complete: every item, no pending one
    assert set(decisions.values()) == {1} and len(decisions) == ITEMS  # one decision per instance
    assert set(operations.values()) == {1}  # each operation of each chain once
    assert set(Decision.objects.values_list("state", flat=True)) == {"SUCCEEDED"}
    assert set(WorkflowInstance.objects.values_list("state", flat=True)) == {InstanceState.SUCCEEDED}
    assert [str(v) for v in invariants_check()] == []
