from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("history", "0031_console_record_list_indexes"),
    ]

    # The new index is built before the old one goes: claims always have one to read.
    operations = [
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                fields=["queue", "state", "-priority", "created_at", "id"], name="task_queue_claim_order"
            ),
        ),
        migrations.RemoveIndex(
            model_name="task",
            name="task_queue_state_priority",
        ),
    ]
