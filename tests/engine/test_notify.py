"""Outgoing webhooks: each event produced by a real engine or console path, queued once per subscribed webhook of
its namespace, sent signed to a local receiver, retried with a growing delay, logged; the notifier's process."""

import datetime as dt
import hashlib
import hmac
import json
import re
import threading
from collections import Counter
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from core import clock
from engine import notify
from engine.instances import instance_pause
from engine.notify import LAG, notify_queue, notify_send, webhook_ping
from engine.watchdog import pass_watchdog
from history.models import (
    ApprovalPolicy,
    BackgroundProcess,
    DeliveryState,
    NotifyWatermark,
    ProcessKind,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
    WorkflowInstance,
)
from history.tenancy import namespace_ensure
from recovery.operations import step_retry
from testkit import requests as rq
from testkit import states
from tests.receiver import Receiver

pytestmark = pytest.mark.django_db
SECRET = "s3cret-s3cret-s3cret"
EVERY = [e.value for e in WebhookEvent if e != WebhookEvent.PING]


@pytest.fixture
def watching():
    """The notifier has read every source up to a day ago: what happens from then on is new."""
    for event in EVERY:
        NotifyWatermark.objects.create(event=event, position=clock.now() - dt.timedelta(days=1))


def _webhook(namespace, url, events=EVERY, name="pager", **fields) -> Webhook:
    return Webhook.objects.create(namespace=namespace, name=name, url=url, events=events, secret=SECRET, **fields)


def _queued_after_the_lag() -> int:
    clock.advance(LAG + dt.timedelta(seconds=1))
    return notify_queue()


def _verified(received) -> dict:
    """The body of a request whose signature checks out with the webhook's secret, as a receiver checks it."""
    parts = dict(part.split("=", 1) for part in received.headers["X-Weave-Signature"].split(","))
    signed = f"{parts['t']}.{received.body}".encode()
    assert hmac.compare_digest(parts["v1"], hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest())
    return json.loads(received.body)


def test_a_new_signature_is_sent_signed_to_each_subscribed_webhook_of_its_namespace(tenancy, watching):
    namespace = tenancy[0]
    with Receiver() as receiver:
        _webhook(namespace, receiver.url)
        _webhook(namespace, receiver.url, events=[WebhookEvent.INSTANCE_STALLED], name="stalls only")
        other, _, _ = namespace_ensure(name="elsewhere", application="billing", queues=["payments"])
        _webhook(other, receiver.url, name="other namespace")
        state = states.task_unknown_state(tenancy)
        assert _queued_after_the_lag() == 1
        assert _queued_after_the_lag() == 0  # read once: a re-read queues nothing
        assert notify_send() == 1
    (request,) = receiver.received
    body = _verified(request)
    delivery = WebhookDelivery.objects.get()
    assert request.headers["X-Weave-Event"] == "signature.new" and request.headers["X-Weave-Delivery"] == delivery.id
    assert (body["id"], body["event"], body["namespace"]) == (delivery.id, "signature.new", "acme")
    signature = body["data"]["signature"]
    state.instance.refresh_from_db()
    assert signature["id"] == state.instance.failure_signature_id
    assert (signature["review_cause"], signature["step_key"]) == (
        "task_outcome_unknown",
        state.instance.review_step_key,
    )
    assert signature["definition"] == {"id": state.definition.id, "name": state.definition.name, "version": 1}
    assert (delivery.state, delivery.attempts, delivery.last_status) == (DeliveryState.DELIVERED, 1, 200)


def test_a_tampered_body_fails_the_receivers_check(tenancy, watching):
    with Receiver() as receiver:
        _webhook(tenancy[0], receiver.url)
        states.task_unknown_state(tenancy)
        _queued_after_the_lag()
        notify_send()
    (request,) = receiver.received
    tampered = type(request)(request.path, request.headers, request.body.replace("acme", "evil"))
    with pytest.raises(AssertionError):
        _verified(tampered)


