import datetime

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("history", "0033_runner_scan_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="workflowinstance",
            name="runner_due_at",
            field=models.GeneratedField(
                db_persist=True,
                expression=models.Case(
                    models.When(state="RUNNING", then=models.F("deadline_at")),
                    models.When(
                        state="CANCELLING",
                        then=models.Value(datetime.datetime(1970, 1, 1, 0, 0, tzinfo=datetime.UTC)),
                    ),
                ),
                output_field=models.DateTimeField(null=True),
            ),
        ),
        migrations.AddIndex(
            model_name="workflowinstance",
            index=models.Index(fields=["runner_due_at"], name="instance_runner_due"),
        ),
    ]
