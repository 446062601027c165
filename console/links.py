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