@override_settings(WEAVE_WEBHOOK_RETRY_SECONDS=10, WEAVE_WEBHOOK_ATTEMPTS=5)
def test_a_refused_delivery_is_retried_with_a_doubling_delay_and_the_log_keeps_each_answer(tenancy, watching):
    with Receiver(500, 503, 200) as receiver:
        _webhook(tenancy[0], receiver.url)
        states.task_unknown_state(tenancy)
        _queued_after_the_lag()
        assert notify_send() == 1
        delivery = WebhookDelivery.objects.get()
        assert (delivery.state, delivery.attempts, delivery.last_status) == (DeliveryState.PENDING, 1, 500)
        assert delivery.last_error == "HTTP 500: busy, try later"
        assert notify_send() == 0  # not due yet
        clock.advance(dt.timedelta(seconds=11))
        assert notify_send() == 1
        delivery.refresh_from_db()
        assert (delivery.attempts, delivery.last_status) == (2, 503)
        clock.advance(dt.timedelta(seconds=11))
        assert notify_send() == 0  # the second delay is twice the first
        clock.advance(dt.timedelta(seconds=10))
        assert notify_send() == 1
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.last_status, delivery.last_error) == ("DELIVERED", 3, 200, "")
    # Every attempt carried the same delivery and body: the receiver deduplicates on the id.
    assert len({(r.headers["X-Weave-Delivery"], r.body) for r in receiver.received}) == 1


@override_settings(WEAVE_WEBHOOK_RETRY_SECONDS=1, WEAVE_WEBHOOK_ATTEMPTS=2)
def test_a_receiver_that_never_answers_leaves_the_delivery_failed_with_the_error(tenancy, watching):
    with Receiver() as receiver:
        dead = receiver.url  # the port closes with the receiver: connections are refused
    _webhook(tenancy[0], dead)
    states.task_unknown_state(tenancy)
    _queued_after_the_lag()
    notify_send()
    with clock.moved(dt.timedelta(seconds=2)):
        notify_send()
    delivery = WebhookDelivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.last_status) == (DeliveryState.FAILED, 2, None)
    assert delivery.last_error.startswith("ConnectError")
    with clock.moved(dt.timedelta(hours=2)):
        assert notify_send() == 0  # failed for good


def test_a_notifier_killed_during_a_send_leaves_the_delivery_due_again_after_its_claim(tenancy, watching, monkeypatch):
    with Receiver() as receiver:
        _webhook(tenancy[0], receiver.url)
        states.task_unknown_state(tenancy)
        _queued_after_the_lag()

        def killed(*args):
            raise KeyboardInterrupt

        monkeypatch.setattr(notify, "deliver", killed)
        with pytest.raises(KeyboardInterrupt):
            notify_send()
        monkeypatch.undo()
        assert notify_send() == 0  # claimed: another notifier leaves it alone
        with clock.moved(notify.CLAIM + dt.timedelta(seconds=1)):
            assert notify_send() == 1
    assert len(receiver.received) == 1 and WebhookDelivery.objects.get().state == DeliveryState.DELIVERED


def test_a_disabled_webhook_is_neither_queued_for_nor_sent_to(tenancy, watching):
    with Receiver() as receiver:
        webhook = _webhook(tenancy[0], receiver.url)
        states.task_unknown_state(tenancy)
        _queued_after_the_lag()
        Webhook.objects.filter(pk=webhook.pk).update(enabled=False)
        assert notify_send() == 0
        states.task_failed_state(tenancy)
        assert _queued_after_the_lag() == 0
    assert receiver.received == []


@override_settings(WEAVE_STALL_PAUSED_SECONDS=3600)
def test_a_stall_marked_by_the_watchdog_is_sent_with_its_reason(tenancy, watching):
    with Receiver() as receiver:
        _webhook(tenancy[0], receiver.url, events=[WebhookEvent.INSTANCE_STALLED])
        state = states.task_failed_state(tenancy)
        with clock.moved(-2 * dt.timedelta(hours=1)):
            paused = states.started(states._engine(tenancy))[0]
            command = {"expected_control_revision": str(paused.control_revision), "reason": "maintenance window"}
            instance_pause(identity=states._engine(tenancy).identity, instance_id=paused.id, command=command)
        assert pass_watchdog() == 1
        assert _queued_after_the_lag() == 1  # the review of `state` is not this webhook's event
        notify_send()
    body = _verified(receiver.received[0])
    assert body["event"] == "instance.stalled" and body["data"]["reason"] == "paused_too_long"
    assert body["data"]["workflow"]["id"] == paused.id != state.instance.id


