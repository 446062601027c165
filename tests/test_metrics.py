"""The metrics: the database's gauges at scrape time, the processes' counters, and their sum across processes."""

import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from core.errors import Aborted
from engine.runner import runner_pass
from engine.worker import task_claim
from history.credentials import identity_of_credential
from history.metrics import metrics_registry, metrics_text
from history.models import Scope
from recovery.consequences import operation_consequences
from recovery.operations import OPERATIONS
from tests.recovery import requests as rq
from tests.states import task_failed_state, task_unknown_state

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
