"""Whether each repair worked: a watch opened by every Continue that lets an instance run on from review, judged by
the runner (``recovery.repairs``)."""

from django.db import models

from history.models.base import _id_field, _ref


class RepairVerdict(models.TextChoices):
    WATCHING = "WATCHING", "watched: the repaired step has not moved yet"
    EFFECTIVE = "EFFECTIVE", "the instance left the repaired step"
    INEFFECTIVE = "INEFFECTIVE", "back in review for the same cause, or no progress within the window"
    REGRESSED = "REGRESSED", "the repaired step failed again, another way"


class RepairCheck(models.Model):
    """One repair under watch: the review a Continue lifted (its cause and step), and until when the step has to
    move. Never a change of the engine's rows: a verdict is a fact beside them."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    instance = _ref("WorkflowInstance", db_index=False)
    definition = _ref("WorkflowDefinition", db_index=False)
    # The step the review was about (blank: an instance-wide cause) and its cause.
    step_key = models.CharField(max_length=64, blank=True)
    cause = models.CharField(max_length=32)
    # The Continue that lifted the review (its audit and timeline carry the same id).
    operation_id = models.CharField(max_length=32)
    made_at = models.DateTimeField()
    due_at = models.DateTimeField()
    verdict = models.CharField(max_length=16, choices=RepairVerdict.choices, default=RepairVerdict.WATCHING)
    detail = models.CharField(max_length=512, blank=True)
    judged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # The watches still open, the earliest due first (the runner's pass).
            models.Index(fields=["verdict", "due_at", "id"], name="repair_watching"),
            models.Index(fields=["instance", "made_at"], name="repair_instance"),
            # The notifier reads the verdicts in the order they were reached.
            models.Index(fields=["judged_at", "id"], name="repair_judged"),
        ]

    def __str__(self) -> str:
        return f"{self.step_key or 'instance'} {self.verdict}"
