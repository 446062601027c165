"""The engine's JSON API: start, signal (and the signal list on its path), pause/resume/cancel, workers.

Views are thin: check the scope (401 before 403), validate the path, call one service,
render its answer in the envelope. Every bad input is a 400 naming its field.
"""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from api import openapi, presenters, schema
from api.history_views import next_cursor
from api.instance_filters import instance_query
from api.params import list_params, page_params, path_id
from api.permissions import Authenticated, scope_required
from api.rendering import receipt_response
from core import exactjson
from core.errors import InvalidArgument
from core.request_id import request_id_of
from core.times import format_optional_time, format_time
from engine.commands import id_argument
from engine.instances import instance_cancel, instance_pause, instance_resume, instance_start
from engine.signals import signal_accept
from engine.worker import task_claim, task_complete, task_heartbeat
from history import idempotency
from history.models import InstanceState, ReviewCause, Scope, StopKind
from history.selectors import instance_list, signals
from history.selectors.instance_list import ORDERS
from history.tenancy import is_name


def _idempotency_key(request):
    return idempotency.key_check(request.headers.get(idempotency.HEADER))


class ReadWriteView(APIView):
    """One path whose GET reads (workflows:read) and whose POST writes (workflows:write)."""

    http_method_names = ["get", "post"]
    permissions_by_method = {"GET": scope_required(Scope.READ), "POST": scope_required(Scope.WRITE)}

    def get_permissions(self):
        # Any other method is refused (405) once the caller is authenticated.
        return [self.permissions_by_method.get(self.request.method, Authenticated)()]


class WorkflowsView(ReadWriteView):
    """/v1/workflows — GET queries the visible instances (workflows:read); POST starts one
    (workflows:write, Idempotency-Key).
    """

    @extend_schema(
        operation_id="list_workflows",
        summary="Visible instances matching every filter, newest first by the order key (never counted)",
        parameters=schema.workflow_query_parameters(
            states=InstanceState.values, causes=ReviewCause.values, stop_kinds=StopKind.values, orders=list(ORDERS)
        ),
        responses=schema.responses(schema.InstancePage, errors=schema.QUERY_ERRORS),
    )
    def get(self, request):
        params = request.query_params
        query = instance_query(params)
        kind = instance_list.ORDERS[query.order]
        parents = [request.auth.namespace_id, query.binding()]
        limit, after = page_params(params, kind=kind, parents=parents)
        page = instance_list.instance_list(identity=request.auth, query=query, after=after, limit=limit)
        return Response(presenters.instance_page(page, next_cursor=next_cursor(page, kind=kind, parents=parents)))

    @extend_schema(
        operation_id="start_workflow",
        summary="Start an instance of a definition",
        parameters=openapi.idempotency_key(status=201),
        request=openapi.StartCommand,
        responses=schema.responses(openapi.InstanceSummary, status=201, errors=openapi.START_ERRORS),
    )
    def post(self, request):
        receipt = instance_start(
            identity=request.auth,
            command=request.data,
            idempotency_key=_idempotency_key(request),
            request_id=request_id_of(request),
        )
        return receipt_response(receipt)


class WorkflowSignalsView(ReadWriteView):
    """/v1/workflows/{id}/signals — GET lists the signals (workflows:read); POST accepts one
    (workflows:write, Idempotency-Key). One path, each method with its own scope.
    """

    @extend_schema(
        operation_id="list_workflow_signals",
        summary="Signals of the workflow, newest accepted first",
        parameters=[schema.WORKFLOW_ID, *schema.PAGE_PARAMETERS],
        responses=schema.responses(schema.SignalPage),
    )
    def get(self, request, id):
        parents = [path_id(id, field="id")]
        limit, after = list_params(request.query_params, kind=signals.SIGNALS, parents=parents)
        result = signals.signal_list(identity=request.auth, instance_id=id, after=after, limit=limit)
        cursor = next_cursor(result.page, kind=signals.SIGNALS, parents=parents)
        return Response(presenters.signal_page(result, next_cursor=cursor))

    @extend_schema(
        operation_id="signal_workflow",
        summary="Accept a signal for a SIGNAL step (or a POLL step's final signal)",
        parameters=[schema.WORKFLOW_ID, *openapi.idempotency_key(status=201)],
        request=openapi.SignalCommand,
        responses=schema.responses(openapi.SignalAccepted, status=201, errors=openapi.SIGNAL_ERRORS),
    )
    def post(self, request, id):
        receipt = signal_accept(
            identity=request.auth,
            instance_id=id_argument(id, "id"),
            command=request.data,
            idempotency_key=_idempotency_key(request),
            request_id=request_id_of(request),
        )
        return receipt_response(receipt)


