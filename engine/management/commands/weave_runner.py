import signal
import threading

from django.core.management.base import BaseCommand, CommandError

from engine.background import Outage, ProcessBeat
from engine.runner import runner_pass
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
        beat = ProcessBeat(ProcessKind.RUNNER)

        def one_pass() -> dict:
            counts = runner_pass()
            beat.beat(sum(counts.values()))
            return counts

        if options["once"]:
            beat.start()
            counts = one_pass()
            self.stdout.write(" ".join(f"{name}={count}" for name, count in counts.items()))
            beat.stop()
            return
        stopping = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        outage = Outage("weave_runner", stopping)
        outage.run(beat.start)  # missed in an outage, the row is inserted by the first beat written
        try:
            while not stopping.is_set():
                # A busy pass logs what it handled (engine.runner); an idle one says nothing.
                counts = outage.run(one_pass)
                if counts is None:
                    continue
                if not any(counts.values()):
                    stopping.wait(options["interval"])  # the connection stays open for the next pass
        except KeyboardInterrupt:
            pass
        beat.stop()
