"""The engine's JSON API: start, signal (and the signal list on its path), pause/resume/cancel, workers.

Views are thin: check the scope (401 before 403), validate the path, call one service,
render its answer in the envelope. Every bad input is a 400 naming its field.
"""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from api import schema
from api.history_views import next_cursor
from api.instance_filters import instance_query
from api.params import list_params, page_params, path_id
from api.permissions import Authenticated, scope_required
from api.rendering import receipt_response
from api.resources import instances, signals, tasks
from core.errors import InvalidArgument
from core.request_id import request_id_of
from engine.commands import id_argument
from engine.instances import instance_cancel, instance_pause, instance_resume, instance_start
from engine.signaling import signal_accept
from engine.worker import task_claim, task_complete, task_heartbeat
from history import idempotency
from history.models import Scope
from history.selectors import instance_list
from history.selectors.signals import SIGNALS, signal_list
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
        parameters=instances.workflow_query_parameters(),
        responses=schema.responses(instances.InstancePage, errors=instances.QUERY_ERRORS),
    )
    def get(self, request):
        params = request.query_params
        query = instance_query(params)
        kind = instance_list.ORDERS[query.order]
        parents = [request.auth.namespace_id, query.binding()]
        limit, after = page_params(params, kind=kind, parents=parents)
        page = instance_list.instance_list(identity=request.auth, query=query, after=after, limit=limit)
        return Response(instances.instance_page(page, next_cursor=next_cursor(page, kind=kind, parents=parents)))

    @extend_schema(
        operation_id="start_workflow",
        summary="Start an instance of a definition",
        parameters=schema.idempotency_key(status=201),
        request=instances.StartCommand,
        responses=schema.responses(instances.InstanceSummary, status=201, errors=instances.START_ERRORS),
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
        responses=schema.responses(signals.SignalPage),
    )
    def get(self, request, id):
        parents = [path_id(id, field="id")]
        limit, after = list_params(request.query_params, kind=SIGNALS, parents=parents)
        result = signal_list(identity=request.auth, instance_id=id, after=after, limit=limit)
        cursor = next_cursor(result.page, kind=SIGNALS, parents=parents)
        return Response(signals.signal_page(result, next_cursor=cursor))

    @extend_schema(
        operation_id="signal_workflow",
        summary="Accept a signal for a SIGNAL step (or a POLL step's final signal)",
        parameters=[schema.WORKFLOW_ID, *schema.idempotency_key(status=201)],
        request=signals.SignalCommand,
        responses=schema.responses(signals.SignalAccepted, status=201, errors=signals.SIGNAL_ERRORS),
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
            request=instances.ControlCommand,
            responses=schema.responses(instances.InstanceSummary, errors=instances.CONTROL_ERRORS),
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
        parameters=[tasks.QUEUE],
        request=tasks.ClaimCommand,
        responses=schema.responses(tasks.Claim, errors=tasks.CLAIM_ERRORS),
    )
    def post(self, request, queue):
        if not is_name(queue):
            raise InvalidArgument("queue must be a queue name", field="queue")
        claim = task_claim(identity=request.auth, queue_name=queue, command=request.data)
        return Response(tasks.claim(claim))


class TaskHeartbeatView(APIView):
    """POST /v1/tasks/{id}/heartbeat — extend a lease (tasks:work)."""

    permission_classes = [scope_required(Scope.TASKS_WORK)]

    @extend_schema(
        operation_id="heartbeat_task",
        summary="Extend the lease of a RUNNING attempt (never shortens it)",
        parameters=[tasks.TASK_ID],
        request=tasks.HeartbeatCommand,
        responses=schema.responses(tasks.Heartbeat, errors=tasks.ATTEMPT_ERRORS),
    )
    def post(self, request, task_id):
        beat = task_heartbeat(identity=request.auth, task_id=id_argument(task_id, "task_id"), command=request.data)
        return Response(tasks.heartbeat(beat))


class TaskCompleteView(APIView):
    """POST /v1/tasks/{id}/complete — finish an attempt with SUCCEEDED or FAILED (tasks:work)."""

    permission_classes = [scope_required(Scope.TASKS_WORK)]

    @extend_schema(
        operation_id="complete_task",
        summary="Finish a RUNNING attempt with SUCCEEDED or FAILED (retryable?)",
        parameters=[tasks.TASK_ID],
        request=tasks.CompleteCommand,
        responses=schema.responses(tasks.Completion, errors=tasks.ATTEMPT_ERRORS),
    )
    def post(self, request, task_id):
        completion = task_complete(identity=request.auth, task_id=id_argument(task_id, "task_id"), command=request.data)
        return Response(tasks.completion(completion))
