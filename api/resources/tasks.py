"""Tasks: their execution history and source (history reads), and the worker protocol: claim, heartbeat and
complete, with their answers."""

from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers

from api.resources import optional, optional_raw, optional_time
from api.resources.instances import DefinitionRef
from api.schema import (
    AUTH_ERRORS,
    BODY_LIMITS,
    BODY_REFUSALS,
    UNAUTHENTICATED,
    UNAVAILABLE_ERRORS,
    Command,
    ExactJSONField,
    IdField,
    NotNullJSONField,
    RevisionField,
    StepKeyField,
    TimeField,
    only,
    path_parameter,
    schema_field,
    text_field,
    u32,
)
from core.exactjson import Raw
from core.ids import ID_PATTERN, STEP_KEY_PATTERN
from core.times import format_optional_time, format_time
from engine import worker
from engine.worker import DEFAULT_LEASE_SECONDS, MAX_LEASE_SECONDS
from history.models import Attempt, Step, StepKind
from history.selectors import instances as instance_reads
from history.selectors import tasks as task_reads
from history.tenancy import NAME_PATTERN

TASK_ID = path_parameter("task_id", "task id", ID_PATTERN)
QUEUE = path_parameter("queue", "queue name", NAME_PATTERN)


def lease_seconds() -> serializers.IntegerField:
    return serializers.IntegerField(
        min_value=1, max_value=MAX_LEASE_SECONDS, required=False, help_text=f"default {DEFAULT_LEASE_SECONDS}"
    )


class ClaimCommand(Command):
    worker = text_field(max_length=128, help_text="printable characters naming the worker")
    lease_seconds = lease_seconds()


class HeartbeatCommand(Command):
    attempt_id = IdField(help_text="the RUNNING attempt the claim answered")
    lease_seconds = lease_seconds()


class CompleteSucceeded(Command):
    attempt_id = IdField(help_text="the RUNNING attempt the claim answered")
    outcome = only("SUCCEEDED")
    result = ExactJSONField(help_text="any JSON, stored byte-exact")
    retryable = only(False, base=serializers.BooleanField, required=False, help_text="true only with FAILED")


class CompleteFailed(Command):
    attempt_id = IdField(help_text="the RUNNING attempt the claim answered")
    outcome = only("FAILED")
    result = NotNullJSONField(help_text="the failure details")
    retryable = serializers.BooleanField(required=False, help_text="default false")


# A FAILED completion carries its details (never null) and only it may be retryable.
CompleteCommand = PolymorphicProxySerializer(
    component_name="CompleteCommand", serializers=[CompleteSucceeded, CompleteFailed], resource_type_field_name=None
)


class LateEvidence(serializers.Serializer):
    event_id = IdField(help_text="the late RESULT event in the task's result stream")
    seq = u32()
    outcome = serializers.CharField(help_text="SUCCEEDED or FAILED, as the worker reported it")
    result = ExactJSONField(required=False)
    recorded_at = TimeField()


def _late_evidence(evidence: instance_reads.LateEvidence) -> dict:
    data = {"event_id": evidence.event_id, "seq": evidence.seq, "outcome": evidence.outcome}
    optional_raw(data, "result", evidence.result)
    data["recorded_at"] = format_time(evidence.recorded_at)
    return data


class AttemptItem(serializers.Serializer):
    id = IdField()
    number = u32()
    worker = serializers.CharField()
    state = serializers.CharField()
    started_at = TimeField()
    lease_expires_at = TimeField(required=False)
    finished_at = TimeField(required=False)
    result = ExactJSONField(required=False)
    late_evidence = LateEvidence(
        required=False,
        help_text="the completion its worker reported after the lease was lost: recorded, never applied",
    )


def attempt_item(attempt: Attempt) -> dict:
    data = {
        "id": attempt.id,
        "number": attempt.number,
        "worker": attempt.worker,
        "state": attempt.state,
        "started_at": format_time(attempt.started_at),
    }
    optional_time(data, "lease_expires_at", attempt.lease_expires_at)
    optional_time(data, "finished_at", attempt.finished_at)
    optional_raw(data, "result", attempt.result)
    evidence = getattr(attempt, "late_evidence", None)
    if evidence is not None:
        data["late_evidence"] = _late_evidence(evidence)
    return data


class LateEvidenceItem(LateEvidence):
    attempt_id = IdField(required=False, help_text="the attempt whose worker reported it after losing the lease")


def late_evidence_item(evidence: instance_reads.LateEvidence) -> dict:
    data = _late_evidence(evidence)
    optional(data, "attempt_id", evidence.attempt_id)
    return data


_WORKFLOW_PATH = f"/v1/workflows/{ID_PATTERN.pattern}"
_ACTIVATION_PATH = f"{_WORKFLOW_PATH}/steps/{STEP_KEY_PATTERN.pattern}/activations/{ID_PATTERN.pattern}"


