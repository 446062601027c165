"""The console shows a step's contract with its numbers exactly as defined, and its forms judge them exactly."""

import html
import json

import pytest

from core import exactjson
from history.models import Step
from testkit import states
from tests.recovery.digest import history_digest

pytestmark = pytest.mark.django_db

# Not a float's text: read back as a float it would print 0.3.
CONTRACT = (
    '{"type":"object","properties":{"amount":{"multipleOf":0.01,"maximum":1e400}},"not":{"const":0.30000000000000001}}'
)


def _in_review(tenancy, contract: str = CONTRACT) -> states.State:
    """A step whose worker answered the one amount its contract refuses: in review."""
    step = states.TASK_STEP | {"contract": exactjson.loads(contract)}
    return states.result_contract_violation_state(tenancy, step=step, result='{"amount":0.30000000000000001}')


def _page(client, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200
    return html.unescape(response.content.decode())


def test_the_decision_facts_show_the_contract_exactly(client, console_user, tenancy):
    client.force_login(console_user("vic", "viewers"))
    state = _in_review(tenancy)
    page = _page(client, f"/admin/history/workflowinstance/{state.instance.id}/change/")
    shown = page.split('id="step-definition">')[1].split("</pre>")[0]
    assert '"multipleOf": 0.01' in shown and '"maximum": 1E+400' in shown and '"const": 0.30000000000000001' in shown
    assert json.loads(shown)["contract"] == json.loads(CONTRACT)


def test_the_definition_page_shows_the_spec_exactly(client, console_user, tenancy):
    client.force_login(console_user("vic", "viewers"))
    state = _in_review(tenancy)
    page = _page(client, f"/admin/history/workflowdefinition/{state.definition.id}/change/")
    assert '"const":0.30000000000000001' in page


@pytest.mark.parametrize(("amount", "applied"), [("19.99", True), ("0.30000000000000001", False)])
def test_the_resolve_step_form_judges_the_amount_exactly(client, console_user, tenancy, amount, applied):
    client.force_login(console_user("olga", "operators"))
    state = _in_review(tenancy, exactjson.dumps(states.MONEY))
    step = Step.objects.get(pk=state.step.pk)
    before = history_digest()
    form = {
        "reason": "the ledger shows the charge",
        "evidence_ref": "ticket:OPS-123",
        "declaration": "on",
        "expected_revision": str(state.instance.revision),
        "idempotency_key": "admin-resolve-1",
        "step_key": step.key,
        "activation_id": step.current_activation_id,
        "expected_step_revision": str(step.revision),
        "conclusion": "SUCCEEDED",
        "result": f'{{"amount":{amount}}}',
        "_confirm": "1",
    }
    url = f"/admin/history/workflowinstance/{state.instance.id}/recovery/resolve-step/"
    page = html.unescape(client.post(url, form, follow=True).content.decode())
    if applied:
        assert "Resolve step applied" in page
        assert Step.objects.get(pk=step.pk).output == '{"amount":19.99}'
    else:
        assert f"result breaks the step's result contract: {amount} is not a multiple of 0.01" in page
        assert history_digest() == before
