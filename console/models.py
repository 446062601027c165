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
