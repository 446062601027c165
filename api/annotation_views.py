"""Notes, acknowledgement and assignment over HTTP: what operators say about an instance, never its state.

GET /v1/workflows/{id}/notes reads (workflows:read); the writes take workflows:annotate or
workflows:recover. Views are thin: the scope (401 before 403), the path id, one service.
"""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from api import schema
from api.engine_views import ReadWriteView
from api.history_views import next_cursor
from api.params import list_params, path_id
from api.permissions import scope_required
from api.rendering import receipt_response
from api.resources import notes
from core import fields
from core.request_id import request_id_of
from engine.commands import id_argument
from history import idempotency
from history.annotations import ANNOTATING, ASSIGN_FIELDS, note_add, review_acknowledge, review_assign
from history.models import Scope
from history.selectors.annotations import NOTES, note_list

ANNOTATE = scope_required(*ANNOTATING)


class WorkflowNotesView(ReadWriteView):
    """/v1/workflows/{id}/notes — GET lists the notes (workflows:read); POST adds one (workflows:annotate or
    workflows:recover, Idempotency-Key)."""

    permissions_by_method = {"GET": scope_required(Scope.READ), "POST": ANNOTATE}

    @extend_schema(
        operation_id="list_workflow_notes",
        summary="Notes on the workflow, newest first, and who acknowledged and is assigned to its current review",
        parameters=[schema.WORKFLOW_ID, *schema.PAGE_PARAMETERS],
        responses=schema.responses(notes.NotePage),
    )
    def get(self, request, id):
        parents = [path_id(id, field="id")]
        limit, after = list_params(request.query_params, kind=NOTES, parents=parents)
        result = note_list(identity=request.auth, instance_id=id, after=after, limit=limit)
        return Response(notes.note_page(result, next_cursor=next_cursor(result.page, kind=NOTES, parents=parents)))

    @extend_schema(
        operation_id="add_workflow_note",
        summary="Add a note (append-only: correct one by adding a note naming it); changes no state or revision",
        parameters=[schema.WORKFLOW_ID, *schema.idempotency_key(status=201)],
        request=notes.NoteCommand,
        responses=schema.responses(notes.NoteItem, status=201, errors=notes.NOTE_ERRORS),
    )
    def post(self, request, id):
        receipt = note_add(
            identity=request.auth,
            instance_id=id_argument(id, "id"),
            command=request.data,
            idempotency_key=request.headers.get(idempotency.HEADER),
            request_id=request_id_of(request),
        )
        return receipt_response(receipt)


class WorkflowAcknowledgeView(APIView):
    """POST /v1/workflows/{id}/acknowledge (workflows:annotate or workflows:recover)."""

    permission_classes = [ANNOTATE]

    @extend_schema(
        operation_id="acknowledge_workflow",
        summary="Acknowledge the instance's current review (a second acknowledgement changes nothing); "
        "changes no state or revision",
        parameters=[schema.WORKFLOW_ID],
        request=notes.AcknowledgeCommand,
        responses=schema.responses(notes.Attention, errors=notes.ATTENTION_ERRORS),
    )
    def post(self, request, id):
        instance_id = id_argument(id, "id")
        fields.command_object(request.data, allowed=())
        answer = review_acknowledge(identity=request.auth, instance_id=instance_id, request_id=request_id_of(request))
        return Response(answer)


class WorkflowAssignView(APIView):
    """POST /v1/workflows/{id}/assign (workflows:annotate or workflows:recover)."""

    permission_classes = [ANNOTATE]

    @extend_schema(
        operation_id="assign_workflow",
        summary="Assign the instance's current review to an operator, or unassign it; changes no state or revision",
        parameters=[schema.WORKFLOW_ID],
        request=notes.AssignCommand,
        responses=schema.responses(notes.Attention, errors=notes.ASSIGN_ERRORS),
    )
    def post(self, request, id):
        instance_id = id_argument(id, "id")
        command = fields.command_object(request.data, allowed=ASSIGN_FIELDS)
        answer = review_assign(
            identity=request.auth,
            instance_id=instance_id,
            assignee=fields.required(command, "assignee", what='an actor id, or "" to unassign'),
            request_id=request_id_of(request),
        )
        return Response(answer)