def _control_view(service, doc: str):
    class ControlView(APIView):
        __doc__ = doc
        permission_classes = [scope_required(Scope.CONTROL)]

        @extend_schema(
            operation_id=f"{service.__name__.removeprefix('instance_')}_workflow",
            summary=service.__doc__.splitlines()[0],
            parameters=[schema.WORKFLOW_ID],
            request=openapi.ControlCommand,
            responses=schema.responses(openapi.InstanceSummary, errors=openapi.CONTROL_ERRORS),
        )
        def post(self, request, id):
            answer = service(
                identity=request.auth,
                instance_id=id_argument(id, "id"),
                command=request.data,
                request_id=request_id_of(request),
            )
            return Response(answer)

    ControlView.__name__ = f"{service.__name__}_view"
    return ControlView


WorkflowPauseView = _control_view(instance_pause, "POST /v1/workflows/{id}/pause (workflows:control)")
WorkflowResumeView = _control_view(instance_resume, "POST /v1/workflows/{id}/resume (workflows:control)")
WorkflowCancelView = _control_view(instance_cancel, "POST /v1/workflows/{id}/cancel (workflows:control)")


class QueueClaimView(APIView):
    """POST /v1/queues/{queue}/claim — lease the next task of a queue (tasks:work)."""

    permission_classes = [scope_required(Scope.TASKS_WORK)]

    @extend_schema(
        operation_id="claim_queue_task",
        summary="Lease the highest-priority claimable task of a queue; claimed false when there is none",
        parameters=[openapi.QUEUE],
        request=openapi.ClaimCommand,
        responses=schema.responses(openapi.Claim, errors=openapi.CLAIM_ERRORS),
    )
    def post(self, request, queue):
        if not is_name(queue):
            raise InvalidArgument("queue must be a queue name", field="queue")
        claim = task_claim(identity=request.auth, queue_name=queue, command=request.data)
        if claim is None:
            return Response({"claimed": False})
        task, attempt = claim.task, claim.attempt
        data = {
            "claimed": True,
            "task": {
                "id": task.id,
                "handler": task.handler,
                "priority": task.priority,
                "input": exactjson.Raw(task.input),
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
        return Response(data)


class TaskHeartbeatView(APIView):
    """POST /v1/tasks/{id}/heartbeat — extend a lease (tasks:work)."""

    permission_classes = [scope_required(Scope.TASKS_WORK)]

    @extend_schema(
        operation_id="heartbeat_task",
        summary="Extend the lease of a RUNNING attempt (never shortens it)",
        parameters=[openapi.TASK_ID],
        request=openapi.HeartbeatCommand,
        responses=schema.responses(openapi.Heartbeat, errors=openapi.ATTEMPT_ERRORS),
    )
    def post(self, request, task_id):
        beat = task_heartbeat(identity=request.auth, task_id=id_argument(task_id, "task_id"), command=request.data)
        attempt = beat.attempt
        return Response(
            {
                "task_id": attempt.task_id,
                "attempt_id": attempt.id,
                "lease_expires_at": format_optional_time(attempt.lease_expires_at),
                "late": beat.late,
            }
        )


class TaskCompleteView(APIView):
    """POST /v1/tasks/{id}/complete — finish an attempt with SUCCEEDED or FAILED (tasks:work)."""

    permission_classes = [scope_required(Scope.TASKS_WORK)]

    @extend_schema(
        operation_id="complete_task",
        summary="Finish a RUNNING attempt with SUCCEEDED or FAILED (retryable?)",
        parameters=[openapi.TASK_ID],
        request=openapi.CompleteCommand,
        responses=schema.responses(openapi.Completion, errors=openapi.ATTEMPT_ERRORS),
    )
    def post(self, request, task_id):
        completion = task_complete(identity=request.auth, task_id=id_argument(task_id, "task_id"), command=request.data)
        task = completion.task
        return Response(
            {
                "task_id": task.id,
                "state": task.state,
                "revision": str(task.revision),
                "attempt_count": task.attempt_count,
                "max_attempts": task.max_attempts,
                "late": completion.late,
            }
        )
