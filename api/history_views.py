"""GET endpoints of the history read API: validate, call one selector, present.

Order of checks: 401 and 403 in the permission classes, then the syntactic 400s here
(path ids, step key, query parameters, cursor signature and binding), then the selector's
404 / semantic 400 / 503. A cursor is bound to the parents as written in the path.
"""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from api import schema
from api.params import PAGE_PARAMS, list_params, no_params, page_params, path_id, path_step_key, query_check
from api.permissions import scope_required
from api.resources import activations, events, instances, operations, signals, signatures, tasks
from history.locking import reads_from_any_commit
from history.models import Scope
from history.selectors import instance_list
from history.selectors.activations import ACTIVATIONS, POLL_ROUNDS, activation_get, activation_list, poll_round_list
from history.selectors.events import EVENTS, event_filters, event_list
from history.selectors.instances import instance_get, task_get
from history.selectors.operations import WORKFLOW_OPERATIONS, workflow_operation_list
from history.selectors.pagination import ListKind, Page, cursor_encode
from history.selectors.signals import SIGNAL_OPERATIONS, signal_get, signal_operation_get, signal_operation_list
from history.selectors.signatures import SIGNATURES, signature_list
from history.selectors.tasks import task_source_get
from recovery.eligibility import instance_eligibility_document

READ = scope_required(Scope.READ)
AUDIT_READ = scope_required(Scope.AUDIT_READ)


class HistoryView(APIView):
    http_method_names = ["get"]
    permission_classes = [READ]

    def dispatch(self, request, *args, **kwargs):
        with reads_from_any_commit():
            return super().dispatch(request, *args, **kwargs)


def next_cursor(page: Page, *, kind: ListKind, parents: list[str]) -> str | None:
    return None if page.next_key is None else cursor_encode(kind=kind, parents=parents, key=page.next_key)


class ActivationListView(HistoryView):
    @extend_schema(
        operation_id="list_workflow_activations",
        summary="Activations of one logical step, newest sequence first",
        parameters=[schema.WORKFLOW_ID, schema.STEP_KEY, *schema.PAGE_PARAMETERS],
        responses=schema.responses(activations.ActivationPage),
    )
    def get(self, request, id, key):
        parents = [path_id(id, field="id"), path_step_key(key)]
        limit, after = list_params(request.query_params, kind=ACTIVATIONS, parents=parents)
        result = activation_list(identity=request.auth, instance_id=id, step_key=key, after=after, limit=limit)
        cursor = next_cursor(result.page, kind=ACTIVATIONS, parents=parents)
        return Response(activations.activation_page(result, next_cursor=cursor))


class ActivationDetailView(HistoryView):
    @extend_schema(
        operation_id="get_workflow_activation",
        summary="One requested activation beside the step's current view",
        parameters=[schema.WORKFLOW_ID, schema.STEP_KEY, schema.ACTIVATION_ID],
        responses=schema.responses(activations.ActivationDetail),
    )
    def get(self, request, id, key, activation):
        path_id(id, field="id")
        path_step_key(key)
        path_id(activation, field="activation")
        no_params(request.query_params)
        detail = activation_get(identity=request.auth, instance_id=id, step_key=key, activation_id=activation)
        return Response(activations.activation_detail(detail))


class PollRoundListView(HistoryView):
    @extend_schema(
        operation_id="list_workflow_poll_rounds",
        summary="Business rounds of one POLL activation, newest round first",
        parameters=[schema.WORKFLOW_ID, schema.STEP_KEY, schema.ACTIVATION_ID, *schema.PAGE_PARAMETERS],
        responses=schema.responses(activations.PollRoundPage),
    )
    def get(self, request, id, key, activation):
        parents = [path_id(id, field="id"), path_step_key(key), path_id(activation, field="activation")]
        limit, after = list_params(request.query_params, kind=POLL_ROUNDS, parents=parents)
        result = poll_round_list(
            identity=request.auth, instance_id=id, step_key=key, activation_id=activation, after=after, limit=limit
        )
        cursor = next_cursor(result.page, kind=POLL_ROUNDS, parents=parents)
        return Response(activations.poll_round_page(result, next_cursor=cursor))


class SignalDetailView(HistoryView):
    @extend_schema(
        operation_id="get_workflow_signal",
        summary="The full signal, with payload and acceptance identity",
        parameters=[schema.WORKFLOW_ID, schema.SIGNAL_ID],
        responses=schema.responses(signals.SignalDetail),
    )
    def get(self, request, id, signal):
        path_id(id, field="id")
        path_id(signal, field="signal")
        no_params(request.query_params)
        detail = signal_get(identity=request.auth, instance_id=id, signal_id=signal)
        return Response(signals.signal_detail(detail.signal))


class SignalOperationListView(HistoryView):
    permission_classes = [AUDIT_READ]

    @extend_schema(
        operation_id="list_workflow_signal_operations",
        summary="The signal's resource audit, newest first (workflows:audit:read)",
        parameters=[schema.WORKFLOW_ID, schema.SIGNAL_ID, *schema.PAGE_PARAMETERS],
        responses=schema.responses(operations.SignalOperationPage),
    )
    def get(self, request, id, signal):
        parents = [path_id(id, field="id"), path_id(signal, field="signal")]
        limit, after = list_params(request.query_params, kind=SIGNAL_OPERATIONS, parents=parents)
        page = signal_operation_list(identity=request.auth, instance_id=id, signal_id=signal, after=after, limit=limit)
        cursor = next_cursor(page, kind=SIGNAL_OPERATIONS, parents=parents)
        return Response(operations.signal_operation_page(page, next_cursor=cursor))


