"""What a refused form tells the operator when someone acted on the instance first: who did what, when, and a
link to it, rather than the bare refusal (ABORTED for a moved revision, FAILED_PRECONDITION for a state the
other operation left)."""

from django import forms
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.audit import actor_names
from console.forms import attach_error
from console.queue import age
from core import clock
from core.errors import Aborted, FailedPrecondition, WeaveError
from core.ids import parse_revision
from history.models import WorkflowInstance, WorkflowOperation
from recovery.operations import OPERATIONS

# The operations read back, newest first, to find the latest one with revisions (a proposal's has none).
LOOK_BACK = 10
TITLES = {operation.action: operation.title for operation in OPERATIONS.values()}


def acted_since(instance: WorkflowInstance, seen, *, field: str = "revision") -> WorkflowOperation | None:
    """The latest operation on the instance made at or after ``seen``, the ``field`` (``revision`` or
    ``control_revision``) of the page the form was read from; None when none was (only the background moved)."""
    seen = parse_revision(str(seen))
    if seen is None:
        return None
    latest = WorkflowOperation.objects.filter(workflow_id=instance.id).order_by("-created_at", "-id")
    for operation in latest[:LOOK_BACK]:
        before = operation.before or {}
        # A recovery operation's snapshot holds the instance's under "instance"; a control's is the instance's.
        revision = parse_revision(str(before.get("instance", before).get(field, "")))
        if revision is not None:
            return operation if revision >= seen else None
    return None


def acted_words(operation: WorkflowOperation, *, user, instance: WorkflowInstance, outcome: str) -> SafeString:
    """Who did what and when, e.g. "Review task was already applied by olga (operators) 3 s ago (operation …),
    <outcome>": the operation links to its audit row for those who may read it, else to the instance's timeline,
    where its events name it."""
    who = actor_names([operation]).get((operation.namespace_id, operation.actor_id)) or operation.actor_id
    title = TITLES.get(operation.action) or operation.action.removeprefix("workflow.").replace("_", " ").capitalize()
    if user.has_perm("history.view_workflowoperation"):
        url = reverse("admin:history_workflowoperation_change", args=[operation.id])
    else:
        url = reverse("admin:history_workflowinstance_change", args=[instance.id]) + "#timeline"
    elapsed = clock.now() - operation.created_at
    ago = f"{max(int(elapsed.total_seconds()), 0)} s" if elapsed.total_seconds() < 60 else age(elapsed)
    return format_html(
        '{} was already applied by {} {} ago (operation <a href="{}" data-operation-id="{}">{}</a>), {}',
        title,
        who,
        ago,
        url,
        operation.operation_id,
        operation.operation_id,
        outcome,
    )


def refusal_attach(
    form: forms.Form, error: WeaveError, *, instance: WorkflowInstance, user, seen, field: str = "revision"
) -> SafeString | None:
    """Show a service refusal on the form. When the instance moved or is no longer as the form expects
    (ABORTED, FAILED_PRECONDITION) because of an operation made since the page the form was read from (``seen``:
    its ``field``), say which, by whom and when, with the refusal after it; else the refusal alone
    (``attach_error``). Returns those words, or None."""
    operation = acted_since(instance, seen, field=field) if isinstance(error, Aborted | FailedPrecondition) else None
    if operation is None:
        attach_error(form, error)
        return None
    words = acted_words(
        operation, user=user, instance=instance, outcome=format_html("so this form was refused: {}", error.message)
    )
    form.add_error(None, words)
    return words
