import json

from django.core.management.base import BaseCommand, CommandError

from core import exactjson
from core.errors import WeaveError
from engine.definitions import definition_create
from history.models import Namespace


class Command(BaseCommand):
    help = "Load a workflow definition (JSON file) into a namespace as a new immutable version."

    def add_arguments(self, parser):
        parser.add_argument("file", help="the definition document (JSON)")
        parser.add_argument("--namespace", required=True, help="the namespace name")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options):
        namespace = Namespace.objects.filter(name=options["namespace"]).first()
        if namespace is None:
            raise CommandError(f"--namespace: no namespace named {options['namespace']!r}")
        try:
            with open(options["file"], encoding="utf-8") as handle:
                document = exactjson.loads(handle.read())
        except OSError as exc:
            raise CommandError(f"{options['file']}: {exc.strerror}") from None
        except ValueError as exc:
            raise CommandError(f"{options['file']}: not valid JSON: {exc}") from None
        try:
            definition = definition_create(namespace_id=namespace.id, document=document)
        except WeaveError as exc:
            raise CommandError(f"{options['file']}: {exc.message}") from None
        summary = {
            "id": definition.id,
            "name": definition.name,
            "version": definition.version,
            "queues": definition.queues,
        }
        if options["json"]:
            self.stdout.write(json.dumps(summary))
        else:
            self.stdout.write(
                f"definition {definition.name} v{definition.version} ({definition.id}), queues: {definition.queues}"
            )
