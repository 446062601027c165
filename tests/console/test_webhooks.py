"""The namespace's webhooks in the console: managed by the approvers group, the secret shown once, the test
button reporting the receiver's answer, the delivery log scoped to the namespace."""

import re
from html import unescape

import pytest
from django.test import Client

from history.models import DeliveryState, Webhook, WebhookDelivery
from history.tenancy import namespace_ensure
from tests.receiver import Receiver

pytestmark = pytest.mark.django_db
ADD = "/admin/history/webhook/add/"
LOG = "/admin/history/webhookdelivery/"


def _logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _added(client, url, **fields) -> Webhook:
    post = {"name": "pager", "url": url, "events": ["signature.new", "instance.stalled"], "enabled": "on"} | fields
    answer = client.post(ADD, post, follow=True)
    assert answer.status_code == 200, answer.content
    return Webhook.objects.get(name=post["name"])


def test_operators_see_the_webhooks_and_only_the_approvers_manage_them(tenancy, console_user):
    olga = _logged_in(console_user("olga", "operators"))
    assert olga.get(ADD).status_code == 403
    assert olga.get("/admin/history/webhook/").status_code == 200


def test_a_new_webhook_gets_a_secret_shown_once_and_never_again(tenancy, console_user):
    anna = _logged_in(console_user("anna", "approvers"))
    answer = anna.post(
        ADD, {"name": "pager", "url": "https://hooks.example/x", "events": ["signature.new"]}, follow=True
    )
    webhook = Webhook.objects.get()
    assert (webhook.namespace_id, webhook.events, webhook.created_by) == (tenancy[0].id, ["signature.new"], "anna")
    assert f"shown this once: {webhook.secret}" in unescape(answer.content.decode()) and len(webhook.secret) >= 32
    page = anna.get(f"/admin/history/webhook/{webhook.pk}/change/").content.decode()
    assert webhook.secret not in page
    # A blank secret on a change keeps it; a chosen one replaces it.
    kept = webhook.secret
    anna.post(f"/admin/history/webhook/{webhook.pk}/change/", {"name": "pager", "url": webhook.url, "events": ["ping"]})
    anna.post(
        f"/admin/history/webhook/{webhook.pk}/change/",
        {"name": "pager", "url": webhook.url, "events": ["instance.stalled"], "enabled": "on"},
    )
    webhook.refresh_from_db()
    assert (webhook.secret, webhook.events) == (kept, ["instance.stalled"])
    anna.post(
        f"/admin/history/webhook/{webhook.pk}/change/",
        {"name": "pager", "url": webhook.url, "events": ["instance.stalled"], "secret": "another-long-secret"},
    )
    webhook.refresh_from_db()
    assert (webhook.secret, webhook.enabled) == ("another-long-secret", False)


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"url": "ftp://hooks.example/x"}, "Enter a valid URL."),
        ({"url": ""}, "This field is required."),
        ({"events": []}, "This field is required."),
        ({"events": ["everything"]}, "Select a valid choice. everything is not one of the available choices."),
        ({"secret": "short"}, "at least 16 characters, or blank for one made for you"),
    ],
)
def test_a_bad_field_is_refused_by_name_and_nothing_is_saved(tenancy, console_user, fields, error):
    anna = _logged_in(console_user("anna", "approvers"))
    post = {"name": "pager", "url": "https://hooks.example/x", "events": ["signature.new"]} | fields
    answer = anna.post(ADD, post)
    assert answer.status_code == 200 and error in unescape(answer.content.decode())
    assert not Webhook.objects.exists()


def test_a_second_webhook_of_the_same_name_is_refused(tenancy, console_user):
    anna = _logged_in(console_user("anna", "approvers"))
    _added(anna, "https://hooks.example/x")
    again = anna.post(ADD, {"name": "pager", "url": "https://hooks.example/y", "events": ["signature.new"]})
    assert "already exists" in unescape(again.content.decode()) and Webhook.objects.count() == 1


def test_the_test_button_sends_a_ping_and_reports_the_answer_on_the_delivery_log(tenancy, console_user):
    anna = _logged_in(console_user("anna", "approvers"))
    with Receiver(200) as receiver:
        webhook = _added(anna, receiver.url)
        ping = f"/admin/history/webhook/{webhook.pk}/ping/"
        assert ping in anna.get(f"/admin/history/webhook/{webhook.pk}/change/").content.decode()
        assert anna.get(ping).status_code == 405
        answer = anna.post(ping, follow=True)
    page = unescape(answer.content.decode())
    assert f"Test event delivered to {receiver.url}: HTTP 200." in page
    assert answer.redirect_chain[-1][0] == f"{LOG}?webhook__id__exact={webhook.pk}"
    delivery = WebhookDelivery.objects.get()
    assert (delivery.event, delivery.state) == ("ping", DeliveryState.DELIVERED) and delivery.id in page
    assert receiver.received[0].headers["X-Weave-Event"] == "ping"


def test_a_ping_to_a_dead_receiver_says_why_and_stays_due_for_a_retry(tenancy, console_user):
    anna = _logged_in(console_user("anna", "approvers"))
    with Receiver() as receiver:
        dead = receiver.url
    webhook = _added(anna, dead)
    answer = anna.post(f"/admin/history/webhook/{webhook.pk}/ping/", follow=True)
    assert re.search(r"Test event not delivered to \S+: ConnectError", unescape(answer.content.decode()))
    delivery = WebhookDelivery.objects.get()
    assert (delivery.state, delivery.attempts) == (DeliveryState.PENDING, 1)


def test_the_delivery_log_and_the_test_button_stay_in_the_namespace(tenancy, console_user):
    other, _, _ = namespace_ensure(name="elsewhere", application="billing", queues=["payments"])
    theirs = Webhook.objects.create(namespace=other, name="theirs", url="https://x.example", events=[], secret="x" * 20)
    delivery = WebhookDelivery.objects.create(webhook=theirs, event="ping", event_key="k", body="{}")
    anna = _logged_in(console_user("anna", "approvers"))
    assert "theirs" not in anna.get("/admin/history/webhook/").content.decode()
    log = anna.get(LOG).content.decode()
    assert delivery.id not in log and "theirs" not in log  # nor among the filter's webhooks
    assert anna.post(f"/admin/history/webhook/{theirs.pk}/ping/").status_code == 404
