"""A repair campaign at scale: how fast the background decides its items, and how fast a large selection is frozen
and previewed (targets: ≥ 50 items/s over 10 000 items with RSS flat; the preview of 100 000 ≤ 10 s).

    export WEAVE_SECRET_KEY=...
    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/any python -m bench campaigns \
        [--items 1000] [--runners 1] [--selection 100000]

Two databases on the server WEAVE_DATABASE_URL names, created and migrated here. ``weave_bench_campaign_run`` gets
``--items`` instances in review in a namespace of their own each run (each task's only attempt UNKNOWN, built
through the engine), whose campaign — *the work ended this way*: ReviewTask, ResolveStep and Continue per item, the
canary covering every item — ``--runners`` ``weave_runner`` processes take to its end.
``weave_bench_campaign_preview`` holds ``--selection`` instances in review (bare rows, seeded once; its campaigns
emptied each run), frozen into one campaign and previewed. Prints the items a second (and the operations, three per
item), each runner's RSS at every quarter of the ledger, the freeze and preview seconds, each beside its target.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from django.db import connection

from bench.database import database_switch
from bench.serving import rss_mib
from core.identity import Identity
from core.ids import new_id
from history.models import (
    Campaign,
    CampaignItem,
    CampaignState,
    Decision,
    InstanceState,
    ItemOutcome,
    Scope,
    WorkflowDefinition,
    WorkflowInstance,
)
from history.tenancy import namespace_ensure
from recovery.campaigns import campaign_make, campaign_move, campaign_preview
from testkit import states
from testkit.driver import Engine

ROOT = Path(__file__).resolve().parents[1]
ITEMS_TARGET = 50.0
PREVIEW_TARGET = 10.0
CHUNK = 5_000
COMMAND = {
    "title": "bench",
    "kind": "conclude",
    "step_key": "charge",
    "conclusion": "SUCCEEDED",
    "result": {"paid": True},
    "reason": "the settlement report lists every charge as paid",
    "evidence_ref": "ticket:BENCH-1",
    "declared": True,
    "halt_percent": 100,
    "rate_per_second": 1000,
}


def _operator(namespace_id: str) -> Identity:
    return Identity(
        namespace_id=namespace_id, actor_id="b" * 32, scopes=frozenset({Scope.RECOVER, Scope.READ}), queues=None
    )


def run(items: int, runners: int) -> None:
    database_switch("weave_bench_campaign_run")
    # A namespace of its own each run: the engine driver's idempotency keys start again in every process.
    namespace, application, queues = namespace_ensure(
        name=f"bench-campaign-{new_id()[:8]}", application="billing", queues=["payments"]
    )
    started = time.monotonic()
    built = states.unknown_fleet(Engine(namespace, application, queues), items)
    print(f"built {items} instances in review in {time.monotonic() - started:.1f} s")
    selection = WorkflowInstance.objects.filter(pk__in=[instance.pk for instance in built])
    operator = _operator(namespace.id)
    campaign = campaign_make(
        identity=operator, instances=selection, source="bench", command={**COMMAND, "canary_size": items}, owner="bench"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "manage.py", "weave_runner", "--interval", "0.1"]
    processes = [
        subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(runners)
    ]
    time.sleep(2)  # the runners are up before the clock starts
    began = time.monotonic()
    campaign_move(identity=operator, campaign_id=campaign.id, action="started", by="bench")
    quarters, rss = [items // 4, items // 2, 3 * items // 4, items], []
    try:
        while Campaign.objects.get(pk=campaign.pk).state == CampaignState.RUNNING or quarters:
            done = CampaignItem.objects.filter(campaign=campaign).exclude(outcome=ItemOutcome.PENDING).count()
            while quarters and done >= quarters[0]:
                rss.append([round(rss_mib(p.pid), 1) for p in processes])
                quarters.pop(0)
            time.sleep(0.2)
        ledger = time.monotonic() - began
        while Decision.objects.filter(workflow__in=selection.values("id")).exclude(state="SUCCEEDED").exists():
            time.sleep(0.2)
        chains = time.monotonic() - began
    finally:
        for process in processes:
            process.terminate()
            process.wait(10)
    applied = CampaignItem.objects.filter(campaign=campaign, outcome=ItemOutcome.APPLIED).count()
    print(f"{'items':>6} {'runners':>7} {'ledger s':>9} {'items/s':>8} {'target':>7} {'chains s':>9} {'ops/s':>7}")
    print(
        f"{items:>6} {runners:>7} {ledger:>9.1f} {applied / ledger:>8.1f} {ITEMS_TARGET:>7.0f} {chains:>9.1f}"
        f" {3 * applied / chains:>7.1f}"
    )
    print(f"applied {applied} of {items}; runner RSS MiB at each quarter of the ledger: {rss}")


def preview(selection: int) -> None:
    database_switch("weave_bench_campaign_preview")
    Campaign.objects.all().delete()
    namespace = namespace_ensure(name="bench-campaign", application="billing", queues=["payments"])[0]
    definition = WorkflowDefinition.objects.filter(namespace=namespace).first() or WorkflowDefinition.objects.create(
        namespace=namespace, name="bench", version=1, spec={"steps": []}, queues=["payments"]
    )
    rows = WorkflowInstance.objects.filter(namespace=namespace)
    seeded = rows.count()
    for start in range(seeded, selection, CHUNK):
        WorkflowInstance.objects.bulk_create(
            WorkflowInstance(
                id=new_id(),
                namespace=namespace,
                definition=definition,
                input="{}",
                state=InstanceState.NEEDS_REVIEW,
                review_cause="task_outcome_unknown",
                review_step_key="charge",
            )
            for _ in range(min(CHUNK, selection - start))
        )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE TABLE {WorkflowInstance._meta.db_table}")
        cursor.fetchall()
    started = time.monotonic()
    campaign = campaign_make(
        identity=_operator(namespace.id),
        instances=rows,
        source="bench",
        command={**COMMAND, "canary_size": 10},
        owner="b",
    )
    frozen = time.monotonic() - started
    started = time.monotonic()
    groups = campaign_preview(campaign)
    previewed = time.monotonic() - started
    print(f"{'selection':>9} {'freeze s':>9} {'preview s':>10} {'target s':>9}  groups")
    summary = "; ".join(f"{group.count} {group.verdict}" for group in groups)
    print(f"{campaign.total:>9} {frozen:>9.2f} {previewed:>10.2f} {PREVIEW_TARGET:>9.1f}  {summary}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000, help="instances the run campaign decides")
    parser.add_argument("--runners", type=int, default=1, help="weave_runner processes")
    parser.add_argument("--selection", type=int, default=100_000, help="instances the previewed campaign selects")
    args = parser.parse_args(argv)
    run(args.items, args.runners)
    preview(args.selection)