class SignalOperationDetailView(HistoryView):
    permission_classes = [AUDIT_READ]

    @extend_schema(
        operation_id="get_workflow_signal_operation",
        summary="One signal audit record by its own id, with reason, before and after (workflows:audit:read)",
        parameters=[schema.WORKFLOW_ID, schema.SIGNAL_ID, schema.OPERATION_ID],
        responses=schema.responses(operations.SignalOperationDetail),
    )
    def get(self, request, id, signal, operation):
        path_id(id, field="id")
        path_id(signal, field="signal")
        path_id(operation, field="operation")
        no_params(request.query_params)
        record = signal_operation_get(identity=request.auth, instance_id=id, signal_id=signal, operation=operation)
        return Response(operations.signal_operation_detail(record))


class InstanceDetailView(HistoryView):
    @extend_schema(
        operation_id="get_workflow",
        summary="The instance, its steps' current views and the recovery eligibility",
        parameters=[schema.WORKFLOW_ID],
        responses=schema.responses(instances.InstanceDetail),
    )
    def get(self, request, id):
        path_id(id, field="id")
        no_params(request.query_params)
        detail = instance_get(identity=request.auth, instance_id=id)
        eligibility = instance_eligibility_document(detail.instance, detail.steps)
        return Response(instances.instance_detail(detail, eligibility))


class TaskDetailView(HistoryView):
    @extend_schema(
        operation_id="get_workflow_task",
        summary="Execution history of one task under its instance",
        parameters=[schema.WORKFLOW_ID, schema.TASK_ID],
        responses=schema.responses(tasks.TaskDetail),
    )
    def get(self, request, id, task):
        path_id(id, field="id")
        path_id(task, field="task")
        no_params(request.query_params)
        return Response(tasks.task_detail(task_get(identity=request.auth, instance_id=id, task_id=task)))


class TaskSourceView(HistoryView):
    permission_classes = [scope_required(Scope.READ, Scope.TASKS_WORK)]

    @extend_schema(
        operation_id="get_task_source",
        summary="Where a task comes from: instance, step, activation, poll round and queue, verified both ways "
        "(workflows:read, or tasks:work on the task's queue)",
        parameters=[tasks.TASK_ID],
        responses=schema.responses(tasks.TaskSource, errors=tasks.TASK_SOURCE_ERRORS),
    )
    def get(self, request, task_id):
        path_id(task_id, field="task_id")
        no_params(request.query_params)
        return Response(tasks.task_source(task_source_get(identity=request.auth, task_id=task_id)))


class WorkflowOperationListView(HistoryView):
    permission_classes = [AUDIT_READ]

    @extend_schema(
        operation_id="list_workflow_operations",
        summary="The workflow audit, newest first (workflows:audit:read)",
        parameters=[schema.WORKFLOW_ID, *schema.PAGE_PARAMETERS],
        responses=schema.responses(operations.WorkflowOperationPage),
    )
    def get(self, request, id):
        parents = [path_id(id, field="id")]
        limit, after = list_params(request.query_params, kind=WORKFLOW_OPERATIONS, parents=parents)
        result = workflow_operation_list(identity=request.auth, instance_id=id, after=after, limit=limit)
        cursor = next_cursor(result.page, kind=WORKFLOW_OPERATIONS, parents=parents)
        return Response(operations.workflow_operation_page(result, next_cursor=cursor))


class EventListView(HistoryView):
    @extend_schema(
        operation_id="list_workflow_events",
        summary="The instance's timeline in sequence order (oldest first unless order=desc), no payload bodies",
        parameters=[schema.WORKFLOW_ID, *events.EVENT_FILTER_PARAMETERS, *schema.PAGE_PARAMETERS],
        responses=schema.responses(events.EventPage),
    )
    def get(self, request, id):
        parents = [path_id(id, field="id")]
        query = request.query_params
        query_check(query, allowed=(*events.EVENT_FILTERS, *PAGE_PARAMS), repeatable=("kind",))
        filters = event_filters(
            kinds=query.getlist("kind"),
            step_key=query.get("step_key"),
            after_sequence=query.get("after_sequence"),
            order=query.get("order"),
        )
        parents += filters.binding()
        limit, after = page_params(query, kind=EVENTS, parents=parents)
        result = event_list(identity=request.auth, instance_id=id, filters=filters, after=after, limit=limit)
        cursor = next_cursor(result.page, kind=EVENTS, parents=parents)
        return Response(events.event_page(result, next_cursor=cursor))


class ReviewSummaryView(HistoryView):
    @extend_schema(
        operation_id="get_review_summary",
        summary="Visible instances in review counted per cause and per definition (the busiest first)",
        responses=schema.responses(instances.ReviewSummary, errors=[400, 401, 403, 503]),
    )
    def get(self, request):
        no_params(request.query_params)
        return Response(instances.review_summary(instance_list.review_summary(identity=request.auth)))


class SignatureListView(HistoryView):
    @extend_schema(
        operation_id="list_signatures",
        summary="Failure signatures of the namespace, the latest arrival first",
        parameters=schema.PAGE_PARAMETERS,
        responses=schema.responses(signatures.SignaturePageSerializer, errors=[400, 401, 403, 503]),
    )
    def get(self, request):
        parents = [request.auth.namespace_id]
        limit, after = list_params(request.query_params, kind=SIGNATURES, parents=parents)
        result = signature_list(identity=request.auth, after=after, limit=limit)
        cursor = next_cursor(result.page, kind=SIGNATURES, parents=parents)
        return Response(signatures.signature_page(result, next_cursor=cursor))
