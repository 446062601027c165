"""How the console names and links an instance, and links to the recovery forms, carrying the revisions of the
rows the operator was looking at."""

from urllib.parse import urlencode

from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from history.models import Step, Task, WorkflowInstance
from recovery.operations import OPERATIONS

# How many hex digits of an id stand for it where a name leads (the whole id on hover and in the copy).
SHORT_ID = 8


def _lead(instance: WorkflowInstance) -> str:
    definition = f"{instance.definition.name} v{instance.definition.version}"
    return f"{instance.business_key} · {definition}" if instance.business_key else definition


def instance_name(instance: WorkflowInstance) -> str:
    """How the console names an instance, in text (titles, exports): its business key and definition
    ("refund-77 · payments v3"); without a business key, its definition and the start of its id. The caller
    reads the instance with its definition (``select_related("definition")``)."""
    if instance.business_key:
        return _lead(instance)
    return f"{_lead(instance)} · {instance.id[:SHORT_ID]}"


def copy_button(value: str, what: str) -> SafeString:
    """A small button copying ``value`` (console/static/console/copy.js handles every ``data-copy``)."""
    return format_html(
        '<button type="button" class="weave-link-button" data-copy="{}" aria-label="Copy the {}">copy</button>',
        value,
        what,
    )


def instance_label(instance: WorkflowInstance) -> SafeString:
    """The instance's name linked to its page, then its id: short, whole on hover, with a copy button."""
    url = reverse("admin:history_workflowinstance_change", args=[instance.id])
    return format_html(
        '<a href="{}" data-instance-name>{}</a> <code class="weave-muted" title="{}">{}…</code> {}',
        url,
        _lead(instance),
        instance.id,
        instance.id[:SHORT_ID],
        copy_button(instance.id, "instance id"),
    )


def operation_link(
    instance: WorkflowInstance, step: Step | None, name: str, entry: dict, tasks: dict[str, Task]
) -> dict:
    """One operation of an eligibility: its words, whether it is possible (or why not) and its form's URL."""
    query = {"revision": instance.revision}
    if step is not None:
        query |= {"step": step.key, "step_revision": step.revision, "activation": step.current_activation_id or ""}
    if entry.get("task_id"):
        task = tasks.get(entry["task_id"])
        query |= {"task": entry["task_id"], "task_revision": task.revision if task else ""}
    url = reverse("admin:history_workflowinstance_recovery", args=[instance.id, name])
    return {
        "name": name,
        "title": OPERATIONS[name].title,
        "possible": entry["possible"],
        "reason": entry.get("reason", ""),
        "url": f"{url}?{urlencode(query)}",
    }


def next_operation(instance: WorkflowInstance, eligibility: dict, steps: dict[str, Step], tasks: dict[str, Task]):
    """The one operation to offer next: Continue once it is possible (every matter of the review is handled),
    else the review step's first possible one, then the other steps'; None when none is. Within a step, the
    operations that keep its work going come first, in OPERATIONS' order, and those that conclude it by hand
    (ResolveStep, always possible once the step is in review) last."""
    for op in OPERATIONS.values():
        if op.target == "instance" and eligibility[op.name]["possible"]:
            return operation_link(instance, None, op.name, eligibility[op.name], tasks)
    in_step = (op for op in OPERATIONS.values() if op.target != "instance")
    preference = sorted(in_step, key=lambda op: op.concludes_by_hand)
    keys = sorted(eligibility["steps"], key=lambda key: (key != instance.review_step_key, key))
    for key in keys:
        for op in preference:
            entry = eligibility["steps"][key][op.name]
            if entry["possible"]:
                return operation_link(instance, steps[key], op.name, entry, tasks)
    return None


def decide_link(instance: WorkflowInstance) -> str:
    """The decision form of the instance in review, carrying the revision the operator is looking at."""
    url = reverse("admin:history_workflowinstance_decide", args=[instance.id])
    return f"{url}?{urlencode({'revision': instance.revision, 'step': instance.review_step_key})}"
