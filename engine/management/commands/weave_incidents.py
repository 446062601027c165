from django.core.management.base import BaseCommand, CommandError

from engine.incidents import incident_line, incidents_open, incidents_resolve
from history.models import Incident


class Command(BaseCommand):
    help = (
        "List the open incidents: background items set aside after a non-database error (the duty skips them"
        " while open). --resolve closes them once their cause is fixed, so the duty tries the items again."
    )

    def add_arguments(self, parser):
        parser.add_argument("--resolve", nargs="+", metavar="ID", help="incident ids to close")

    def handle(self, *args, **options):
        if options["resolve"]:
            ids = options["resolve"]
            known = set(Incident.objects.filter(pk__in=ids).values_list("id", flat=True))
            if unknown := [i for i in ids if i not in known]:
                raise CommandError(f"--resolve: no incident {', '.join(unknown)}")
            closed = incidents_resolve(ids=ids)
            self.stdout.write(f"resolved {closed} incident(s)")
            return
        count = 0
        for row in incidents_open().iterator():
            count += 1
            self.stdout.write(incident_line(row))
        self.stdout.write(f"incidents: {count} open")