def test_an_instance_past_its_review_sla_is_sent_once_per_review(tenancy, watching):
    with Receiver() as receiver:
        _webhook(tenancy[0], receiver.url, events=[WebhookEvent.REVIEW_SLA_BREACHED])
        state = states.task_unknown_state(tenancy, steps=None)
        definition = state.definition
        definition.spec = {**definition.spec, "review_sla_seconds": 3600}
        definition.save(update_fields=["spec"])
        assert _queued_after_the_lag() == 0  # within its SLA
        with clock.moved(dt.timedelta(hours=1)):
            assert _queued_after_the_lag() == 1
            assert _queued_after_the_lag() == 0
            notify_send()
    data = _verified(receiver.received[0])["data"]
    state.instance.refresh_from_db()
    assert (data["workflow"]["id"], data["sla_seconds"], data["review_cause"]) == (
        state.instance.id,
        3600,
        "task_outcome_unknown",
    )
    assert data["review_since"] == notify.format_time(state.instance.review_since)


def test_a_proposal_awaiting_approval_is_sent_with_what_it_would_do(tenancy, watching, recoverer):
    ApprovalPolicy.objects.create(namespace=tenancy[0], operation="retry-step", approvals_required=1)
    with Receiver() as receiver:
        _webhook(tenancy[0], receiver.url, events=[WebhookEvent.APPROVAL_REQUESTED])
        state = states.task_failed_state(tenancy)
        receipt = rq.run(step_retry, recoverer, state, rq.retry(state), key="propose")
        assert _queued_after_the_lag() == 1
        notify_send()
    data = _verified(receiver.received[0])["data"]
    assert (data["kind"], data["id"], data["what"]) == ("operation", receipt.data["proposal_id"], "retry-step")
    assert data["workflow"]["id"] == state.instance.id and data["proposed_by"] == recoverer.actor_id


def test_a_new_notifier_starts_from_now_without_replaying_history(tenancy):
    with Receiver() as receiver:
        _webhook(tenancy[0], receiver.url)
        states.task_unknown_state(tenancy)
        assert notify_queue() == 0 and NotifyWatermark.objects.count() == len(EVERY)
        assert _queued_after_the_lag() == 0


def test_a_ping_is_sent_at_once_and_logged(tenancy):
    with Receiver(200) as receiver:
        delivery = webhook_ping(_webhook(tenancy[0], receiver.url))
    assert (delivery.event, delivery.state, delivery.last_status) == ("ping", DeliveryState.DELIVERED, 200)
    assert _verified(receiver.received[0])["data"] == {"webhook": "pager"}


def test_the_notifier_runs_once_as_a_background_process(tenancy, watching, capsys):
    with Receiver() as receiver:
        _webhook(tenancy[0], receiver.url)
        states.task_unknown_state(tenancy)
        with clock.moved(LAG + dt.timedelta(seconds=1)):
            call_command("weave_notify", "--once")
    assert "queued=1 sent=1" in capsys.readouterr().out and len(receiver.received) == 1
    process = BackgroundProcess.objects.get()
    assert (process.kind, process.passes, process.items) == (ProcessKind.NOTIFIER, 1, 2)


