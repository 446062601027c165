from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models

from core import clock

# What a saved view opens: the admin URL name of each list.
VIEW_TARGETS = {"queue": "admin:index", "instances": "admin:history_workflowinstance_changelist"}


class SavedView(models.Model):
    """A named, filtered review queue or instance list, kept on the server: its owner's, and a group's if shared."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_views")
    name = models.CharField(max_length=80)
    target = models.CharField(max_length=16, choices=[("queue", "review queue"), ("instances", "instance list")])
    # The list's query string (filters, search, order), without the leading "?".
    query = models.CharField(max_length=1024, blank=True)
    group = models.ForeignKey(Group, null=True, blank=True, on_delete=models.SET_NULL, related_name="saved_views")
    created_at = models.DateTimeField(default=clock.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "name"], name="saved_view_owner_name")]

    def __str__(self) -> str:
        return self.name


class CaseState(models.TextChoices):
    OPEN = "OPEN"
    CLOSED = "CLOSED"


class Case(models.Model):
    """An incident case: the instances one cause stranded, worked as one. It holds the shared notes, evidence and
    ticket, and counts its instances accounted for — a repair the runner verified, succeeded, ended, or knowingly
    abandoned with a reason — until it closes with a summary for the postmortem (``console.cases``)."""

    namespace = models.ForeignKey(
        "history.Namespace", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    title = models.CharField(max_length=200)
    ticket_url = models.URLField(max_length=1024, blank=True, help_text="the incident's ticket elsewhere")
    # The failure signature it was opened from, if any: its instances in review then are the members.
    signature = models.ForeignKey(
        "history.FailureSignature",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    state = models.CharField(max_length=8, choices=CaseState.choices, default=CaseState.OPEN)
    opened_by = models.CharField(max_length=150)
    opened_at = models.DateTimeField(default=clock.now)
    closed_by = models.CharField(max_length=150, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    # Written once, when it closes: what the exports give from then on.
    summary = models.JSONField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["namespace", "state", "opened_at"], name="case_ns_state_opened")]

    def __str__(self) -> str:
        return self.title


class CaseMember(models.Model):
    """An instance of a case, and whether someone knowingly gave it up (the reason, who, when)."""

    case = models.ForeignKey(Case, on_delete=models.CASCADE, related_name="members")
    instance = models.ForeignKey(
        "history.WorkflowInstance", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    added_at = models.DateTimeField(default=clock.now)
    abandoned_reason = models.CharField(max_length=1024, blank=True)
    abandoned_by = models.CharField(max_length=150, blank=True)
    abandoned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["case", "instance"], name="case_member_instance")]


class CaseNote(models.Model):
    """A note shared by everyone working the case, with the evidence it rests on."""

    case = models.ForeignKey(Case, on_delete=models.CASCADE, related_name="notes")
    author = models.CharField(max_length=150)
    text = models.TextField(max_length=4000)
    evidence_ref = models.CharField(max_length=512, blank=True)
    created_at = models.DateTimeField(default=clock.now)
