"""factory_boy factories that build consistent rows of every history table.

Consistency is the point: a task's namespace, application, queue and source point at the
activation and definition it belongs to; an activation names its task (TASK) or wait
(SIGNAL, TIMER, POLL final signal) back; every instance has its gate and one step per node
of its definition plus ``$root``. The helpers at the bottom (``activate``, ``poll_round``,
``accept_signal``) write both directions of a relation at once, as the engine does.
Pass explicit ids and times to reproduce a fixture exactly.
"""

import datetime as dt

import factory
from factory.django import DjangoModelFactory

from core import clock
from core.ids import ROOT_STEP_KEY, new_id
from engine.definitions import definition_validate
from history import models

HOUR = dt.timedelta(hours=1)


# Step specs in the format the engine's validator accepts (docs/concepts.md, "Definitions").
def task_step(key, *, queue="payments", after=(), handler="charge", priority=0, max_attempts=3, deadline=3600):
    return {
        "key": key,
        "kind": models.StepKind.TASK,
        "after": list(after),
        "handler": handler,
        "queue": queue,
        "priority": priority,
        "max_attempts": max_attempts,
        "deadline_seconds": deadline,
    }


POLL_MAPPING = {"field": "status", "values": {"done": "SUCCEEDED", "failed": "FAILED", "pending": "PENDING"}}


def poll_step(
    key, *, queue="payments", after=(), handler="check", max_rounds=5, attempts_per_round=2, final_signal=None
):
    spec = {
        "key": key,
        "kind": models.StepKind.POLL,
        "after": list(after),
        "handler": handler,
        "queue": queue,
        "max_rounds": max_rounds,
        "attempts_per_round": attempts_per_round,
        "interval_seconds": 60,
        "poll_deadline_seconds": 86400,
        "mapping": POLL_MAPPING,
    }
    if final_signal is not None:
        spec["final_signal"] = final_signal
    return spec


def signal_step(key, *, name="approved", after=(), payload_version="v1"):
    return {
        "key": key,
        "kind": models.StepKind.SIGNAL,
        "after": list(after),
        "name": name,
        "payload_version": payload_version,
        "correlation": "input.order_id",
        "deadline_seconds": 86400,
    }


def timer_step(key, *, after=(), duration=60):
    return {"key": key, "kind": models.StepKind.TIMER, "after": list(after), "duration_seconds": duration}


class NamespaceFactory(DjangoModelFactory):
    class Meta:
        model = models.Namespace
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"ns-{n}")


class ApplicationFactory(DjangoModelFactory):
    class Meta:
        model = models.Application
        django_get_or_create = ("namespace", "name")

    namespace = factory.SubFactory(NamespaceFactory)
    name = "default"


class QueueFactory(DjangoModelFactory):
    class Meta:
        model = models.Queue
        django_get_or_create = ("namespace", "name")

    namespace = factory.SubFactory(NamespaceFactory)
    name = "payments"


class WorkflowDefinitionFactory(DjangoModelFactory):
    """A definition stored as ``definition_create`` stores it: the spec is run through the engine's validator."""

    class Meta:
        model = models.WorkflowDefinition

    namespace = factory.SubFactory(NamespaceFactory)
    name = factory.Sequence(lambda n: f"flow-{n}")
    version = 1
    spec = factory.LazyFunction(lambda: {"steps": [task_step("charge")]})

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        namespace, spec = kwargs["namespace"], kwargs.pop("spec")
        # The queues and the application the definition names exist in its namespace.
        for name in {s["queue"] for s in spec["steps"] if "queue" in s}:
            QueueFactory(namespace=namespace, name=name)
        document = {
            "name": kwargs["name"],
            "application": spec.get("application") or ApplicationFactory(namespace=namespace).name,
            **{k: v for k, v in spec.items() if k != "application"},
        }
        valid = definition_validate(namespace_id=namespace.id, document=document)
        return super()._create(model_class, *args, spec=valid["spec"], queues=valid["queues"], **kwargs)


class WorkflowInstanceFactory(DjangoModelFactory):
    class Meta:
        model = models.WorkflowInstance
        skip_postgeneration_save = True

    namespace = factory.SubFactory(NamespaceFactory)
    definition = factory.SubFactory(WorkflowDefinitionFactory, namespace=factory.SelfAttribute("..namespace"))
    business_key = factory.Sequence(lambda n: f"order-{n}")
    input = '{"order_id":"o-1"}'
    created_at = factory.LazyFunction(clock.now)
    updated_at = factory.SelfAttribute("created_at")

    @factory.post_generation
    def rows(instance, create, extracted, ids=None, **kwargs):
        """Its gate and one step per node of the definition, plus ``$root``; ``rows__ids`` fixes step ids by key."""
        ids = ids or {}
        models.Gate.objects.create(instance=instance, open=instance.state == models.InstanceState.RUNNING)
        StepFactory(instance=instance, key=ROOT_STEP_KEY, kind=models.StepKind.ROOT)
        for spec in instance.definition.spec["steps"]:
            extra = {"id": ids[spec["key"]]} if spec["key"] in ids else {}
            StepFactory(instance=instance, key=spec["key"], kind=spec["kind"], **extra)


