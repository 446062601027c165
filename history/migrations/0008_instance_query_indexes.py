"""Indexes of the instance query and the review summary (their reasons are in WorkflowInstance.Meta)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('history', '0007_review_cause_backfill'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='workflowinstance',
            index=models.Index(fields=['namespace', 'state', 'created_at', 'id'], name='instance_ns_state_created'),
        ),
        migrations.AddIndex(
            model_name='workflowinstance',
            index=models.Index(fields=['namespace', 'definition', 'updated_at', 'id'], name='instance_ns_def_updated'),
        ),
        migrations.AddIndex(
            model_name='workflowinstance',
            index=models.Index(fields=['namespace', 'definition', 'created_at', 'id'], name='instance_ns_def_created'),
        ),
        migrations.AddIndex(
            model_name='workflowinstance',
            index=models.Index(fields=['namespace', 'paused', 'updated_at', 'id'], name='instance_ns_paused_updated'),
        ),
        migrations.AddIndex(
            model_name='workflowinstance',
            index=models.Index(fields=['namespace', 'stop_kind', 'updated_at', 'id'], name='instance_ns_stop_updated'),
        ),
        migrations.AddIndex(
            model_name='workflowinstance',
            index=models.Index(fields=['namespace', 'review_since', 'id'], name='instance_ns_review_since'),
        ),
        migrations.AddIndex(
            model_name='workflowinstance',
            index=models.Index(fields=['namespace', 'review_cause', 'review_since', 'id'], name='instance_ns_cause_since'),
        ),
        migrations.AddIndex(
            model_name='workflowinstance',
            index=models.Index(fields=['namespace', 'business_key', 'id'], name='instance_ns_business_key'),
        ),
        migrations.AddIndex(
            model_name='workflowinstance',
            index=models.Index(fields=['namespace', 'state', 'definition', 'review_cause'], name='instance_ns_review_summary'),
        ),
        # (namespace, business_key, id) serves every business-key read, which are all within a namespace.
        migrations.AlterField(
            model_name='workflowinstance',
            name='business_key',
            field=models.CharField(blank=True, max_length=256),
        ),
    ]
