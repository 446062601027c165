"""Page 1 versus a page deep in a large history, for every keyset list of the read API.

    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/weave python -m bench history_pages --rows 20000 --depth 10000

Builds one workflow with ``--rows`` rows in each list (activations, poll rounds, signals,
signal operations, workflow operations), then times the first page and a page whose cursor
sits ``--depth`` rows down (median of ``--repeat`` requests, limit 20), with the query count
of each. The two should cost the same: keyset pagination never skips or counts rows.
"""

import argparse
import datetime as dt
import statistics
import time

from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from core import clock
from core.ids import new_id
from history import models
from history.credentials import credential_issue
from history.selectors.activations import ACTIVATIONS, POLL_ROUNDS
from history.selectors.operations import WORKFLOW_OPERATIONS
from history.selectors.pagination import cursor_encode
from history.selectors.signals import SIGNAL_OPERATIONS, SIGNALS
from history.tenancy import namespace_ensure


def build(rows: int):
    suffix = new_id()[:8]
    namespace, application, (queue,) = namespace_ensure(name=f"bench-{suffix}", application="app", queues=["q"])
    definition = models.WorkflowDefinition.objects.create(
        namespace=namespace,
        name="bench",
        version=1,
        queues=["q"],
        spec={
            "steps": [
                {"key": "charge", "kind": "TASK", "after": [], "handler": "h", "queue": "q"},
                {"key": "settle", "kind": "POLL", "after": [], "handler": "h", "queue": "q"},
            ]
        },
    )
    instance = models.WorkflowInstance.objects.create(namespace=namespace, definition=definition, input="{}")
    models.Gate.objects.create(instance=instance)
    charge = models.Step.objects.create(instance=instance, key="charge", kind="TASK")
    settle = models.Step.objects.create(instance=instance, key="settle", kind="POLL")
    models.Step.objects.create(instance=instance, key="$root", kind="ROOT")
    poll = models.Activation.objects.create(step=settle, instance=instance, sequence=1, input="{}")
    start = clock.now()
    times = [start + dt.timedelta(milliseconds=n) for n in range(rows)]
    batch = 5000
    models.Activation.objects.bulk_create(
        (
            models.Activation(step=charge, instance=instance, sequence=n + 1, input="{}", created_at=t)
            for n, t in enumerate(times)
        ),
        batch_size=batch,
    )
    tasks = [
        models.Task(
            namespace=namespace,
            application=application,
            queue=queue,
            handler="h",
            input="{}",
            source_instance=instance,
            source_activation=poll,
            source_round=n + 1,
        )
        for n in range(rows)
    ]
    models.Task.objects.bulk_create(tasks, batch_size=batch)
    models.PollRound.objects.bulk_create(
        (models.PollRound(activation=poll, instance=instance, round=t.source_round, task=t) for t in tasks),
        batch_size=batch,
    )
    signal = models.Signal.objects.create(
        namespace=namespace,
        workflow=instance,
        name="s",
        payload="{}",
        target_step_key="settle",
        expires_at=start,
        actor_id="a" * 32,
    )
    models.Signal.objects.bulk_create(
        (
            models.Signal(
                namespace=namespace,
                workflow=instance,
                name="s",
                payload="{}",
                target_step_key="settle",
                accepted_at=t,
                expires_at=t,
                actor_id="a" * 32,
            )
            for t in times
        ),
        batch_size=batch,
    )
    audit = {"namespace": namespace, "workflow": instance, "actor_id": "a" * 32, "reason": "bench"}
    models.SignalOperation.objects.bulk_create(
        (models.SignalOperation(signal=signal, action="workflow.signal", created_at=t, **audit) for t in times),
        batch_size=batch,
    )
    models.WorkflowOperation.objects.bulk_create(
        (models.WorkflowOperation(action="workflow.pause", created_at=t, **audit) for t in times), batch_size=batch
    )
    token = credential_issue(
        namespace_id=namespace.id,
        application_id=application.id,
        actor_id="a" * 32,
        label="bench",
        scopes=["workflows:read", "workflows:audit:read"],
        queue_access="*",
    ).token
    return instance, poll, signal, token


def deep_key(queryset, kind, depth):
    row = queryset.order_by(*(f"-{f}" for f in kind.key))[depth - 1]
    return tuple(getattr(row, f) for f in kind.key)


def timed(client, path, token, params, repeat):
    """Median request time and median SQL time (ms), and the query count."""
    total, sql = [], []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as queries:
            began = time.perf_counter()
            response = client.get(path, params, HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_HOST="127.0.0.1")
            total.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200, response.content
        sql.append(sum(float(q["time"]) for q in queries.captured_queries) * 1000)
    return statistics.median(total), statistics.median(sql), len(queries)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--depth", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args(argv)
    call_command("migrate", verbosity=0)
    instance, poll, signal, token = build(args.rows)
    w = f"/v1/workflows/{instance.id}"
    lists = [
        (
            "activations",
            f"{w}/steps/charge/activations",
            ACTIVATIONS,
            [instance.id, "charge"],
            models.Activation.objects.filter(step__key="charge", instance=instance),
        ),
        (
            "poll rounds",
            f"{w}/steps/settle/activations/{poll.id}/rounds",
            POLL_ROUNDS,
            [instance.id, "settle", poll.id],
            models.PollRound.objects.filter(activation=poll),
        ),
        ("signals", f"{w}/signals", SIGNALS, [instance.id], models.Signal.objects.filter(workflow=instance)),
        (
            "signal operations",
            f"{w}/signals/{signal.id}/operations",
            SIGNAL_OPERATIONS,
            [instance.id, signal.id],
            models.SignalOperation.objects.filter(signal=signal),
        ),
        (
            "workflow operations",
            f"{w}/operations",
            WORKFLOW_OPERATIONS,
            [instance.id],
            models.WorkflowOperation.objects.filter(workflow=instance),
        ),
    ]
    client = Client()
    print(
        f"{connection.vendor}: {args.rows} rows per list, page 1 vs {args.depth} rows deep, limit 20, "
        f"median of {args.repeat}"
    )
    for name, path, kind, parents, queryset in lists:
        cursor = cursor_encode(kind=kind, parents=parents, key=deep_key(queryset, kind, args.depth))
        first_ms, first_sql, first_q = timed(client, path, token, {"limit": "20"}, args.repeat)
        deep_ms, deep_sql, deep_q = timed(client, path, token, {"limit": "20", "cursor": cursor}, args.repeat)
        print(
            f"  {name:20} page 1 {first_ms:6.2f} ms (SQL {first_sql:5.2f} ms, {first_q} queries)"
            f"   deep {deep_ms:6.2f} ms (SQL {deep_sql:5.2f} ms, {deep_q} queries)   ratio {deep_ms / first_ms:.2f}"
        )
