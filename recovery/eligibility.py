"""Which recovery operations are possible now, why the others are not, and what each would change.

Both functions run the operations' own ``check`` without locks and without writing, so the
admin, the instance API and the commit can never disagree about a rule. A preview carries the
revisions it was computed at: committing it later with those revisions refuses a stale preview.
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.db.models import F

from core.errors import NotFound, WeaveError
from core.identity import Identity
from core.ids import ROOT_STEP_KEY
from history.locking import Level
from history.models import Attempt, AttemptState, Step, StepKind, Task, TaskState, WorkflowInstance
from history.selectors.access import instance_get_readable
from recovery.commands import instance_id_check
from recovery.context import Context, context_open, contexts_read, not_in_review
from recovery.operations import OPERATIONS
from recovery.pipeline import Operation, plan_preview
from recovery.step_history import read_ahead

_PREVIEW_REASON = "preview"


def _step_operations() -> list[Operation]:
    """The operations judged per step (on a task of the step, or the step), read from OPERATIONS when asked."""
    return [op for op in OPERATIONS.values() if op.target in ("task", "step")]


def _instance_operations() -> list[Operation]:
    """The operations judged per instance, read from OPERATIONS when asked."""
    return [op for op in OPERATIONS.values() if op.target == "instance"]


def _refused(error: WeaveError) -> dict:
    return {"possible": False, "code": error.code, "reason": error.message}


def _evaluate(ctx: Context, operation: Operation, command) -> dict:
    try:
        plan = operation.check(ctx, command)
    except WeaveError as error:
        return _refused(error)
    return {"possible": True, "preview": plan_preview(ctx, operation, plan)}


def _command(ctx: Context, operation: Operation, **target):
    """The command an eligibility judges ``operation`` with: the revisions read now, the declaration made."""
    return operation.command_class(
        expected_revision=ctx.instance.revision,
        reason=_PREVIEW_REASON,
        evidence_ref=_PREVIEW_REASON,
        **target,
        **{operation.declaration: True},
        **operation.preview_defaults,
    )


def _in_step(ctx: Context, operation: Operation, step: Step, review_tasks: list[Task]) -> dict:
    """One operation on a step: judged on the step's first task in review (task) or its current activation."""
    if operation.target == "task":
        if not review_tasks:
            return _not_now("no task of this step is NEEDS_REVIEW")
        task = review_tasks[0]
        command = _command(ctx, operation, task_id=task.id, expected_task_revision=task.revision)
        return {"task_id": task.id, **_evaluate(ctx, operation, command)}
    if step.current_activation_id is None:
        return _not_now("the step has never been activated")
    command = _command(
        ctx,
        operation,
        step_key=step.key,
        activation_id=step.current_activation_id,
        expected_step_revision=step.revision,
    )
    return _evaluate(ctx, operation, command)


def _not_now(reason: str) -> dict:
    return {"possible": False, "code": "FAILED_PRECONDITION", "reason": reason}


def instance_eligibility(*, identity: Identity, instance_id: str) -> dict:
    """Per instance and per step: each operation possible now (with its preview) or why not, in words.

    ``{"revision", "continue": {...}, "steps": {key: {"review-task", "resolve-step", "retry-step",
    "continue-poll", "rearm-wait"}}}``; each entry ``{"possible": true, "preview": {...}}`` or
    ``{"possible": false, "code", "reason"}``. ResolveStep is judged as a FAILED conclusion (a
    SUCCEEDED one also needs a result of the step's contract: preview it with the real command).
    """
    instance_id_check(instance_id)
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    steps = Step.objects.filter(instance_id=instance.id).exclude(key=ROOT_STEP_KEY)
    return _eligibility(identity=identity, instance=instance, steps=steps)


def _eligibility(*, identity: Identity, instance: WorkflowInstance, steps: Iterable[Step]) -> dict:
    try:
        ctx = context_open(identity=identity, instance_id=instance.id, locks=None)
    except NotFound:
        raise
    except WeaveError as error:
        return _judged(error, instance, steps, {})
    return _judged(ctx, instance, steps, _review_tasks_by_step([instance.id]))


@dataclass
class Judged:
    """An instance's eligibility document and the rows it was judged from."""

    eligibility: dict
    steps: dict[str, Step]  # by key
    review_tasks: dict[str, Task]  # by id


def eligibilities(*, identity: Identity, instances: list[WorkflowInstance]) -> dict[str, Judged]:
    """Each instance's eligibility by id, as ``instance_eligibility`` judges it (NOT_FOUND is judged as a refusal
    too), for instances the caller may read: the rows every check begins from are read once for all of them."""
    ids = [instance.id for instance in instances]
    contexts = contexts_read(identity=identity, instance_ids=ids)
    steps: dict[str, dict[str, Step]] = {instance_id: {} for instance_id in ids}
    for step in Step.objects.filter(instance_id__in=ids):
        steps[step.instance_id][step.key] = step
    review_tasks = _review_tasks_by_step(ids)
    opened = {i: ctx for i, ctx in contexts.items() if isinstance(ctx, Context)}
    read_ahead([(ctx, steps[i]) for i, ctx in opened.items()])
    _review_read_ahead(opened, steps, review_tasks)
    judged = {}
    for instance in instances:
        ctx, of_instance = contexts[instance.id], steps[instance.id]
        tasks = {task.id: task for step in of_instance.values() for task in review_tasks.get(step.id, [])}
        judged[instance.id] = Judged(_judged(ctx, instance, of_instance.values(), review_tasks), of_instance, tasks)
    return judged


