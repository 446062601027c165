from django.core.management.base import BaseCommand, CommandError

from engine.background import serve_passes
from engine.notify import notify_queue, notify_send
from history.models import ProcessKind


class Command(BaseCommand):
    help = (
        "The notifier: queues a delivery per subscribed webhook for each new signature, SLA breach, stall and"
        " approval request, and sends the due deliveries signed, retrying failed ones with a growing delay."
    )

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="run one pass and exit")
        parser.add_argument("--interval", type=float, default=2.0, help="seconds between idle passes (default 2)")

    def handle(self, *args, **options):
        if options["interval"] <= 0:
            raise CommandError("--interval: must be positive")
        serve_passes(
            ProcessKind.NOTIFIER,
            lambda: {"queued": notify_queue(), "sent": notify_send()},
            once=options["once"],
            interval=options["interval"],
            write=self.stdout.write,
        )