def link_field(path: str, description: str, **kwargs) -> serializers.CharField:
    """A path of this API (relative to the server), described by its exact pattern."""
    return schema_field({"type": "string", "pattern": f"^{path}$", "description": description}, **kwargs)


class TaskLinks(serializers.Serializer):
    instance = link_field(_WORKFLOW_PATH, "the instance detail (get_workflow)")
    activation = link_field(_ACTIVATION_PATH, "the source activation (get_workflow_activation)")
    task = link_field(f"{_WORKFLOW_PATH}/tasks/{ID_PATTERN.pattern}", "the execution history (get_workflow_task)")
    source = link_field(f"/v1/tasks/{ID_PATTERN.pattern}/source", "the task's source (get_task_source)")
    rounds = link_field(
        f"{_ACTIVATION_PATH}/rounds",
        "POLL query tasks: the round list of the source activation (list_workflow_poll_rounds)",
        required=False,
    )


def task_links(*, instance_id: str, step: Step, activation_id: str, task_id: str) -> dict:
    """The reads around one task, as paths of this API: the same links in its execution history and its source."""
    workflow = f"/v1/workflows/{instance_id}"
    activation = f"{workflow}/steps/{step.key}/activations/{activation_id}"
    links = {
        "instance": workflow,
        "activation": activation,
        "task": f"{workflow}/tasks/{task_id}",
        "source": f"/v1/tasks/{task_id}/source",
    }
    if step.kind == StepKind.POLL:
        links["rounds"] = f"{activation}/rounds"
    return links


class TaskBody(serializers.Serializer):
    id = IdField()
    step_key = serializers.CharField()
    activation_id = IdField()
    activation_sequence = u32()
    round = u32(required=False, help_text="POLL query tasks: the business round")
    queue = serializers.CharField()
    handler = serializers.CharField()
    priority = serializers.IntegerField()
    state = serializers.CharField()
    revision = RevisionField()
    attempt_count = u32()
    max_attempts = u32()
    deadline_at = TimeField(required=False)
    latest_start_at = TimeField(required=False)
    input = ExactJSONField()
    outcome = serializers.CharField(required=False)
    result = ExactJSONField(required=False)
    review_conclusion = serializers.CharField(required=False)
    execution_settled = serializers.BooleanField()
    permit_held = serializers.BooleanField()
    retry_of = IdField(required=False)
    created_at = TimeField()
    updated_at = TimeField()
    attempts = AttemptItem(many=True)
    late_evidence = LateEvidenceItem(
        many=True,
        help_text="every completion reported after its attempt's lease was lost, by seq: recorded, never applied",
    )
    links = TaskLinks()


class TaskDetail(serializers.Serializer):
    instance_id = IdField()
    revision = RevisionField()
    task = TaskBody()


def task_detail(detail: instance_reads.TaskDetail) -> dict:
    task = detail.task
    body = {
        "id": task.id,
        "step_key": detail.step.key,
        "activation_id": detail.activation.id,
        "activation_sequence": detail.activation.sequence,
    }
    optional(body, "round", task.source_round)
    body.update(
        {
            "queue": detail.instance.definition.step_spec(detail.step.key)["queue"],
            "handler": task.handler,
            "priority": task.priority,
            "state": task.state,
            "revision": str(task.revision),
            "attempt_count": task.attempt_count,
            "max_attempts": task.max_attempts,
        }
    )
    optional_time(body, "deadline_at", task.deadline_at)
    optional_time(body, "latest_start_at", task.latest_start_at)
    body["input"] = Raw(task.input)
    optional(body, "outcome", task.outcome)
    optional_raw(body, "result", task.result)
    optional(body, "review_conclusion", task.review_conclusion)
    body["execution_settled"] = task.execution_settled
    body["permit_held"] = task.permit_held
    optional(body, "retry_of", task.retry_of_id)
    body["created_at"] = format_time(task.created_at)
    body["updated_at"] = format_time(task.updated_at)
    body["attempts"] = [attempt_item(attempt) for attempt in detail.attempts]
    body["late_evidence"] = [late_evidence_item(evidence) for evidence in detail.late_evidence]
    body["links"] = task_links(
        instance_id=detail.instance.id, step=detail.step, activation_id=detail.activation.id, task_id=task.id
    )
    return {"instance_id": detail.instance.id, "revision": str(detail.instance.revision), "task": body}


class ActivationRef(serializers.Serializer):
    id = IdField()
    sequence = u32()


class PollRoundRef(serializers.Serializer):
    id = IdField()
    round = u32(help_text="the business round whose query the task is")


class TaskSource(serializers.Serializer):
    task_id = IdField()
    namespace = serializers.CharField(help_text="namespace name")
    instance_id = IdField()
    definition = DefinitionRef()
    step_key = StepKeyField()
    activation = ActivationRef(help_text="the activation that sourced the task")
    poll_round = PollRoundRef(required=False, help_text="POLL query tasks only")
    queue = serializers.CharField(help_text="the queue the fixed definition names for the step")
    retry_of = IdField(required=False, help_text="the task this one retries")
    links = TaskLinks()


