"""The console home's "The background": each running runner and worker and how long ago it last beat, and a
warning when a beat is stale or no runner beats at all (the engine then moves nothing)."""

from console.queue import age
from core.identity import identity_of_user
from history.selectors.background import background_status


def _since(status) -> str:
    seconds = int(status.age.total_seconds())
    return f"{seconds} s" if seconds < 60 else age(status.age)


def background_box(request) -> dict | None:
    """The processes this user may see (an operator: the runners and its namespace's workers on its queues; a
    superuser without an operator identity: every one), or None for a user who may see none. One query."""
    identity = identity_of_user(request.user)
    if identity is None and not request.user.is_superuser:
        return None
    if identity is not None and not request.user.has_perm("history.view_workflowinstance"):
        return None
    status = background_status(identity=identity)
    running = [p for p in status.processes if p.process.stopped_at is None]
    return {
        "processes": [(p.process, _since(p), p.stale) for p in running],
        "stale": status.stale,
        "no_runner": not status.runners_alive,
        "stale_after": int(status.stale_after.total_seconds()),
    }
