"""OPERATIONS is the one list: a seventh operation, written in this module and added as one entry, is offered
by the console (its form, its button, the Next button, its bulk action), the API (its route), the OpenAPI
document (its operation), the SDK (``recover``) and the eligibility, with nothing else added anywhere.

Only the URL confs are built from the list at import time (a route per operation, as the OpenAPI document
needs): the fixture reloads them with the entry, and again without it, so no other test sees it.
"""

import importlib
import json
from dataclasses import dataclass

import httpx
import pytest
from django.test import Client
from django.urls import clear_url_caches, reverse
from weave_sdk import WeaveClient, types

from api import urls as api_urls
from console.links import instance_name
from core.errors import FailedPrecondition
from history.models import Activation, Step, StepState
from recovery.commands import Declaration, StepDecision
from recovery.context import Context
from recovery.operations import OPERATIONS
from recovery.pipeline import Effect, Operation, Plan
from recovery.step_history import step_decision_resolve
from testkit import requests as rq
from testkit import states
from tests.conftest import bearer
from weave_site import urls as root_urls

pytestmark = pytest.mark.django_db

# ---- the seventh operation: its whole module -------------------------------------------------------


@dataclass(frozen=True)
class NoteStepCommand(StepDecision):
    declaration = Declaration(
        "note_taken",
        asserts="the step was looked at",
        wording="I looked at this step; nothing of it changes.",
    )

    note_taken: bool


@dataclass
class NotePlan(Plan):
    step: Step
    activation: Activation

    def preview(self) -> dict:
        return {"step": {"key": self.step.key, "state": self.step.state}}


class NoteStep(Operation):
    """Note that a step in review was looked at (note_taken=true); no engine row changes."""

    name = "note-step"
    title = "Note step"
    target = "step"
    command_class = NoteStepCommand
    bulk = "Note one step on selected instances"

    def check(self, ctx: Context, command: NoteStepCommand) -> NotePlan:
        history = step_decision_resolve(ctx, command)
        if history.step.state != StepState.NEEDS_REVIEW:
            raise FailedPrecondition(f"step {history.step.key!r} is {history.step.state}, not NEEDS_REVIEW")
        return NotePlan(step=history.step, activation=history.current)

    def apply(self, ctx: Context, command: NoteStepCommand, plan: NotePlan, *, operation_id: str) -> Effect:
        return Effect(before={}, after={"noted": True}, step_key=plan.step.key, activation=plan.activation)


NOTE_STEP = NoteStep()
NAME, OPERATION_ID = NOTE_STEP.name, "recovery_note_step"
PATH = f"/v1/workflows/{{instance_id}}/recovery/{NAME}"


# ---- its one entry, and the URL confs rebuilt with it ------------------------------------------------


def _urlconfs_rebuilt() -> None:
    importlib.reload(api_urls)
    importlib.reload(root_urls)
    clear_url_caches()


@pytest.fixture
def seventh():
    """OPERATIONS with the seventh entry, for one test; the list and the routes as they were afterwards."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(OPERATIONS, NAME, NOTE_STEP)
        try:
            _urlconfs_rebuilt()
            yield NOTE_STEP
        finally:
            patch.undo()
            _urlconfs_rebuilt()


def _note(state: states.State, **overrides) -> dict:
    """The command of the seventh operation on the state's step, as a client sends it."""
    step = Step.objects.get(instance=state.instance, key=state.step.key)
    state.instance.refresh_from_db()
    return {
        "expected_revision": str(state.instance.revision),
        "reason": rq.REASON,
        "evidence_ref": rq.EVIDENCE,
        "step_key": step.key,
        "activation_id": step.current_activation_id,
        "expected_step_revision": str(step.revision),
        "note_taken": True,
        **overrides,
    }


@pytest.fixture
def operator(client, console_user):
    client.force_login(console_user("olga", "operators"))
    return client


# ---- 1. the console --------------------------------------------------------------------------------


def test_the_console_offers_its_form_its_button_and_next(seventh, operator, tenancy):
    # Reviewed: ReviewTask is done, the step is still in review; ResolveStep concludes it by hand, so Next prefers
    # the seventh operation, which keeps the step's work going (and comes after the six in the list).
    state = states.task_reviewed_state(tenancy)
    page = operator.get(reverse("admin:history_workflowinstance_change", args=[state.instance.id])).content.decode()
    assert f'data-operation="{NAME}"' in page and 'data-operation="resolve-step"' in page
    assert f'data-next="{NAME}"' in page

    form = operator.get(reverse("admin:history_workflowinstance_recovery", args=[state.instance.id, NAME]))
    html = form.content.decode()
    assert form.status_code == 200
    assert f"Note step — {instance_name(state.instance)}" in html
    assert "I looked at this step; nothing of it changes." in html
    assert "I declare (note_taken)" in html