def test_the_api_references_check_accepts_a_real_delivery_and_refuses_a_changed_one(tenancy):
    """The receiver's snippet of docs/api.md ("Webhooks"), run as written against what the notifier sent."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    snippet = re.search(r"## Webhooks\n.*?```python\n(.*?)```", page, re.S).group(1)
    scope: dict = {}
    exec(snippet, scope)  # noqa: S102 (the project's own documentation)
    with Receiver() as receiver:
        webhook_ping(_webhook(tenancy[0], receiver.url))
    request = receiver.received[0]
    header, body = request.headers["X-Weave-Signature"], request.body.encode()
    assert scope["verified"](SECRET, header, body)
    assert not scope["verified"](SECRET, header, body.replace(b"pager", b"pages"))
    assert not scope["verified"]("another-secret-entirely", header, body)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "mysql", reason="SQLite serialises writers at BEGIN: no claims to race")
def test_two_notifiers_racing_over_the_same_deliveries_send_each_once(tenancy):
    with Receiver() as receiver:
        webhook = _webhook(tenancy[0], receiver.url)
        for number in range(30):
            WebhookDelivery.objects.create(webhook=webhook, event="ping", event_key=str(number), body=f"[{number}]")
        barrier = threading.Barrier(2)
        attempted = []

        def notifier() -> None:
            try:
                barrier.wait()
                attempted.append(notify_send())
            finally:
                connection.close()

        threads = [threading.Thread(target=notifier) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    sent = Counter(request.headers["X-Weave-Delivery"] for request in receiver.received)
    assert sum(attempted) == 30 and len(sent) == 30 and set(sent.values()) == {1}
    assert set(WebhookDelivery.objects.values_list("state", flat=True)) == {DeliveryState.DELIVERED}


def test_a_campaign_that_halts_itself_is_sent_each_time_it_halts(tenancy, engine, watching):
    from engine.runner import runner_settle
    from recovery.campaigns import campaign_make, campaign_move
    from testkit.driver import task_step
    from tests.recovery.test_campaigns import _command, _operator, _unknown

    refused = [engine.start(engine.define([task_step("charge")])) for _ in range(6)]  # not in review
    instances = [*refused, *_unknown(tenancy, 1)]
    runner_settle()
    operator = _operator(tenancy)
    campaign = campaign_make(
        identity=operator,
        instances=WorkflowInstance.objects.filter(pk__in=[i.pk for i in instances]),
        source="a test's selection",
        command=_command(canary_size=7, halt_percent=10),
        owner="olga",
    )
    with Receiver() as receiver:
        _webhook(tenancy[0], receiver.url, events=[WebhookEvent.CAMPAIGN_HALTED])
        campaign_move(identity=operator, campaign_id=campaign.id, action="started", by="olga")
        runner_settle()
        assert _queued_after_the_lag() == 1
        campaign_move(identity=operator, campaign_id=campaign.id, action="resumed", by="olga")
        runner_settle()  # one more item, and it is still past its threshold: it halts again
        assert _queued_after_the_lag() == 1
        notify_send()
    bodies = [_verified(received) for received in receiver.received]
    assert [body["event"] for body in bodies] == ["campaign.halted"] * 2
    assert {body["data"]["campaign"]["id"] for body in bodies} == {campaign.id}
    assert re.match(r"[45] of 5 items run were refused or failed, more than 10 %", bodies[0]["data"]["halted_reason"])
    assert bodies[0]["data"]["halted_at"] < bodies[1]["data"]["halted_at"]


def test_a_repair_that_did_not_work_is_sent_with_the_reviews_assignee(tenancy, watching):
    from history.models import ReviewAttention
    from recovery.repairs import pass_repair_checks

    with Receiver() as receiver:
        _webhook(tenancy[0], receiver.url, events=[WebhookEvent.REPAIR_INEFFECTIVE])
        # Retried and continued, and its second task failed the same way: back in review for the same cause.
        instance = states.task_retried_state(tenancy, attempts_used=(1, 1)).instance
        ReviewAttention.objects.create(instance_id=instance.id, review_since=clock.now(), assignee="e" * 32)
        assert pass_repair_checks() == 1
        assert _queued_after_the_lag() == 1
        notify_send()
    body = _verified(receiver.received[0])
    assert body["event"] == "repair.ineffective" and body["data"]["workflow"]["id"] == instance.id
    assert (body["data"]["verdict"], body["data"]["step_key"], body["data"]["assignee"]) == (
        "INEFFECTIVE",
        "charge",
        "e" * 32,
    )
    assert body["data"]["review_cause"] == "task_failed_budget_left" and "same cause" in body["data"]["detail"]
