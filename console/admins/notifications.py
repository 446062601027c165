"""Outgoing webhooks of the operator's namespace, their test button, and the delivery log (``engine.notify``)."""

import secrets

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.validators import URLValidator
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse

from console.admins.base import HttpsURLField, NamespaceSettingAdmin, NamespaceSettingForm, ReadOnlyAdmin
from engine.notify import webhook_ping
from history import models
from history.models import WebhookEvent

SUBSCRIBABLE = [(event.value, f"{event.value}: {event.label}") for event in WebhookEvent if event != WebhookEvent.PING]


class WebhookForm(NamespaceSettingForm):
    """A webhook of the operator's namespace: where, which events, and the signing secret (write-only)."""

    url = forms.URLField(
        max_length=1024,
        assume_scheme="https",
        label="URL",
        help_text="where the events are POSTed as JSON (http or https)",
    )
    events = forms.MultipleChoiceField(choices=SUBSCRIBABLE, widget=forms.CheckboxSelectMultiple)
    secret = forms.CharField(
        required=False,
        max_length=128,
        widget=forms.PasswordInput,
        help_text="the key of the X-Weave-Signature HMAC; blank keeps the current one, or on a new webhook makes one "
        "(shown once, after saving)",
    )

    class Meta:
        model = models.Webhook
        fields = ("name", "url", "events", "enabled")
        field_classes = {"url": HttpsURLField}
        labels = {"url": "URL"}
        help_texts = {"url": "where the events are POSTed (http or https)"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["url"].validators.append(URLValidator(schemes=["http", "https"]))
        # The admin's form sets every field it shows on the instance, the blank secret too: the stored one is kept here.
        self.stored_secret, self.generated_secret = self.instance.secret, ""

    def clean_secret(self) -> str:
        secret = self.cleaned_data["secret"]
        if secret and len(secret) < 16:
            raise ValidationError("at least 16 characters, or blank for one made for you")
        return secret

    def save(self, commit=True):
        webhook = super().save(commit=False)
        webhook.secret = self.cleaned_data["secret"] or self.stored_secret
        if not webhook.secret:
            webhook.secret = self.generated_secret = secrets.token_urlsafe(32)
        if commit:
            webhook.save()
        return webhook


@admin.register(models.Webhook)
class WebhookAdmin(NamespaceSettingAdmin):
    """Who is told of new signatures, SLA breaches, stalls and approval requests, per namespace and event."""

    list_display = ("name", "url", "events_shown", "enabled", "created_at")
    form = WebhookForm
    change_form_template = "admin/console/webhook_change_form.html"

    @admin.display(description="events")
    def events_shown(self, webhook) -> str:
        return ", ".join(webhook.events)

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = request.user.get_username()
        super().save_model(request, obj, form, change)
        if form.generated_secret:
            shown = f"The signing secret of {obj.name}, shown this once: {form.generated_secret}"
            messages.warning(request, shown)

    def get_urls(self):
        ping = self.admin_site.admin_view(self.ping_view)
        return [path("<str:object_id>/ping/", ping, name="history_webhook_ping"), *super().get_urls()]

    def ping_view(self, request, object_id):
        """The test button: a ping sent now, its answer reported; the delivery stays in the log."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_change_permission(request):
            raise PermissionDenied
        webhook = get_object_or_404(self.get_queryset(request), pk=object_id)
        delivery = webhook_ping(webhook)
        if delivery.state == models.DeliveryState.DELIVERED:
            messages.success(request, f"Test event delivered to {webhook.url}: HTTP {delivery.last_status}.")
        else:
            messages.error(
                request, f"Test event not delivered to {webhook.url}: {delivery.last_error}. It is retried like any."
            )
        log = reverse("admin:history_webhookdelivery_changelist")
        return HttpResponseRedirect(f"{log}?webhook__id__exact={webhook.pk}")


@admin.register(models.WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    """Every delivery: its event, its attempts, the receiver's last answer; the body as it was signed."""

    list_display = ("created_at", "webhook", "event", "state", "attempts", "last_status", "last_error", "delivered_at")
    list_filter = ("state", "event", ("webhook", admin.RelatedOnlyFieldListFilter))
    search_fields = ("=id", "=event_key")
    ordering = ("-created_at",)
    fields = (*list_display, "id", "event_key", "next_attempt_at", "body")
