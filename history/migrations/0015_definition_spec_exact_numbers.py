# The spec's numbers are read as exact Decimals and written as their exact text: the column and its
# stored JSON are unchanged, so only the migration state changes (no table rebuild on SQLite).

import core.exactjson
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('history', '0014_four_eyes_and_notes'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='workflowdefinition',
                    name='spec',
                    field=models.JSONField(decoder=core.exactjson.ExactDecoder, encoder=core.exactjson.ExactEncoder),
                ),
            ],
        ),
    ]