def _review_read_ahead(contexts: dict[str, Context], steps: dict[str, dict[str, Step]], review_tasks: dict) -> None:
    """Hand each context the tasks in review of its steps, and whether each has a RUNNING attempt."""
    tasks = {i: [t for s in steps[i].values() for t in review_tasks.get(s.id, [])] for i in contexts}
    ids = [t.id for of_instance in tasks.values() for t in of_instance]
    running = set(Attempt.objects.filter(task_id__in=ids, state=AttemptState.RUNNING).values_list("task_id", flat=True))
    for instance_id, ctx in contexts.items():
        ctx.ahead.rows.setdefault(Level.TASK, {}).update((t.id, t) for t in tasks[instance_id])
        ctx.ahead.running.update((t.id, t.id in running) for t in tasks[instance_id])


def _judged(
    ctx: Context | WeaveError, instance: WorkflowInstance, steps: Iterable[Step], review_tasks: dict[str, list[Task]]
) -> dict:
    """The eligibility document of an instance in its context (or its context's refusal)."""
    steps = sorted((s for s in steps if s.kind != StepKind.ROOT), key=lambda s: s.key)
    if isinstance(ctx, WeaveError):
        return _refused_everywhere(instance=instance, steps=steps, error=ctx)
    in_step = _step_operations()
    return {
        "revision": str(instance.revision),
        **{op.name: _evaluate(ctx, op, _command(ctx, op)) for op in _instance_operations()},
        "steps": {s.key: {op.name: _in_step(ctx, op, s, review_tasks.get(s.id, [])) for op in in_step} for s in steps},
    }


def operations_judged(
    *, identity: Identity, instance: WorkflowInstance, step_key: str, names: Iterable[str]
) -> Iterator[tuple[str, dict]]:
    """Each of ``names``, on the instance or on its step ``step_key``, judged as ``instance_eligibility`` judges it,
    and only when the caller asks for the next: one that stops at the first possible operation runs no other check."""
    try:
        ctx = context_open(identity=identity, instance_id=instance.id, locks=None)
    except NotFound:
        raise
    except WeaveError as error:
        yield from ((name, _refused(error)) for name in names)
        return
    step = Step.objects.filter(instance_id=instance.id, key=step_key).first()
    review_tasks = _review_tasks_by_step([instance.id]).get(step.id, []) if step is not None else []
    for name in names:
        operation = OPERATIONS[name]
        if operation.target == "instance":
            yield name, _evaluate(ctx, operation, _command(ctx, operation))
        elif step is None:
            yield name, _not_now(f"the instance has no step {step_key!r}")
        else:
            yield name, _in_step(ctx, operation, step, review_tasks)


def _refused_everywhere(*, instance: WorkflowInstance, steps: list[Step], error: WeaveError) -> dict:
    refusal = _refused(error)
    in_step = _step_operations()
    return {
        "revision": str(instance.revision),
        **{op.name: refusal for op in _instance_operations()},
        "steps": {s.key: {op.name: refusal for op in in_step} for s in steps},
    }


def _review_tasks_by_step(instance_ids: list[str]) -> dict[str, list[Task]]:
    """The tasks in review of these instances by step id (a step id names its instance), the oldest first."""
    # A task whose source activation is missing has no step: the join leaves it out, as no step would show it.
    tasks = (
        Task.objects.filter(source_instance_id__in=instance_ids, state=TaskState.NEEDS_REVIEW)
        .annotate(source_step_id=F("source_activation__step_id"))
        .order_by("created_at")
    )
    by_step: dict[str, list[Task]] = {}
    for task in tasks:
        by_step.setdefault(task.source_step_id, []).append(task)
    return by_step


def operation_preview(*, identity: Identity, operation: str, instance_id: str, command: dict) -> dict:
    """What ``operation`` with this exact command would change now, without writing anything.

    Runs the same validation and checks as the commit, in the same order; refusals raise the
    same errors. Idempotency is not consulted: a preview never claims a key.
    """
    op = OPERATIONS[operation]
    instance_id_check(instance_id)
    parsed = op.command_class.parse(command)
    ctx = context_open(identity=identity, instance_id=instance_id, locks=None)
    return plan_preview(ctx, op, op.check(ctx, parsed))


def instance_eligibility_document(instance: WorkflowInstance, steps) -> dict:
    """The eligibility of an instance its reader is already authorised for, as the instance API shows it.

    What is possible does not depend on who reads it, so it is judged with the instance's own
    namespace and every queue (the reader passed the namespace and queue checks already).
    ``instance`` and ``steps`` (its ``CurrentStep`` rows) are the rows the reader already loaded: outside
    NEEDS_REVIEW every operation is refused for the instance's state, known without reading more.
    """
    rows = [view.step for view in steps]
    if refusal := not_in_review(instance):
        # context_open's refusal once the namespace and queues pass, as they did for this reader.
        return _refused_everywhere(instance=instance, steps=sorted(rows, key=lambda s: s.key), error=refusal)
    reader = Identity(namespace_id=instance.namespace_id, actor_id="", scopes=frozenset(), queues=None)
    return _eligibility(identity=reader, instance=instance, steps=rows)