class StepFactory(DjangoModelFactory):
    class Meta:
        model = models.Step

    instance = factory.SubFactory(WorkflowInstanceFactory)
    key = factory.Sequence(lambda n: f"step-{n}")
    kind = models.StepKind.TASK
    created_at = factory.LazyAttribute(lambda s: s.instance.created_at)
    updated_at = factory.SelfAttribute("created_at")


def _next_sequence(step: models.Step) -> int:
    return models.Activation.objects.filter(step=step).count() + 1


class ActivationFactory(DjangoModelFactory):
    class Meta:
        model = models.Activation

    step = factory.SubFactory(StepFactory)
    instance = factory.SelfAttribute("step.instance")
    sequence = factory.LazyAttribute(lambda a: _next_sequence(a.step))
    input = '{"order_id":"o-1"}'
    created_at = factory.LazyFunction(clock.now)
    updated_at = factory.SelfAttribute("created_at")


def _spec(activation: models.Activation) -> dict:
    return activation.instance.definition.step_spec(activation.step.key)


class TaskFactory(DjangoModelFactory):
    """A task sourced by an activation: namespace, application, queue and handler follow it."""

    class Meta:
        model = models.Task

    source_activation = factory.SubFactory(ActivationFactory)
    source_instance = factory.SelfAttribute("source_activation.instance")
    namespace = factory.SelfAttribute("source_instance.namespace")
    application = factory.LazyAttribute(lambda t: ApplicationFactory(namespace=t.namespace))
    queue = factory.LazyAttribute(
        lambda t: QueueFactory(namespace=t.namespace, name=_spec(t.source_activation)["queue"])
    )
    handler = factory.LazyAttribute(lambda t: _spec(t.source_activation)["handler"])
    input = factory.SelfAttribute("source_activation.input")
    business_key = factory.SelfAttribute("source_instance.business_key")
    max_attempts = 3
    created_at = factory.SelfAttribute("source_activation.created_at")
    updated_at = factory.SelfAttribute("created_at")


class AttemptFactory(DjangoModelFactory):
    class Meta:
        model = models.Attempt

    task = factory.SubFactory(TaskFactory)
    number = factory.LazyAttribute(lambda a: models.Attempt.objects.filter(task=a.task).count() + 1)
    worker = "worker-1"
    started_at = factory.SelfAttribute("task.created_at")


class WaitFactory(DjangoModelFactory):
    class Meta:
        model = models.Wait

    activation = factory.SubFactory(ActivationFactory)
    step = factory.SelfAttribute("activation.step")
    instance = factory.SelfAttribute("activation.instance")
    kind = factory.LazyAttribute(
        lambda w: models.WaitKind.POLL_FINAL_SIGNAL if w.step.kind == models.StepKind.POLL else w.step.kind
    )
    created_at = factory.SelfAttribute("activation.created_at")
    updated_at = factory.SelfAttribute("created_at")
    deadline_at = factory.LazyAttribute(lambda w: w.created_at + 24 * HOUR)


class SignalFactory(DjangoModelFactory):
    class Meta:
        model = models.Signal

    workflow = factory.SubFactory(WorkflowInstanceFactory)
    namespace = factory.SelfAttribute("workflow.namespace")
    name = "approved"
    payload_version = "v1"
    payload = '{"approved":true}'
    correlation_key = "o-1"
    target_step_key = "approve"
    target_activation_sequence = 1
    accepted_at = factory.LazyFunction(clock.now)
    expires_at = factory.LazyAttribute(lambda s: s.accepted_at + 24 * HOUR)
    actor_id = "c" * 32


def acceptance_snapshot(signal: models.Signal) -> dict:
    return {
        "signal_id": signal.id,
        "state": models.SignalState.PENDING,
        "name": signal.name,
        "payload_version": signal.payload_version,
        "correlation_key": signal.correlation_key,
        "target_step_key": signal.target_step_key,
    }


class SignalOperationFactory(DjangoModelFactory):
    class Meta:
        model = models.SignalOperation

    signal = factory.SubFactory(SignalFactory)
    workflow = factory.SelfAttribute("signal.workflow")
    namespace = factory.SelfAttribute("signal.namespace")
    actor_id = factory.SelfAttribute("signal.actor_id")
    action = "workflow.signal"
    reason = "external completion verified"
    before = None
    after = factory.LazyAttribute(lambda o: acceptance_snapshot(o.signal))
    created_at = factory.SelfAttribute("signal.accepted_at")


