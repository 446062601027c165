from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("history", "0032_task_claim_order_index"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="signal",
            index=models.Index(fields=["state", "expires_at"], name="signal_state_expires"),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(fields=["state", "deadline_at"], name="task_state_deadline"),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(fields=["state", "latest_start_at"], name="task_state_latest_start"),
        ),
        migrations.AddIndex(
            model_name="wait",
            index=models.Index(fields=["state", "fire_at"], name="wait_state_fire"),
        ),
    ]
