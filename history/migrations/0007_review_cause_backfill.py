"""Instances already in review get the cause, step and time they entered it with.

The cause is read from the review reason the engine wrote (``review_cause_of``); the texts and
the attempt budget rule are frozen here as they stood when causes began to be recorded. The step
is the one the text names, else the instance's only step in NEEDS_REVIEW or FAILED; the time is
the instance's last change. A text that names no cause is ``unclassified``.
"""

import re

from django.db import migrations
from django.db.models import Sum

_KEY = r"(?P<key>[A-Za-z0-9][A-Za-z0-9_.\-]{0,63})"
# A failed task's cause depends on its step's kind and budget: resolved against the rows.
TASK_FAILED = "task_failed"
# (pattern, cause, whether the cause concerns a step), in the engine's wording.
REASONS = (
    (rf"the outcome of task \w+ of step {_KEY} is unknown \(lease expired\)", "task_outcome_unknown", True),
    (rf"task \w+ of step {_KEY} failed", TASK_FAILED, True),
    (rf"the result of step {_KEY} breaks its contract: .*", "result_contract_violation", True),
    (rf"the answer of poll step {_KEY} matches no classification", "poll_unclassified", True),
    (rf"poll step {_KEY} classified its answer FAILED", "poll_failed", True),
    (rf"poll step {_KEY}: still PENDING, rounds exhausted", "poll_exhausted", True),
    (rf"poll step {_KEY}: still PENDING, poll deadline reached", "poll_deadline_passed", True),
    (rf"poll step {_KEY} passed its poll deadline", "poll_deadline_passed", True),
    (rf"signal \w+ breaks the contract of {_KEY}: .*", "signal_contract_violation", True),
    (rf"the wait of step {_KEY} passed its deadline", "wait_expired", True),
    (rf"timer {_KEY} was first seen too late to fire", "timer_late", True),
    (r"the background set an item aside: .*", "quarantined_input", False),
    (r"corrupt inbox record \w+: .*", "corrupt_inbox_record", False),
)
_COMPILED = tuple((re.compile(pattern, re.DOTALL), cause, named) for pattern, cause, named in REASONS)
UNCLASSIFIED = "unclassified"
INSTANCE_WIDE = ("quarantined_input", "corrupt_inbox_record")


def review_cause_of(reason: str) -> tuple[str, str | None]:
    """(cause, step key the text names) of a review reason; the key is None for an instance-wide cause
    or an unmatched text, whose cause is ``unclassified``."""
    for pattern, cause, named in _COMPILED:
        match = pattern.fullmatch(reason)
        if match:
            return cause, match.group("key") if named else None
    return UNCLASSIFIED, None


def task_budget_left(*, max_attempts: int, attempts_used: int, activations: int) -> bool:
    """Whether a TASK step's chain may still be re-run: attempts left and fewer activations than attempts."""
    return attempts_used < max_attempts and activations < max_attempts


def _task_failed_cause(apps, instance, step) -> str:
    if step.kind == "POLL":
        return "poll_request_failed"
    definition = apps.get_model("history", "WorkflowDefinition").objects.filter(pk=instance.definition_id).first()
    spec = next((s for s in (definition.spec if definition else {}).get("steps", []) if s["key"] == step.key), {})
    used = apps.get_model("history", "Task").objects.filter(source_activation__step_id=step.id)
    used = used.aggregate(n=Sum("attempt_count"))["n"] or 0
    activations = apps.get_model("history", "Activation").objects.filter(step_id=step.id).count()
    left = task_budget_left(max_attempts=spec.get("max_attempts", 1), attempts_used=used, activations=activations)
    return "task_failed_budget_left" if left else "task_budget_exhausted"


def backfill(apps, schema_editor) -> None:
    WorkflowInstance = apps.get_model("history", "WorkflowInstance")
    Step = apps.get_model("history", "Step")
    rows = WorkflowInstance.objects.filter(state="NEEDS_REVIEW", review_cause="").order_by("id")
    last = ""
    while batch := list(rows.filter(id__gt=last).only("id", "definition_id", "review_reason", "updated_at")[:500]):
        last = batch[-1].id
        for instance in batch:
            cause, key = review_cause_of(instance.review_reason)
            steps = Step.objects.filter(instance_id=instance.id)
            step = steps.filter(key=key).first() if key else None
            if step is None and cause not in INSTANCE_WIDE:
                stopped = list(steps.filter(state__in=("NEEDS_REVIEW", "FAILED")).exclude(kind="ROOT")[:2])
                step = stopped[0] if len(stopped) == 1 else None
            if cause == TASK_FAILED:
                cause = _task_failed_cause(apps, instance, step) if step else UNCLASSIFIED
            WorkflowInstance.objects.filter(pk=instance.id).update(
                review_cause=cause, review_step_key=step.key if step else "", review_since=instance.updated_at
            )


class Migration(migrations.Migration):
    dependencies = [
        ("history", "0006_review_causes_timeline"),
    ]

    operations = [
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
