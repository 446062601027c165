"""Incident cases: from a failure signature to a closed summary — members frozen at opening, notes and evidence,
"accounted for: N of M" as repairs are verified by the runner, instances end or are abandoned, a close refused
until every one is, and the summary exported as Markdown and JSON with who did what."""

import datetime as dt
import json
import re
from html import unescape

import pytest
from django.test import Client

from console.cases import CaseRefused, case_close, case_open, case_progress
from console.models import Case, CaseMember, CaseState
from core import clock
from core.identity import identity_of_user
from engine.worker import task_complete
from history.models import RepairCheck, RepairVerdict, WorkflowInstance
from recovery.campaigns import campaign_make
from recovery.operations import instance_continue, step_retry
from recovery.repairs import pass_repair_checks
from testkit import requests as rq
from testkit import states
from testkit.driver import Engine, task_step
from tests.recovery.test_repairs import WINDOW, _decide, _windowed

pytestmark = pytest.mark.django_db
ADD = "/admin/console/case/add/"


def _logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _page(client, case) -> str:
    answer = client.get(f"/admin/console/case/{case.pk}/change/")
    assert answer.status_code == 200
    return unescape(answer.content.decode())


def _post(client, case, what, **data) -> str:
    answer = client.post(f"/admin/console/case/{case.pk}/{what}/", data, follow=True)
    assert answer.status_code == 200
    return unescape(answer.content.decode())


@pytest.fixture
def stranded(tenancy):
    """Three instances in review on one failure signature (a task that failed for good), one on another."""
    failed = [states.task_failed_state(tenancy) for _ in range(3)]
    other = states.task_unknown_state(tenancy)
    return failed, other


