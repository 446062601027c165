import signal
import threading

from django.core.management.base import BaseCommand, CommandError

from engine.background import Outage
from engine.runner import runner_pass


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
        verbose = options["verbosity"] > 1
        if options["once"]:
            self._report(runner_pass(), always=True)
            return
        stopping = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        outage = Outage("weave_runner", stopping)
        try:
            while not stopping.is_set():
                counts = outage.run(runner_pass)
                if counts is None:
                    continue
                self._report(counts, always=verbose)
                if not any(counts.values()):
                    stopping.wait(options["interval"])  # the connection stays open for the next pass
        except KeyboardInterrupt:
            pass

    def _report(self, counts: dict, *, always: bool) -> None:
        busy = {name: count for name, count in counts.items() if count}
        if busy or always:
            self.stdout.write(" ".join(f"{name}={count}" for name, count in (busy or counts).items()))
