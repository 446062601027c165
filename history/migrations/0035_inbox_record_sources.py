import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("history", "0034_instance_runner_due"),
    ]

    operations = [
        migrations.AddField(
            model_name="inboxrecord",
            name="source_event",
            field=models.ForeignObject(
                from_fields=["source_id"],
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="history.resultevent",
                to_fields=["id"],
            ),
        ),
        migrations.AddField(
            model_name="inboxrecord",
            name="source_signal",
            field=models.ForeignObject(
                from_fields=["source_id"],
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="history.signal",
                to_fields=["id"],
            ),
        ),
    ]
