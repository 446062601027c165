from django.core.management.base import BaseCommand, CommandError

from engine.background import serve_passes
from engine.runner import Pace, runner_pass
from history.models import ProcessKind


class Command(BaseCommand):
    help = (
        "The engine's background: inbox consumption, continuations, ready steps, POLL rounds, timers,"
        " wait deadlines, lease expiry, instance deadlines, stop settlement."
    )

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="run one pass and exit")
        parser.add_argument("--interval", type=float, default=1.0, help="seconds between idle passes (default 1)")

    def handle(self, *args, **options):
        if options["interval"] <= 0:
            raise CommandError("--interval: must be positive")
        # A busy pass logs what it handled (engine.runner); an idle one says nothing. One pass runs every duty.
        pace = Pace()
        serve_passes(
            ProcessKind.RUNNER,
            runner_pass if options["once"] else lambda: runner_pass(skip=pace.resting()),
            once=options["once"],
            interval=options["interval"],
            write=self.stdout.write,
        )
