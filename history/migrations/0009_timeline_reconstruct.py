"""A reconstructed timeline prefix for every instance that has no events yet.

From the rows that exist: the instance's created event, then each of its rows in (created_at, id)
order — a created event in the row's initial state and, when the row has moved on, a state event
to the state it holds now; audits as ``audit.created``. Every event is marked reconstructed and
attributed to the engine: who acted is not known any more.
"""

from django.db import migrations

from core.ids import new_id

BATCH = 500
ROOT_STEP_KIND = "ROOT"


def _initial(model_name: str, row) -> str | None:
    """The state a row is created in (None for rows without a state)."""
    if model_name == "Step" and row.kind == ROOT_STEP_KIND:
        return "ACTIVE"
    field = next((f for f in row._meta.fields if f.name == "state"), None)
    return field.default if field is not None else None


class _Batch:
    """The rows of a batch of instances, by instance, with the step key of each."""

    def __init__(self, apps, instance_ids: list[str]):
        get = lambda name: apps.get_model("history", name)  # noqa: E731 - a short alias
        self.rows: dict[str, list[tuple]] = {i: [] for i in instance_ids}
        steps = list(get("Step").objects.filter(instance_id__in=instance_ids))
        step_key = {s.id: s.key for s in steps}
        activations = list(get("Activation").objects.filter(instance_id__in=instance_ids))
        activation_key = {a.id: step_key.get(a.step_id, "") for a in activations}
        tasks = list(get("Task").objects.filter(source_instance_id__in=instance_ids))
        task_place = {t.id: (t.source_instance_id, activation_key.get(t.source_activation_id, "")) for t in tasks}
        signals = list(get("Signal").objects.filter(workflow_id__in=instance_ids))
        signal_key = {s.id: s.target_step_key for s in signals}
        task_ids = list(task_place)
        for row in steps:
            self._add(row, "step", row.instance_id, row.key)
        for row in activations:
            self._add(row, "activation", row.instance_id, activation_key[row.id])
        for row in tasks:
            self._add(row, "task", *task_place[row.id])
        for row in get("Attempt").objects.filter(task_id__in=task_ids):
            self._add(row, "attempt", *task_place[row.task_id], when=row.started_at)
        for row in get("Wait").objects.filter(instance_id__in=instance_ids):
            self._add(row, "wait", row.instance_id, step_key.get(row.step_id, ""))
        for row in signals:
            self._add(row, "signal", row.workflow_id, row.target_step_key, when=row.accepted_at)
        for row in get("InboxRecord").objects.filter(instance_id__in=instance_ids):
            key = activation_key.get(row.activation_id) or signal_key.get(row.signal_id, "")
            self._add(row, "inbox", row.instance_id, key)
        for row in get("ResultEvent").objects.filter(task_id__in=task_ids):
            self._add(row, "result", *task_place[row.task_id])
        for row in get("WorkflowOperation").objects.filter(workflow_id__in=instance_ids):
            self._add(row, "audit", row.workflow_id, row.step_key)
        for row in get("ExecutionAudit").objects.filter(task_id__in=task_ids):
            self._add(row, "audit", *task_place[row.task_id])
        for row in get("SignalOperation").objects.filter(workflow_id__in=instance_ids):
            self._add(row, "audit", row.workflow_id, signal_key.get(row.signal_id, ""))

    def _add(self, row, subject: str, instance_id: str, step_key: str, when=None) -> None:
        if instance_id in self.rows:
            self.rows[instance_id].append((when or row.created_at, row.id, subject, step_key, row))


def _detail(subject: str, row) -> str:
    if subject == "instance":
        return row.review_cause
    if subject == "inbox":
        return row.disposition
    if subject == "result":
        return "LATE" if row.late else row.kind
    if subject == "audit":
        return row.action
    return ""


def _events(InstanceEvent, instance, rows: list[tuple]) -> list:
    events = []

    def add(kind: str, subject: str, row, step_key: str, before: str, after: str, when, detail: str) -> None:
        audit = subject == "audit"
        events.append(
            InstanceEvent(
                id=new_id(),
                instance_id=instance.id,
                sequence=len(events) + 1,
                kind=kind,
                subject_type=subject,
                subject_id=row.id,
                step_key=step_key,
                before=before,
                after=after,
                detail=detail[:64],
                actor_kind="engine",
                audit_id=row.id if audit else "",
                operation_id=row.operation_id if audit else "",
                reconstructed=True,
                created_at=when,
            )
        )

    def follow(subject: str, row, step_key: str, when) -> None:
        initial = _initial(type(row).__name__, row)
        moved = initial is not None and row.state != initial
        # The detail (a review cause, a disposition) belongs to the row as it is now: the last event.
        add(
            f"{subject}.created",
            subject,
            row,
            step_key,
            "",
            initial or "",
            when,
            "" if moved else _detail(subject, row),
        )
        if moved:
            add(f"{subject}.state", subject, row, step_key, initial, row.state, when, _detail(subject, row))

    follow("instance", instance, "", instance.created_at)
    for when, _, subject, step_key, row in sorted(rows, key=lambda r: (r[0], r[1])):
        follow(subject, row, step_key, when)
    return events


def timeline_reconstruct(apps, schema_editor) -> None:
    WorkflowInstance = apps.get_model("history", "WorkflowInstance")
    InstanceEvent = apps.get_model("history", "InstanceEvent")
    with_events = InstanceEvent.objects.values("instance_id")
    last = ""
    while True:
        instances = list(
            WorkflowInstance.objects.filter(id__gt=last).exclude(id__in=with_events).order_by("id")[:BATCH]
        )
        if not instances:
            return
        batch = _Batch(apps, [i.id for i in instances])
        events = []
        for instance in instances:
            events += _events(InstanceEvent, instance, batch.rows[instance.id])
        InstanceEvent.objects.bulk_create(events, batch_size=BATCH)
        last = instances[-1].id


def timeline_reconstruct_undo(apps, schema_editor) -> None:
    apps.get_model("history", "InstanceEvent").objects.filter(reconstructed=True).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("history", "0008_instance_query_indexes"),
    ]

    operations = [
        migrations.RunPython(timeline_reconstruct, timeline_reconstruct_undo),
    ]
