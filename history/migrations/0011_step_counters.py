"""The step counters (activations, attempts before the current activation), the index that bounds a
step's activations of another instance and the one that finds an instance's tasks by state; the
counters of existing steps are filled from their history.

The fill is set-based: one UPDATE per batch of step ids, each step's counters computed by correlated
subqueries over the activation and task indexes.
"""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import Count, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce

BATCH = 1000


def counters_fill(apps, schema_editor) -> None:
    Step = apps.get_model("history", "Step")
    Activation = apps.get_model("history", "Activation")
    Task = apps.get_model("history", "Task")
    activations = (
        Activation.objects.filter(step_id=OuterRef("pk")).values("step_id").annotate(n=Count("id")).values("n")
    )
    earlier = (
        Task.objects.filter(source_activation__step_id=OuterRef("pk"))
        .exclude(source_activation_id=OuterRef("current_activation_id"))
        .values("source_activation__step_id")
        .annotate(n=Sum("attempt_count"))
        .values("n")
    )
    last = ""
    while True:
        ids = list(Step.objects.filter(id__gt=last).order_by("id").values_list("id", flat=True)[:BATCH])
        if not ids:
            return
        batch = Step.objects.filter(id__gte=ids[0], id__lte=ids[-1])
        batch.update(activation_count=Coalesce(Subquery(activations), 0))
        batch.filter(kind="TASK").update(attempts_before=Coalesce(Subquery(earlier), 0))
        last = ids[-1]


class Migration(migrations.Migration):
    dependencies = [("history", "0010_event_subject_covers_state")]

    operations = [
        migrations.AddField(model_name="step", name="activation_count", field=models.PositiveIntegerField(default=0)),
        migrations.AddField(model_name="step", name="attempts_before", field=models.PositiveIntegerField(default=0)),
        migrations.AddIndex(
            model_name="activation",
            index=models.Index(fields=["step", "instance"], name="activation_step_instance"),
        ),
        # The composite index serves every lookup the single-column one did, and the instance's tasks by state.
        migrations.AddIndex(
            model_name="task",
            index=models.Index(fields=["source_instance", "state"], name="task_source_instance_state"),
        ),
        migrations.AlterField(
            model_name="task",
            name="source_instance",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="history.workflowinstance",
            ),
        ),
        migrations.RunPython(counters_fill, migrations.RunPython.noop),
    ]