def test_a_case_from_a_signature_to_its_closed_summary(tenancy, console_user, stranded):
    failed, other = stranded
    olga_user = console_user("olga", "operators")
    olga = _logged_in(olga_user)
    signature = WorkflowInstance.objects.get(pk=failed[0].instance.id).failure_signature_id
    home = unescape(olga.get("/admin/").content.decode())
    assert f"{ADD}?signature={signature}" in home  # the queue's "open a case" beside the signature
    opened = olga.post(
        ADD, {"title": "Card gateway declines", "signature": signature, "ticket_url": "https://t.example/INC-7"}
    )
    case = Case.objects.get()
    assert opened.status_code == 302 and opened["Location"] == f"/admin/console/case/{case.pk}/change/"
    members = set(CaseMember.objects.filter(case=case).values_list("instance_id", flat=True))
    assert members == {state.instance.id for state in failed}  # the other signature's instance is not in it
    page = _page(olga, case)
    assert "Accounted for: 0 of 3" in page and "in review: 3" in page and "https://t.example/INC-7" in page

    page = _post(olga, case, "note", text="The gateway rotated its keys at 03:00", evidence_ref="https://logs/q=42")
    assert "The gateway rotated its keys at 03:00" in page and "evidence: https://logs/q=42" in page

    # One repaired by olga (RetryStep and Continue through the recovery service), one abandoned, one in review.
    identity = identity_of_user(olga_user)
    repaired, abandoned, waiting = failed
    rq.run(step_retry, identity, repaired, rq.retry(repaired), key="retry")
    rq.run(instance_continue, identity, repaired, rq.continue_(repaired), key="continue")
    page = _post(olga, case, "abandon", instance=abandoned.instance.id, reason="customer cancelled the order")
    # Out of review is not accounted for: the repair is watched until the runner judges it.
    assert "Accounted for: 1 of 3" in page and "customer cancelled the order" in page and "verifying: 1" in page
    refused = _post(olga, case, "close")
    assert "2 of 3 instances are not accounted for yet" in refused and Case.objects.get().state == CaseState.OPEN
    # The retried task succeeds; the runner takes the result and judges the repair effective.
    engine = Engine(*tenancy)
    claim = engine.claim()
    command = {"attempt_id": claim.attempt.id, "outcome": "SUCCEEDED", "result": {"paid": True}}
    task_complete(identity=engine.identity, task_id=claim.task.id, command=command)
    engine.settle()
    assert RepairCheck.objects.get(instance_id=repaired.instance.id).verdict == RepairVerdict.EFFECTIVE
    page = _page(olga, case)
    assert "Accounted for: 2 of 3" in page
    _post(olga, case, "abandon", instance=waiting.instance.id, reason="duplicate of another order")
    page = _post(olga, case, "close")
    assert "Case closed" in page and "Accounted for: 3 of 3" in page
    case.refresh_from_db()
    assert (case.state, case.closed_by) == (CaseState.CLOSED, "olga")

    summary = json.loads(olga.get(f"/admin/console/case/{case.pk}/summary.json").content)
    assert summary["counts"] == {
        "members": 3,
        "accounted_for": 3,
        "in review": 0,
        "stalled": 0,
        "stopping": 0,
        "running": 0,
        "verifying": 0,
        "ineffective": 0,
        "verified": 0,
        "succeeded": 1,
        "ended": 0,
        "abandoned": 2,
    }
    whats = [entry["what"] for entry in summary["timeline"]]
    assert whats[0] == "opened" and whats[-1] == "closed"
    assert {"note", "abandoned", "workflow.retry_step", "workflow.continue"} <= set(whats)
    # Opened, the note, the retry, the continue, two abandonments, closed: one person under one name.
    assert summary["who"] == {"olga": 7}
    outcomes = {m["instance_id"]: m["status"] for m in summary["members"]}
    expected = {repaired.instance.id: "succeeded", abandoned.instance.id: "abandoned", waiting.instance.id: "abandoned"}
    assert outcomes == expected
    markdown = olga.get(f"/admin/console/case/{case.pk}/summary.md")
    assert markdown["Content-Disposition"] == f'attachment; filename="case-{case.pk}-summary.md"'
    text = markdown.content.decode()
    assert text.startswith("# Card gateway declines\n") and "## Accounted for: 3 of 3" in text
    assert f"| {abandoned.instance.id} | " in text and "customer cancelled the order" in text
    # Closed: the summary is what was true then, and nothing more is written.
    assert "The case is closed" in _post(olga, case, "note", text="too late")
    assert Case.objects.get().notes.count() == 1


def test_a_member_out_of_review_is_accounted_for_once_the_runner_verified_its_repair(tenancy):
    engine = Engine(*tenancy)
    onward = states.task_unknown_state(tenancy, steps=[states.TASK_STEP, states.NEXT_STEP])
    unmoved = states.task_failed_state(tenancy, attempts_used=1)  # budget left: safe to run again
    _windowed(unmoved)
    running = engine.start(engine.define([task_step()]))  # never in review, never repaired
    members = [onward.instance.id, unmoved.instance.id, running.id]
    case = case_open(identity=engine.identity, username="olga", title="t", ticket_url="", instance_ids=members)
    assert case_progress(case).statuses == dict.fromkeys(members[:2], "in review") | {running.id: "running"}

    _decide(tenancy, onward.instance, "conclude", conclusion="SUCCEEDED", result={"paid": True})
    _decide(tenancy, unmoved.instance, "retry")
    progress = case_progress(case)
    # Concluded, its next step runs: effective. Retried, its task waits for a worker: watched, not yet verified.
    assert progress.statuses == {
        onward.instance.id: "verified",
        unmoved.instance.id: "verifying",
        running.id: "running",
    }
    assert progress.accounted == 1
    clock.advance(dt.timedelta(seconds=WINDOW + 1))
    assert pass_repair_checks() == 1  # the repairs' pass alone: the watchdog would mark it stalled first
    assert case_progress(case).statuses[unmoved.instance.id] == "ineffective"
    with pytest.raises(CaseRefused, match="2 of 3 instances are not accounted for yet"):
        case_close(case=case, username="olga")


