"""Who may do what, where: the namespace, the applications and queues with their quotas of active tasks,
the API scopes, the bearer credentials, and the operator identity a Django admin user acts under.
"""

from django.conf import settings
from django.db import models

from core import clock
from history.models.base import _id_field, _ref


class Namespace(models.Model):
    id = _id_field()
    name = models.CharField(max_length=128, unique=True)
    created_at = models.DateTimeField(default=clock.now)

    def __str__(self) -> str:
        return self.name


class Application(models.Model):
    """An application and its quota of active tasks."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    name = models.CharField(max_length=128)
    max_active_tasks = models.PositiveIntegerField(default=100)
    active_tasks = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="application_ns_name")]

    def __str__(self) -> str:
        return self.name


class Queue(models.Model):
    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    name = models.CharField(max_length=128)
    max_active_tasks = models.PositiveIntegerField(default=100)
    active_tasks = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="queue_ns_name")]

    def __str__(self) -> str:
        return self.name


class Scope(models.TextChoices):
    READ = "workflows:read"
    AUDIT_READ = "workflows:audit:read"
    RECOVER = "workflows:recover"
    WRITE = "workflows:write"
    CONTROL = "workflows:control"
    TASKS_WORK = "tasks:work"
    # Notes, acknowledgement and assignment: what people say about an instance, never its state.
    ANNOTATE = "workflows:annotate"


class Credential(models.Model):
    """A bearer token. Only its SHA-256 digest is stored; the token is shown once."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    application = _ref("Application", null=True, db_index=False)
    actor_id = models.CharField(max_length=32)
    label = models.CharField(max_length=128, blank=True)
    key_id = models.CharField(max_length=16, unique=True)
    token_digest = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    # "*" for every queue of the namespace, otherwise a list of queue names.
    queue_access = models.JSONField(default=list)
    created_at = models.DateTimeField(default=clock.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.label or self.key_id


class Operator(models.Model):
    """The identity a Django admin user acts under."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        primary_key=True,
        related_name="weave_operator",
    )
    namespace = _ref("Namespace", db_index=False)
    actor_id = models.CharField(max_length=32)
    queue_access = models.JSONField(default=list)
    # The IANA zone the console shows this operator's times in (Preferences in the admin).
    time_zone = models.CharField(max_length=64, default="UTC")
