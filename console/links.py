"""Links to the recovery forms, carrying the revisions of the rows the operator was looking at."""

from urllib.parse import urlencode

from django.urls import reverse

from history.models import Step, Task, WorkflowInstance
from recovery.operations import OPERATIONS


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