def test_a_selection_of_the_instance_list_becomes_a_case(tenancy, console_user, stranded):
    failed, other = stranded
    olga = _logged_in(console_user("olga", "operators"))
    chosen = [failed[0].instance.id, other.instance.id]
    answer = olga.post(
        "/admin/history/workflowinstance/",
        {"action": "case_from_selection", "_selected_action": chosen},
    )
    case = Case.objects.get()
    assert answer.status_code == 302 and answer["Location"] == f"/admin/console/case/{case.pk}/change/"
    assert set(case.members.values_list("instance_id", flat=True)) == set(chosen)
    assert case.title == "2 selected instances"
    # A campaign on one of its instances is linked from the case; one on none of them is not.
    anna = identity_of_user(console_user("anna", "operators"))
    campaigns = [
        campaign_make(
            identity=anna,
            instances=WorkflowInstance.objects.filter(pk=instance_id),
            source="a test's selection",
            command={
                "title": title,
                "kind": "retry",
                "step_key": "charge",
                "reason": "r",
                "evidence_ref": "t:1",
                "declared": True,
            },
            owner="anna",
        )
        for title, instance_id in (("on the case", failed[0].instance.id), ("elsewhere", failed[1].instance.id))
    ]
    linked = re.findall(r'<a href="/admin/history/campaign/(\w+)/change/">', _page(olga, case))
    assert linked == [campaigns[0].id]


@pytest.mark.parametrize(
    ("post", "error"),
    [
        ({"title": "", "signature": "SIG"}, "Title: This field is required."),
        ({"title": "x", "signature": "f" * 32}, "Select a valid choice."),
        ({"title": "x", "signature": "SIG", "ticket_url": "not a url"}, "Enter a valid URL."),
    ],
)
def test_a_bad_field_opens_nothing_and_names_the_field(tenancy, console_user, stranded, post, error):
    signature = WorkflowInstance.objects.get(pk=stranded[0][0].instance.id).failure_signature_id
    post = {key: value.replace("SIG", signature) for key, value in post.items()}
    answer = _logged_in(console_user("olga", "operators")).post(ADD, post)
    assert answer.status_code == 200 and error in unescape(answer.content.decode())
    assert not Case.objects.exists()


def test_a_signature_with_nothing_left_in_review_opens_no_empty_case(tenancy, console_user, stranded):
    failed, _ = stranded
    olga = _logged_in(console_user("olga", "operators"))
    signature = WorkflowInstance.objects.get(pk=failed[0].instance.id).failure_signature_id
    identity = states._engine(tenancy).identity
    for state in failed:
        rq.run(step_retry, identity, state, rq.retry(state), key=f"r-{state.instance.id}")
        rq.run(instance_continue, identity, state, rq.continue_(state), key=f"c-{state.instance.id}")
    answer = olga.post(ADD, {"title": "late", "signature": signature})
    assert "no instance you may see is in it" in unescape(answer.content.decode()) and not Case.objects.exists()


def test_viewers_read_cases_and_cannot_work_them(tenancy, console_user, stranded):
    olga = _logged_in(console_user("olga", "operators"))
    signature = WorkflowInstance.objects.get(pk=stranded[0][0].instance.id).failure_signature_id
    olga.post(ADD, {"title": "Declines", "signature": signature})
    case = Case.objects.get()
    vic = _logged_in(console_user("vic", "viewers"))
    page = _page(vic, case)
    assert "Accounted for: 0 of 3" in page and not re.search(r'action="[^"]*/(note|abandon|close)/"', page)
    assert vic.get(ADD).status_code == 403
    assert vic.post(f"/admin/console/case/{case.pk}/close/").status_code == 403
    assert vic.get(f"/admin/console/case/{case.pk}/summary.json").status_code == 200
