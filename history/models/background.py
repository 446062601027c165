"""The background's own processes: one row per runner or worker process, its heartbeat, written by the process."""

from django.db import models

from core import clock
from history.models.base import _id_field, _ref


class ProcessKind(models.TextChoices):
    RUNNER = "runner"
    WORKER = "worker"
    NOTIFIER = "notifier"


class BackgroundProcess(models.Model):
    """A runner or worker process: where it runs, when it started, when it last finished a pass (``beat_at``)
    and how much it has done, and when it stopped cleanly (a SIGTERM or Ctrl-C; a killed process never does).

    The process inserts its row at start and updates it after its passes; a starting process deletes the rows
    of processes silent for a week (``history.background``), so the table holds the recent processes only.
    """

    id = _id_field()
    kind = models.CharField(max_length=16, choices=ProcessKind.choices)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    # A worker's queue and namespace; blank and NULL for a runner, which serves every namespace.
    queue = models.CharField(max_length=128, blank=True)
    namespace = _ref("Namespace", null=True, db_index=False)
    started_at = models.DateTimeField(default=clock.now)
    beat_at = models.DateTimeField(default=clock.now)
    passes = models.PositiveBigIntegerField(default=0)
    items = models.PositiveBigIntegerField(default=0)
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        # The most recent beat first (the background's status), and the long-silent rows a start deletes.
        indexes = [models.Index(fields=["beat_at", "id"], name="background_process_beat")]

    def __str__(self) -> str:
        return f"{self.kind} {self.host}:{self.pid}" + (f" {self.queue}" if self.queue else "")
