from django.core.management.base import BaseCommand, CommandError

from engine.incidents import incidents_resolve
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
        rows = Incident.objects.filter(resolved_at__isnull=True).order_by("-last_seen_at")
        count = 0
        for row in rows.iterator():
            count += 1
            self.stdout.write(
                f"{row.id} {row.duty} {row.item_kind} {row.item_id} instance={row.instance_id or '-'}"
                f" {row.error_class} count={row.count} last_seen={row.last_seen_at.isoformat()}"
            )
        self.stdout.write(f"incidents: {count} open")