def test_the_instance_list_offers_its_bulk_action(seventh, operator, tenancy):
    state = states.task_reviewed_state(tenancy)
    url = reverse("admin:history_workflowinstance_changelist")
    assert '<option value="note_step_selected">Note one step on selected instances</option>' in (
        operator.get(url).content.decode()
    )
    chosen = {"action": "note_step_selected", "_selected_action": [state.instance.id], "step_key": state.step.key}
    html = operator.post(url, chosen).content.decode()
    assert "Note step — selected instances" in html and '<strong id="bulk-eligible">1 of 1 eligible</strong>' in html


# ---- 2. the API, 5. the eligibility --------------------------------------------------------------


def test_the_api_runs_it_and_the_eligibility_judges_it(seventh, api, tenancy, recover_token):
    state = states.task_reviewed_state(tenancy)
    refused = states.task_failed_state(tenancy)  # its step FAILED, not NEEDS_REVIEW
    auth = bearer(recover_token.token)

    eligibility = api.get(f"/v1/workflows/{state.instance.id}", **auth).json()["data"]["eligibility"]
    entry = eligibility["steps"][state.step.key][NAME]
    assert entry["possible"] and entry["preview"]["operation"] == "workflow.note_step"
    eligibility = api.get(f"/v1/workflows/{refused.instance.id}", **auth).json()["data"]["eligibility"]
    assert eligibility["steps"][refused.step.key][NAME] == {
        "possible": False,
        "code": "FAILED_PRECONDITION",
        "reason": f"step {refused.step.key!r} is FAILED, not NEEDS_REVIEW",
    }

    step_before = Step.objects.get(pk=state.step.pk)
    response = api.post(
        PATH.format(instance_id=state.instance.id),
        data=json.dumps(_note(state)),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="note-1",
        **auth,
    )
    assert response.status_code == 200, response.content
    data = response.json()["data"]
    assert (data["operation"], data["step_key"], data["state"]) == ("workflow.note_step", "charge", "NEEDS_REVIEW")
    assert data["revision"] == str(state.instance.revision + 1)  # the pipeline's own bump
    audit = state.operations().get()
    assert (audit.action, audit.after["noted"], audit.request_id) == (
        "workflow.note_step",
        True,
        response["X-Request-Id"],
    )
    step = Step.objects.get(pk=state.step.pk)
    assert (step.state, step.revision, step.current_activation_id) == (
        step_before.state,
        step_before.revision,
        step_before.current_activation_id,
    )


# ---- 3. the OpenAPI document ------------------------------------------------------------------------


def test_the_openapi_document_describes_it(seventh, api):
    document = api.get("/v1/openapi.json").json()
    operation = document["paths"][PATH]["post"]
    assert operation["operationId"] == OPERATION_ID and operation["summary"] == "NoteStep (workflows:recover)"
    command = document["components"]["schemas"]["NoteStepCommand"]
    assert (
        command["properties"]["note_taken"]["description"]
        == "must be true: the operator asserts the step was looked at"
    )
    assert "429" not in operation["responses"]  # it takes no quota


# ---- 4. the SDK -----------------------------------------------------------------------------------------


def _through_django(client: Client) -> httpx.MockTransport:
    """The SDK's requests answered by Django's test client: the test's own transaction, no server thread."""
    sent_by_httpx = {"host", "content-length", "content-type", "accept-encoding", "connection", "user-agent"}

    def answer(request: httpx.Request) -> httpx.Response:
        response = client.generic(
            request.method,
            request.url.raw_path.decode("ascii"),
            data=request.content,
            content_type=request.headers.get("content-type", ""),
            headers={name: value for name, value in request.headers.items() if name.lower() not in sent_by_httpx},
        )
        return httpx.Response(response.status_code, headers=list(response.items()), content=response.content)

    return httpx.MockTransport(answer)


def test_the_sdk_recovers_with_it_and_reads_a_typed_receipt(seventh, client, tenancy, recover_token):
    state = states.task_reviewed_state(tenancy)
    command = _note(state)
    with WeaveClient("http://testserver", recover_token.token, transport=_through_django(client)) as sdk:
        answer = sdk.recover(state.instance.id, NAME, idempotency_key="sdk-note-1", command=command)
        again = sdk.recover(state.instance.id, NAME, idempotency_key="sdk-note-1", command=command)
    receipt = answer.data
    assert isinstance(receipt, types.Receipt) and answer.status == 200
    assert (receipt.operation, receipt.step_key, receipt.revision) == (
        "workflow.note_step",
        "charge",
        state.instance.revision + 1,
    )
    assert again.data == receipt and state.operations().count() == 1  # a replay, not a second note


# ---- and without the entry, none of it ----------------------------------------------------------------


def test_without_the_entry_nothing_offers_it(api, tenancy, recover_token):
    assert NAME not in OPERATIONS
    document = api.get("/v1/openapi.json").json()
    assert PATH not in document["paths"] and "NoteStepCommand" not in document["components"]["schemas"]
    state = states.task_reviewed_state(tenancy)
    auth = bearer(recover_token.token)
    eligibility = api.get(f"/v1/workflows/{state.instance.id}", **auth).json()["data"]["eligibility"]
    assert NAME not in eligibility["steps"][state.step.key]
    response = api.post(PATH.format(instance_id=state.instance.id), data="{}", content_type="application/json", **auth)
    assert response.status_code == 404
