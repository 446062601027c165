"""Whether a repair worked. Every Continue that lets an instance run on from review opens a watch on the step the
review was about (``repair_watch``, in the Continue's transaction); the runner judges it (``pass_repair_checks``):

- EFFECTIVE: the instance left the repaired step — the step succeeded, the instance ended, or a later step is the
  one in review now (for an instance-wide cause: the window passed without it entering review again);
- INEFFECTIVE: back in review for the same cause at the same step, or the step has not moved within the window;
- REGRESSED: the same step is in review again for another cause.

The window is the definition's ``repair_window_seconds``, else the step's own bound (a TASK's deadline, a POLL's,
a SIGNAL's; a TIMER's duration and lateness). A verdict never changes the engine's state (the seeds alone put an
instance in review): it shows on the instance page, in the campaign that made the repair, in the metrics and in
the ``repair.ineffective`` webhook, which names the review's assignee.
"""

import datetime as dt

from django.db.models import Count, QuerySet

from core import clock
from core.times import format_time
from history.models import (
    InstanceState,
    RepairCheck,
    RepairVerdict,
    Step,
    StepKind,
    StepState,
    WorkflowDefinition,
    WorkflowInstance,
)

BATCH = 500
# The window of an instance-wide cause, and of a step whose kind names no bound.
DEFAULT_WINDOW = dt.timedelta(hours=1)
ENDED = (InstanceState.SUCCEEDED, InstanceState.FAILED, InstanceState.CANCELLED)


def repair_window(definition: WorkflowDefinition, step_key: str) -> dt.timedelta:
    """How long the repaired step has to move: the definition's word, else its kind's own bound."""
    if "repair_window_seconds" in definition.spec:
        return dt.timedelta(seconds=definition.spec["repair_window_seconds"])
    spec = definition.step_spec(step_key) if step_key else None
    if spec is None:
        return DEFAULT_WINDOW
    seconds = {
        StepKind.TASK: lambda: spec["deadline_seconds"],
        StepKind.POLL: lambda: spec["poll_deadline_seconds"],
        StepKind.SIGNAL: lambda: spec["deadline_seconds"],
        StepKind.TIMER: lambda: spec["duration_seconds"] + spec["max_lateness_seconds"],
    }.get(spec["kind"])
    return dt.timedelta(seconds=seconds()) if seconds else DEFAULT_WINDOW


def repair_watch(
    *, instance: WorkflowInstance, definition: WorkflowDefinition, cause: str, step_key: str, operation_id: str, now
) -> None:
    """Open the watch of a review lifted now by the Continue ``operation_id`` (one INSERT)."""
    RepairCheck.objects.create(
        namespace_id=instance.namespace_id,
        instance_id=instance.id,
        definition_id=definition.id,
        step_key=step_key,
        cause=cause,
        operation_id=operation_id,
        made_at=now,
        due_at=now + repair_window(definition, step_key),
    )


def repairs_due(now: dt.datetime) -> QuerySet:
    """What ``pass_repair_checks`` reads: the open watches (each judged by its own due time and its instance)."""
    return RepairCheck.objects.filter(verdict=RepairVerdict.WATCHING)


def pass_repair_checks() -> int:
    """A runner pass: judge the open watches, the earliest due first; how many got their verdict."""
    now = clock.now()
    checks = list(repairs_due(now).order_by("due_at", "id")[:BATCH])
    instances = WorkflowInstance.objects.in_bulk({check.instance_id for check in checks})
    steps = {
        (instance_id, key): state
        for instance_id, key, state in Step.objects.filter(instance_id__in=list(instances)).values_list(
            "instance_id", "key", "state"
        )
    }
    judged = 0
    for check in checks:
        instance = instances.get(check.instance_id)
        if instance is None:
            continue
        found = _verdict(check, instance, steps.get((check.instance_id, check.step_key)), now)
        if found is not None:
            verdict, detail = found
            judged += RepairCheck.objects.filter(pk=check.pk, verdict=RepairVerdict.WATCHING).update(
                verdict=verdict, detail=detail[:512], judged_at=now
            )
    return judged


def _verdict(check: RepairCheck, instance: WorkflowInstance, step_state: str | None, now) -> tuple[str, str] | None:
    """The verdict the instance's state gives the watch now, or None while it stays open."""
    where = f"step {check.step_key}" if check.step_key else "the instance"
    if instance.state == InstanceState.NEEDS_REVIEW and instance.review_since and instance.review_since > check.made_at:
        since = format_time(instance.review_since)
        if instance.review_step_key == check.step_key and instance.review_cause == check.cause:
            return (
                RepairVerdict.INEFFECTIVE,
                f"{where} is back in review for the same cause ({check.cause}) since {since}",
            )
        if instance.review_step_key == check.step_key:
            return RepairVerdict.REGRESSED, f"{where} failed again, another way ({instance.review_cause}) at {since}"
        return RepairVerdict.EFFECTIVE, f"{where} was left: step {instance.review_step_key} is in review now"
    if check.step_key and step_state == StepState.SUCCEEDED:
        return RepairVerdict.EFFECTIVE, f"{where} succeeded"
    if instance.state in ENDED:
        return RepairVerdict.EFFECTIVE, f"the instance ended {instance.state}"
    if now < check.due_at:
        return None
    window = format_time(check.due_at)
    if not check.step_key:
        return RepairVerdict.EFFECTIVE, f"the instance did not enter review again by {window}"
    return RepairVerdict.INEFFECTIVE, f"no progress: {where} is still {step_state} at {window}"


def repair_verdicts(instance_ids, *, since: dt.datetime) -> dict[str, int]:
    """The watches of these instances opened since ``since``, counted by verdict (every verdict, zero included)."""
    rows = RepairCheck.objects.filter(instance_id__in=instance_ids, made_at__gte=since)
    counts = dict(rows.values_list("verdict").annotate(n=Count("id")).order_by())
    return {verdict: counts.get(verdict, 0) for verdict in RepairVerdict.values}