class WorkflowOperationFactory(DjangoModelFactory):
    class Meta:
        model = models.WorkflowOperation

    workflow = factory.SubFactory(WorkflowInstanceFactory)
    namespace = factory.SelfAttribute("workflow.namespace")
    actor_id = "c" * 32
    action = "workflow.retry_step"
    reason = "the ledger shows no charge"
    before = factory.LazyFunction(lambda: {"state": "NEEDS_REVIEW"})
    after = factory.LazyFunction(lambda: {"state": "NEEDS_REVIEW"})
    created_at = factory.LazyFunction(clock.now)


class ExecutionAuditFactory(DjangoModelFactory):
    class Meta:
        model = models.ExecutionAudit

    task = factory.SubFactory(TaskFactory)
    namespace = factory.SelfAttribute("task.namespace")
    actor_id = "c" * 32
    action = "task.review"
    reason = "payment confirmed in the ledger"
    before = factory.LazyFunction(lambda: {"state": "NEEDS_REVIEW"})
    after = factory.LazyFunction(lambda: {"state": "SUCCEEDED"})


class ResultEventFactory(DjangoModelFactory):
    class Meta:
        model = models.ResultEvent

    task = factory.SubFactory(TaskFactory)
    seq = factory.LazyAttribute(lambda e: models.ResultEvent.objects.filter(task=e.task).count() + 1)
    kind = models.ResultKind.RESULT
    task_revision = factory.SelfAttribute("task.revision")


class InboxRecordFactory(DjangoModelFactory):
    class Meta:
        model = models.InboxRecord

    class Params:
        event = factory.SubFactory(ResultEventFactory)

    instance = factory.SelfAttribute("event.task.source_instance")
    source_kind = models.InboxSource.RESULT_EVENT
    source_id = factory.SelfAttribute("event.id")
    task = factory.SelfAttribute("event.task")
    activation = factory.SelfAttribute("event.task.source_activation")


# Both directions at once, as the engine writes them.


def step_of(instance: models.WorkflowInstance, key: str) -> models.Step:
    return models.Step.objects.get(instance=instance, key=key)


def activate(step: models.Step, *, state=models.ActivationState.ACTIVE, task=None, wait=None, **fields):
    """A new current activation of ``step``, with its TASK task or its wait; the step takes its state.

    ``task`` / ``wait`` are extra fields for the task or wait created with it (a POLL step gets a
    final-signal wait only when ``wait`` is given).
    """
    if step.kind == models.StepKind.POLL:
        start = fields.get("created_at") or clock.now()
        poll_defaults = {
            "first_round": 1,
            "first_round_attempts_used": 0,
            "used_rounds": 0,
            "max_rounds": 5,
            "attempts_per_round": 2,
            "interval_seconds": 60,
            "poll_deadline_at": start + 24 * HOUR,
            "round_deadline_at": start + HOUR,
        }
        fields = poll_defaults | fields
    activation = ActivationFactory(step=step, state=state, **fields)
    if step.kind == models.StepKind.TASK:
        activation.task = TaskFactory(source_activation=activation, **(task or {}))
    if step.kind in (models.StepKind.SIGNAL, models.StepKind.TIMER) or wait is not None:
        activation.wait = WaitFactory(activation=activation, **(wait or {}))
    activation.save()
    models.Step.objects.filter(id=step.id).update(current_activation=activation, state=state)
    step.refresh_from_db()
    return activation


def poll_round(activation: models.Activation, round: int, **task_fields) -> models.PollRound:
    """Business round ``round`` of a POLL activation with its query task; it becomes the last task."""
    round_id = task_fields.pop("round_id", None) or new_id()
    task = TaskFactory(source_activation=activation, source_round=round, **task_fields)
    record = models.PollRound.objects.create(
        id=round_id,
        activation=activation,
        instance=activation.instance,
        round=round,
        task=task,
        created_at=task.created_at,
    )
    models.Activation.objects.filter(id=activation.id).update(last_task=task, used_rounds=round)
    activation.refresh_from_db()
    return record


def accept_signal(instance: models.WorkflowInstance, **fields) -> tuple[models.Signal, models.SignalOperation]:
    """A PENDING signal and its acceptance audit (before null, after the acceptance snapshot)."""
    operation_fields = fields.pop("operation", {})
    signal = SignalFactory(workflow=instance, **fields)
    return signal, SignalOperationFactory(signal=signal, **operation_fields)
