"""Activations of one logical step, one activation in detail, and a POLL activation's rounds."""

from dataclasses import dataclass

from django.db.models import QuerySet, Subquery

from core.errors import InvalidArgument, NotFound, Unavailable
from core.identity import Identity
from history.models import (
    Activation,
    PollRound,
    Step,
    StepKind,
    Task,
    Wait,
    WaitKind,
    WorkflowInstance,
)
from history.ownership import task_points_back
from history.selectors.access import (
    activation_get_under_step,
    fixed_queue,
    fixed_queue_check,
    instance_get_readable,
    step_get_by_key,
    step_spec_of,
)
from history.selectors.pagination import ListKind, Page, prepared_page
from history.selectors.steps import CurrentStep, check_activation_of, step_views

ACTIVATIONS = ListKind("activations", Activation, ("sequence",))
POLL_ROUNDS = ListKind("poll_rounds", PollRound, ("round", "id"))

# The wait kind an activation of each step kind may own.
_WAIT_KIND = {
    StepKind.SIGNAL: WaitKind.SIGNAL,
    StepKind.TIMER: WaitKind.TIMER,
    StepKind.POLL: WaitKind.POLL_FINAL_SIGNAL,
}


@dataclass(frozen=True)
class ActivationPage:
    instance: WorkflowInstance
    step: Step
    page: Page[Activation]


@dataclass(frozen=True)
class ActivationDetail:
    instance: WorkflowInstance
    step: CurrentStep
    activation: Activation
    # POLL only: the activation itself, whose frozen budget forms the poll section.
    poll: Activation | None
    wait: Wait | None


@dataclass(frozen=True)
class PollRoundPage:
    instance: WorkflowInstance
    activation: Activation
    page: Page[PollRound]


def _step_activations(step_id: str) -> QuerySet[Activation]:
    return Activation.objects.filter(step_id=step_id)


def _activation_rounds(activation_id: str) -> QuerySet[PollRound]:
    return PollRound.objects.filter(activation_id=activation_id)


def activation_list(
    *, identity: Identity, instance_id: str, step_key: str, after: tuple | None, limit: int
) -> ActivationPage:
    """A step's activations, newest sequence first; summaries only, no bodies."""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    step = step_get_by_key(instance=instance, key=step_key)
    page = prepared_page(_step_activations, (step.id,), kind=ACTIVATIONS, after=after, limit=limit)
    for activation in page.items:
        check_activation_of(step=step, activation=activation)
        activation.step = step
    return ActivationPage(instance=instance, step=step, page=page)


def activation_get(*, identity: Identity, instance_id: str, step_key: str, activation_id: str) -> ActivationDetail:
    """The requested activation beside the logical step's current view (they may differ)."""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    step = step_get_by_key(instance=instance, key=step_key)
    wanted = {activation_id, step.current_activation_id} - {None}
    rows = {a.id: a for a in Activation.objects.filter(id__in=wanted)}
    activation = rows.get(activation_id)
    if activation is None or activation.step_id != step.id:
        raise NotFound("activation not found under this step")
    check_activation_of(step=step, activation=activation)
    activation.step = step
    (view,) = step_views(instance=instance, steps=[step], loaded=rows.values())
    return ActivationDetail(
        instance=instance,
        step=view,
        activation=activation,
        poll=_poll_section(activation) if step.kind == StepKind.POLL else None,
        wait=_wait_of(step=step, activation=activation),
    )


def _poll_section(activation: Activation) -> Activation:
    missing = [name for name in Activation.POLL_FIELDS if getattr(activation, name) is None]
    if missing:
        raise Unavailable(f"POLL activation {activation.id} lacks its frozen budget: {', '.join(missing)}")
    return activation


def _wait_of(*, step: Step, activation: Activation) -> Wait | None:
    if activation.wait_id is None:
        return None
    wait = Wait.objects.filter(id=activation.wait_id).first()
    if (
        wait is None
        or wait.activation_id != activation.id
        or wait.step_id != step.id
        or wait.instance_id != step.instance_id
        or wait.kind != _WAIT_KIND.get(step.kind)
    ):
        raise Unavailable(f"the wait of activation {activation.id} is missing or belongs elsewhere")
    return wait


def poll_round_list(
    *,
    identity: Identity,
    instance_id: str,
    step_key: str,
    activation_id: str,
    after: tuple | None,
    limit: int,
) -> PollRoundPage:
    """The business rounds of one POLL activation, newest round first, each task verified."""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    spec = step_spec_of(instance=instance, key=step_key)
    activation = activation_get_under_step(
        instance=instance,
        key=step_key,
        activation_id=activation_id,
        queryset=Activation.objects.annotate(fixed_queue_id=Subquery(fixed_queue(instance=instance, spec=spec)[:1])),
    )
    step = activation.step
    if step.kind != StepKind.POLL:
        raise InvalidArgument(
            f"step {step.key!r} is a {step.kind} step: only POLL activations have rounds",
            field="activation",
        )
    check_activation_of(step=step, activation=activation)
    queue_id = fixed_queue_check(key=step.key, queue_id=activation.fixed_queue_id)
    if not instance.has_gate:
        raise Unavailable("the workflow has no gate")
    page = prepared_page(_activation_rounds, (activation.id,), kind=POLL_ROUNDS, after=after, limit=limit)
    tasks = {task.id: task for task in Task.objects.filter(id__in={r.task_id for r in page.items})}
    for poll_round in page.items:
        task = tasks.get(poll_round.task_id)
        if (
            poll_round.instance_id != instance.id
            or task is None
            or not task_points_back(instance=instance, activation=activation, task=task)
            or task.source_round != poll_round.round
            or task.queue_id != queue_id
        ):
            raise Unavailable(f"poll round {poll_round.id} and its task disagree on namespace, activation or queue")
    return PollRoundPage(instance=instance, activation=activation, page=page)
