"""Whether a repair worked: every Continue that lets an instance run on opens a watch on the repaired step, judged
by the runner — effective, ineffective (back in review for the same cause, or no progress within the window) or
regressed (the step failed again another way) — without changing the engine's rows; a campaign's canary widens
itself on effective repairs and halts on one that did not work."""

import datetime as dt

import pytest

from core import clock
from engine.runner import runner_settle
from history.metrics import metrics_text
from history.models import CampaignState, RepairCheck, RepairVerdict, ReviewCause, WorkflowInstance
from recovery.campaigns import campaign_make, campaign_move
from recovery.decisions import decision_make
from recovery.repairs import pass_repair_checks
from testkit import states
from tests.recovery.digest import history_digest
from tests.recovery.test_campaigns import _command, _operator

pytestmark = pytest.mark.django_db
WINDOW = 600


def _decide(tenancy, instance, kind: str, **outcome):
    instance = WorkflowInstance.objects.get(pk=instance.pk)
    command = {
        "kind": kind,
        "step_key": "charge",
        "expected_revision": str(instance.revision),
        "reason": "checked with the provider",
        "evidence_ref": "ticket:OPS-9",
        "declared": True,
        **outcome,
    }
    decision_make(
        identity=_operator(tenancy), instance_id=instance.id, idempotency_key=f"d-{instance.id}", command=command
    )
    runner_settle()


def _windowed(state) -> None:
    """Its definition gives a repair WINDOW seconds to move its step."""
    definition = state.definition
    definition.spec = {**definition.spec, "repair_window_seconds": WINDOW}
    definition.save(update_fields=["spec"])


def test_a_repair_that_lets_the_step_succeed_is_effective(tenancy):
    state = states.task_unknown_state(tenancy)
    _decide(tenancy, state.instance, "conclude", conclusion="SUCCEEDED", result={"paid": True})
    check = RepairCheck.objects.get(instance_id=state.instance.id)
    assert (check.step_key, check.cause) == ("charge", ReviewCause.TASK_OUTCOME_UNKNOWN)
    assert (check.verdict, check.detail) == (RepairVerdict.EFFECTIVE, "step charge succeeded")
    # A TASK's window, where the definition gives none: its deadline.
    assert check.due_at - check.made_at == dt.timedelta(
        seconds=state.definition.step_spec("charge")["deadline_seconds"]
    )


@pytest.mark.parametrize(
    ("attempts", "verdict", "words"),
    [
        ((1, 1), RepairVerdict.INEFFECTIVE, "is back in review for the same cause (task_failed_budget_left)"),
        ((1, 2), RepairVerdict.REGRESSED, "failed again, another way (task_budget_exhausted)"),
    ],
)
def test_the_retried_step_back_in_review_is_ineffective_for_the_same_cause_and_regressed_for_another(
    tenancy, attempts, verdict, words
):
    # Failed with budget left, RetryStep and Continue, and the second task failed too.
    instance = states.task_retried_state(tenancy, attempts_used=attempts).instance
    before = history_digest(excluding=(RepairCheck,))
    assert pass_repair_checks() == 1
    check = RepairCheck.objects.get(instance_id=instance.id)
    assert check.verdict == verdict and words in check.detail
    labels = f'definition="{check.definition.name}",namespace="acme",step="charge",verdict="{verdict}"'
    gauge = f"weave_repairs{{{labels}}} 1.0"
    assert gauge in metrics_text().decode()
    assert history_digest(excluding=(RepairCheck,)) == before  # a verdict changes none of the engine's rows


def test_a_step_that_does_not_move_within_the_window_is_ineffective(tenancy):
    state = states.task_failed_state(tenancy, attempts_used=1)  # budget left: safe to run again
    _windowed(state)
    _decide(tenancy, state.instance, "retry")
    check = RepairCheck.objects.get(instance_id=state.instance.id)
    assert check.verdict == RepairVerdict.WATCHING and check.due_at - check.made_at == dt.timedelta(seconds=WINDOW)
    assert pass_repair_checks() == 0  # its task waits for a worker, within the window
    clock.advance(dt.timedelta(seconds=WINDOW + 1))
    assert pass_repair_checks() == 1
    check.refresh_from_db()
    assert check.verdict == RepairVerdict.INEFFECTIVE and check.detail.startswith("no progress: step charge is still")


def _campaign(tenancy, instances, **command):
    campaign = campaign_make(
        identity=_operator(tenancy),
        instances=WorkflowInstance.objects.filter(pk__in=[i.pk for i in instances]),
        source="a test's selection",
        command=command,
        owner="olga",
    )
    campaign_move(identity=_operator(tenancy), campaign_id=campaign.id, action="started", by="olga")
    return campaign


def test_a_canary_whose_repairs_worked_widens_itself_and_one_that_did_not_halts(tenancy):
    widening = _campaign(
        tenancy, [states.task_unknown_state(tenancy).instance for _ in range(2)], **_command(canary_size=1)
    )
    stuck = [states.task_failed_state(tenancy, attempts_used=1) for _ in range(2)]
    for state in stuck:
        _windowed(state)
    retry = {key: value for key, value in _command(canary_size=1).items() if key not in ("conclusion", "result")}
    halting = _campaign(tenancy, [state.instance for state in stuck], **retry | {"kind": "retry"})
    runner_settle()
    widening.refresh_from_db()
    assert widening.state == CampaignState.DONE
    assert [entry["action"] for entry in widening.log] == ["made", "started", "canary_done", "widened", "done"]
    assert (widening.log[3]["by"], widening.log[3]["note"]) == ("the campaign", "every repair of the canary's 1 worked")
    halting.refresh_from_db()
    assert halting.state == CampaignState.CANARY_DONE  # its canary's task waits for a worker: not judged yet
    clock.advance(dt.timedelta(seconds=WINDOW + 1))
    runner_settle()
    halting.refresh_from_db()
    assert halting.state == CampaignState.HALTED
    assert halting.halted_reason == "the canary's repairs did not all work: 1 ineffective, 0 regressed"
