import json

from django.core.management.base import BaseCommand

from engine.demo import SCENARIOS, demo_existing, demo_run
from history.models import Step, WorkflowInstance


class Command(BaseCommand):
    help = (
        "Create a demo namespace whose instances reach each engine scenario through the engine's own paths; "
        "if the namespace already holds them, print their ids instead."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--namespace",
            default="demo",
            help="namespace name; one holding the scenarios is shown as is, another taken one gets a numbered sibling",
        )
        parser.add_argument("--json", action="store_true", help="print {namespace, scenarios} as JSON")

    def handle(self, *args, **options):
        result = demo_existing(namespace=options["namespace"]) or demo_run(namespace=options["namespace"])
        if options["json"]:
            self.stdout.write(json.dumps(result))
            return
        self.stdout.write(f"namespace {result['namespace']}")
        for name, entry in result["scenarios"].items():
            instance = WorkflowInstance.objects.get(pk=entry["instance_id"])
            step = Step.objects.get(instance=instance, key=entry["step_key"])
            self.stdout.write(
                f"{name:24} instance {instance.id} {instance.state}{' paused' if instance.paused else ''}"
                f" step {step.key} {step.state}\n{'':24} {SCENARIOS[name]}"
            )
