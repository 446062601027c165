"""The metrics: the database's gauges at scrape time, the processes' counters, and their sum across processes."""

import datetime as dt
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models import Count
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from core import clock
from core.errors import Aborted
from engine.demo import demo_run
from engine.instances import instance_pause
from engine.runner import runner_pass
from engine.worker import task_claim
from history.background import background_process_beat, background_process_start
from history.credentials import identity_of_credential
from history.metrics import metrics_registry, metrics_text
from history.models import (
    ApprovalPolicy,
    BackgroundProcess,
    InboxRecord,
    InboxState,
    InstanceState,
    ProcessKind,
    Scope,
    WorkflowInstance,
)
from recovery.consequences import operation_consequences
from recovery.operations import OPERATIONS
from recovery.proposals import proposal_approve, proposal_reject
from testkit import requests as rq
from testkit.states import task_failed_state, task_unknown_state

pytestmark = pytest.mark.django_db


def _samples(text: bytes) -> dict:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
    }


def _value(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_database_gauges_count_reviews_by_cause_and_definition_and_the_oldest_age(tenancy):
    unknown, failed = task_unknown_state(tenancy), task_failed_state(tenancy)
    samples = _samples(metrics_text(metrics_registry()))
    for state, cause in ((unknown, "task_outcome_unknown"), (failed, "task_failed_budget_left")):
        labels = (("cause", cause), ("definition", state.definition.name), ("namespace", "acme"))
        assert samples[("weave_instances_in_review", labels)] == 1.0
    assert samples[("weave_oldest_review_age_seconds", (("namespace", "acme"),))] > 0
    assert samples[("weave_inbox_records", (("state", "PENDING"),))] == 0.0


def test_after_the_demo_scenarios_every_gauge_equals_its_count_in_the_tables(db):
    demo_run(namespace="demo")
    samples = _samples(metrics_text(metrics_registry()))
    in_review = WorkflowInstance.objects.filter(state=InstanceState.NEEDS_REVIEW)
    expected = {
        (("cause", cause), ("definition", name), ("namespace", "demo")): n
        for name, cause, n in in_review.values_list("definition__name", "review_cause").annotate(n=Count("*"))
    }
    assert len(expected) > 1
    assert {labels: v for (metric, labels), v in samples.items() if metric == "weave_instances_in_review"} == expected
    for state in (InboxState.PENDING, InboxState.QUARANTINED):
        counted = InboxRecord.objects.filter(state=state).count()
        assert samples[("weave_inbox_records", (("state", state.value),))] == counted


def test_the_reviews_past_their_sla_are_counted_per_definition(tenancy):
    state = task_unknown_state(tenancy)
    definition = state.definition
    definition.spec = {**definition.spec, "review_sla_seconds": 60}
    definition.save(update_fields=["spec"])
    labels = (("definition", definition.name), ("namespace", "acme"))
    WorkflowInstance.objects.filter(pk=state.instance.pk).update(review_since=clock.now() - dt.timedelta(seconds=30))
    assert _samples(metrics_text(metrics_registry()))[("weave_reviews_past_sla", labels)] == 0.0
    WorkflowInstance.objects.filter(pk=state.instance.pk).update(review_since=clock.now() - dt.timedelta(seconds=90))
    assert _samples(metrics_text(metrics_registry()))[("weave_reviews_past_sla", labels)] == 1.0


def test_the_counters_follow_runner_passes_claims_operations_and_answers(
    tenancy, issue_token, client, django_capture_on_commit_callbacks
):
    recoverer = identity_of_credential(issue_token(scopes=[Scope.RECOVER, Scope.TASKS_WORK]).credential)
    passes = _value("weave_runner_pass_seconds_count", pass_name="inbox")
    runner_pass()
    assert _value("weave_runner_pass_seconds_count", pass_name="inbox") == passes + 1

    empty = _value("weave_worker_claims_total", queue="payments", result="empty")
    assert task_claim(identity=recoverer, queue_name="payments", command={"worker": "w"}) is None
    assert _value("weave_worker_claims_total", queue="payments", result="empty") == empty + 1

    state = task_failed_state(tenancy)
    committed = _value("weave_recovery_operations_total", operation="retry-step", outcome="committed")
    command = rq.retry(state)
    operation_consequences(identity=recoverer, operation="retry-step", instance_id=state.instance.id, command=command)
    assert _value("weave_recovery_operations_total", operation="retry-step", outcome="committed") == committed
    with django_capture_on_commit_callbacks(execute=True):  # the test's transaction never commits
        OPERATIONS["retry-step"].service(
            identity=recoverer, instance_id=state.instance.id, idempotency_key="m1", command=command
        )
    assert _value("weave_recovery_operations_total", operation="retry-step", outcome="committed") == committed + 1
    stale = _value("weave_recovery_operations_total", operation="retry-step", outcome="ABORTED")
    with pytest.raises(Aborted):  # the same decision again: the revisions it names have moved
        OPERATIONS["retry-step"].service(
            identity=recoverer, instance_id=state.instance.id, idempotency_key="m2", command=command
        )
    assert _value("weave_recovery_operations_total", operation="retry-step", outcome="ABORTED") == stale + 1

    answered = _value("weave_http_requests_total", status="401")
    assert client.get("/v1/workflows").status_code == 401
    assert _value("weave_http_requests_total", status="401") == answered + 1


def test_a_proposal_counts_as_proposed_and_stays_pending_until_decided(
    tenancy, issue_token, django_capture_on_commit_callbacks
):
    ApprovalPolicy.objects.create(namespace=tenancy[0], operation="retry-step")
    state = task_failed_state(tenancy)
    proposer = identity_of_credential(issue_token(scopes=[Scope.RECOVER]).credential)
    approver = identity_of_credential(issue_token(scopes=[Scope.RECOVER], actor_id="b" * 32).credential)
    proposed = _value("weave_recovery_operations_total", operation="retry-step", outcome="proposed")
    with django_capture_on_commit_callbacks(execute=True):
        receipt = OPERATIONS["retry-step"].service(
            identity=proposer, instance_id=state.instance.id, idempotency_key="p1", command=rq.retry(state)
        )
    assert _value("weave_recovery_operations_total", operation="retry-step", outcome="proposed") == proposed + 1
    pending = ("weave_proposals_pending", (("namespace", "acme"),))
    assert _samples(metrics_text(metrics_registry()))[pending] == 1.0
    proposal_reject(
        identity=approver,
        instance_id=state.instance.id,
        proposal_id=receipt.data["proposal_id"],
        idempotency_key="r1",
        command={"reason": "not now"},
    )
    assert pending not in _samples(metrics_text(metrics_registry()))


def test_an_approved_proposal_counts_as_committed_and_a_stale_approval_as_aborted(
    tenancy, issue_token, django_capture_on_commit_callbacks
):
    """The approval door counts the operation exactly as its own service does."""
    ApprovalPolicy.objects.create(namespace=tenancy[0], operation="retry-step")
    proposer = identity_of_credential(issue_token(scopes=[Scope.RECOVER]).credential)
    approver = identity_of_credential(issue_token(scopes=[Scope.RECOVER], actor_id="b" * 32).credential)
    control = identity_of_credential(issue_token(scopes=[Scope.CONTROL], actor_id="c" * 32).credential)
    fresh, moved = task_failed_state(tenancy), task_failed_state(tenancy)

    def propose(state, key: str) -> str:
        return (
            OPERATIONS["retry-step"]
            .service(identity=proposer, instance_id=state.instance.id, idempotency_key=key, command=rq.retry(state))
            .data["proposal_id"]
        )

    def approve(state, proposal_id: str, key: str):
        return proposal_approve(
            identity=approver, instance_id=state.instance.id, proposal_id=proposal_id, idempotency_key=key, command={}
        )

    committed = _value("weave_recovery_operations_total", operation="retry-step", outcome="committed")
    with django_capture_on_commit_callbacks(execute=True):
        approve(fresh, propose(fresh, "p1"), "a1")
    assert _value("weave_recovery_operations_total", operation="retry-step", outcome="committed") == committed + 1

    stale_proposal = propose(moved, "p2")
    moved.instance.refresh_from_db()
    instance_pause(
        identity=control,
        instance_id=moved.instance.id,
        command={"expected_control_revision": str(moved.instance.control_revision), "reason": "maintenance"},
    )
    aborted = _value("weave_recovery_operations_total", operation="retry-step", outcome="ABORTED")
    with pytest.raises(Aborted):
        approve(moved, stale_proposal, "a2")
    assert _value("weave_recovery_operations_total", operation="retry-step", outcome="ABORTED") == aborted + 1
    assert _value("weave_recovery_operations_total", operation="retry-step", outcome="committed") == committed + 1


def test_the_exporter_adds_up_the_processes_sharing_a_directory(tmp_path, monkeypatch, db):
    script = "from core.metrics import WORKER_CLAIMS; WORKER_CLAIMS.labels('payments', 'tasks').inc(3)"
    for _ in range(2):
        subprocess.run([sys.executable, "-c", script], env={"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}, check=True)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    samples = _samples(metrics_text(metrics_registry()))
    assert samples[("weave_worker_claims_total", (("queue", "payments"), ("result", "tasks")))] == 6.0


def test_a_bad_bind_is_refused_naming_it():
    with pytest.raises(CommandError, match="--bind: 'nine' is not HOST:PORT"):
        call_command("weave_metrics", "--bind", "nine")


def test_the_request_duration_histogram_is_labelled_by_route_pattern_method_and_status(client):
    known = {"route": "v1/workflows/<str:id>", "method": "GET", "status": "401"}
    unmatched = {"route": "unmatched", "method": "GET", "status": "404"}
    before = [_value("weave_http_request_duration_seconds_count", **labels) for labels in (known, unmatched)]
    assert client.get(f"/v1/workflows/{'0' * 32}").status_code == 401
    assert client.get(f"/nowhere/{'1' * 32}").status_code == 404
    after = [_value("weave_http_request_duration_seconds_count", **labels) for labels in (known, unmatched)]
    assert after == [before[0] + 1, before[1] + 1]
    # Never the raw path: an id in the URL makes no series of its own.
    paths = {
        sample.labels["route"]
        for family in REGISTRY.collect()
        if family.name == "weave_http_request_duration_seconds"
        for sample in family.samples
    }
    assert not any("0" * 32 in route or "1" * 32 in route for route in paths)


def test_a_method_outside_the_known_ones_is_labelled_other(client):
    labels = {"route": "v1/workflows", "method": "other", "status": "401"}
    before = _value("weave_http_request_duration_seconds_count", **labels)
    client.generic("BREW", "/v1/workflows")
    assert _value("weave_http_request_duration_seconds_count", **labels) == before + 1


def test_the_exporter_adds_up_the_request_durations_of_the_server_processes(tmp_path, monkeypatch, db):
    script = (
        "from core.metrics import HTTP_REQUEST_SECONDS\n"
        "HTTP_REQUEST_SECONDS.labels('v1/workflows', 'GET', '200').observe(0.02)\n"
    )
    for _ in range(2):
        subprocess.run([sys.executable, "-c", script], env={"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}, check=True)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    samples = _samples(metrics_text(metrics_registry()))
    labels = (("method", "GET"), ("route", "v1/workflows"), ("status", "200"))
    assert samples[("weave_http_request_duration_seconds_count", labels)] == 2.0
    assert samples[("weave_http_request_duration_seconds_bucket", (("le", "0.025"), *labels))] == 2.0


def test_the_heartbeat_age_is_a_gauge_per_process_not_stopped(db):
    runner = BackgroundProcess(kind=ProcessKind.RUNNER, host="node-1", pid=11)
    worker = BackgroundProcess(kind=ProcessKind.WORKER, host="node-2", pid=12, queue="payments")
    stopped = BackgroundProcess(kind=ProcessKind.RUNNER, host="node-1", pid=13)
    for process in (runner, worker, stopped):
        background_process_start(process=process)
    stopped.stopped_at = clock.now()
    background_process_beat(process=stopped)
    with clock.moved(dt.timedelta(seconds=90)):
        runner.beat_at = clock.now() - dt.timedelta(seconds=5)
        background_process_beat(process=runner)
        samples = _samples(metrics_text(metrics_registry()))
    ages = {labels: age for (name, labels), age in samples.items() if name == "weave_background_heartbeat_age_seconds"}
    runner_labels = (("host", "node-1"), ("kind", "runner"), ("pid", "11"), ("queue", ""))
    worker_labels = (("host", "node-2"), ("kind", "worker"), ("pid", "12"), ("queue", "payments"))
    assert set(ages) == {runner_labels, worker_labels}
    assert 5 <= ages[runner_labels] < 90 <= ages[worker_labels]


def test_the_human_repair_rate_counts_steps_started_and_the_repairs_made_on_them(
    tenancy, issue_token, django_capture_on_commit_callbacks
):
    """Runs and repairs per definition version and step; a preview, a proposal and a replay repair nothing."""
    recoverer = identity_of_credential(issue_token(scopes=[Scope.RECOVER]).credential)
    # Instances of one shape share a definition name across tests: each count is read as a difference.
    before = _samples(metrics_text(REGISTRY))
    with django_capture_on_commit_callbacks(execute=True):
        state = task_failed_state(tenancy)
    definition, (step_key,) = state.definition, [key for key in state.steps if key != "$root"]
    labels = {"definition": definition.name, "version": str(definition.version), "step": step_key}
    repairs = {**labels, "operation": "retry-step"}

    def counted(name: str, **labels) -> float:
        return _value(name, **labels) - before.get((name, tuple(sorted(labels.items()))), 0.0)

    assert counted("weave_step_runs_total", **labels) == 1
    command = rq.retry(state)
    operation_consequences(identity=recoverer, operation="retry-step", instance_id=state.instance.id, command=command)
    assert counted("weave_step_repairs_total", **repairs) == 0
    for _ in range(2):  # the second is a replay of the first
        with django_capture_on_commit_callbacks(execute=True):
            OPERATIONS["retry-step"].service(
                identity=recoverer, instance_id=state.instance.id, idempotency_key="fix", command=command
            )
    assert counted("weave_step_repairs_total", **repairs) == 1
    assert counted("weave_step_runs_total", **labels) == 1  # a retry is a repair, not a run the engine started