def task_source(source: task_reads.TaskSource) -> dict:
    task, activation, instance = source.task, source.activation, source.instance
    data = {
        "task_id": task.id,
        "namespace": source.namespace,
        "instance_id": instance.id,
        "definition": {"name": instance.definition.name, "version": instance.definition.version},
        "step_key": source.step.key,
        "activation": {"id": activation.id, "sequence": activation.sequence},
    }
    if source.poll_round_id is not None:
        data["poll_round"] = {"id": source.poll_round_id, "round": task.source_round}
    data["queue"] = task.queue_name
    optional(data, "retry_of", task.retry_of_id)
    data["links"] = task_links(instance_id=instance.id, step=source.step, activation_id=activation.id, task_id=task.id)
    return data


class ClaimedTask(serializers.Serializer):
    id = IdField()
    handler = serializers.CharField()
    priority = serializers.IntegerField()
    input = ExactJSONField()
    business_key = serializers.CharField(allow_blank=True)
    concurrency_key = serializers.CharField(allow_blank=True)
    revision = RevisionField()
    attempt_count = u32()
    max_attempts = u32()
    round = u32(required=False, help_text="POLL query tasks: the business round")
    deadline_at = TimeField(required=False)


class ClaimedAttempt(serializers.Serializer):
    id = IdField()
    number = u32()
    lease_expires_at = TimeField()


class Claim(serializers.Serializer):
    claimed = serializers.BooleanField()
    task = ClaimedTask(required=False, help_text="only when claimed")
    attempt = ClaimedAttempt(required=False, help_text="only when claimed")


def claim(leased: worker.Claim | None) -> dict:
    if leased is None:
        return {"claimed": False}
    task, attempt = leased.task, leased.attempt
    data = {
        "claimed": True,
        "task": {
            "id": task.id,
            "handler": task.handler,
            "priority": task.priority,
            "input": Raw(task.input),
            "business_key": task.business_key,
            "concurrency_key": task.concurrency_key,
            "revision": str(task.revision),
            "attempt_count": task.attempt_count,
            "max_attempts": task.max_attempts,
        },
        "attempt": {
            "id": attempt.id,
            "number": attempt.number,
            "lease_expires_at": format_optional_time(attempt.lease_expires_at),
        },
    }
    if task.source_round is not None:
        data["task"]["round"] = task.source_round
    if task.deadline_at is not None:
        data["task"]["deadline_at"] = format_time(task.deadline_at)
    return data


class Heartbeat(serializers.Serializer):
    task_id = IdField()
    attempt_id = IdField()
    lease_expires_at = TimeField()
    late = serializers.BooleanField(help_text="true: the lease was lost (nothing extended); stop the work")


def heartbeat(beat: worker.Heartbeat) -> dict:
    attempt = beat.attempt
    return {
        "task_id": attempt.task_id,
        "attempt_id": attempt.id,
        "lease_expires_at": format_optional_time(attempt.lease_expires_at),
        "late": beat.late,
    }


class Completion(serializers.Serializer):
    task_id = IdField()
    state = serializers.CharField(help_text="QUEUED again after a retryable failure with attempts left")
    revision = RevisionField()
    attempt_count = u32()
    max_attempts = u32()
    late = serializers.BooleanField(
        help_text="true: the lease was lost; the result is kept as late evidence and changes nothing"
    )


def completion(done: worker.Completion) -> dict:
    task = done.task
    return {
        "task_id": task.id,
        "state": task.state,
        "revision": str(task.revision),
        "attempt_count": task.attempt_count,
        "max_attempts": task.max_attempts,
        "late": done.late,
    }


TASK_SOURCE_ERRORS = {
    400: "INVALID_ARGUMENT: a malformed task_id, or any query parameter (field named)",
    401: UNAUTHENTICATED,
    403: "PERMISSION_DENIED: the credential holds neither workflows:read nor tasks:work",
    404: "NOT_FOUND: no such task in the caller's namespace, or the caller may neither see its workflow "
    "(workflows:read) nor work its queue (tasks:work)",
    503: "UNAVAILABLE: the task and its workflow, activation, poll round or queue disagree (corruption), or the "
    "database is unavailable",
}


CLAIM_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed queue name or command, {BODY_LIMITS} (field named)",
    **AUTH_ERRORS,
    **BODY_REFUSALS,
    404: "NOT_FOUND: no such queue in the namespace, or it is not accessible",
    **UNAVAILABLE_ERRORS,
}


ATTEMPT_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed id or command, {BODY_LIMITS} (field named); FAILED_PRECONDITION: "
    "the attempt already finished (a lost lease is no error: 200 with late true)",
    **AUTH_ERRORS,
    **BODY_REFUSALS,
    404: "NOT_FOUND: no such task in the namespace behind an accessible queue, or no such attempt of it",
    **UNAVAILABLE_ERRORS,
}
