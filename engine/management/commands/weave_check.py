import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from engine.check_run import Checkpoint, CheckpointRefused, checks_run
from engine.incidents import incident_line, incidents_open


class Command(BaseCommand):
    help = (
        "Check the engine invariants (ownership, sequences, quota, revisions, inbox, hung waits) and list the open"
        " incidents (items the background set aside); exit 1 on a violation."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--checkpoint",
            metavar="FILE",
            help="record each finished check in FILE and, when FILE holds an interrupted run of this database,"
            " resume after its last finished check (FILE is removed once every check has run)",
        )
        parser.add_argument(
            "--progress",
            action="store_true",
            help="a line per check on standard error: rows covered, rows/s, time left (on by default on a terminal)",
        )

    def handle(self, *args, checkpoint=None, progress=False, **options):
        try:
            saved = Checkpoint(Path(checkpoint)) if checkpoint else None
        except CheckpointRefused as refused:
            raise CommandError(f"--checkpoint: {refused}") from refused
        if saved is not None and saved.done:
            self.stderr.write(
                f"resuming from {checkpoint}: {len(saved.done)} check(s) done earlier, their findings follow"
            )
        report = self.stderr.write if progress or sys.stderr.isatty() else None
        violations = 0
        for violation in checks_run(checkpoint=saved, progress=report):
            self.stdout.write(str(violation))
            violations += 1
        # Set-aside items break no invariant, but their instances wait in review until someone looks.
        incidents = 0
        for incident in incidents_open().iterator():
            self.stdout.write(f"open incident: {incident_line(incident)}")
            incidents += 1
        self.stdout.write(
            f"open incidents: {incidents}" + (" (weave_incidents --resolve ID once fixed)" if incidents else "")
        )
        if violations:
            self.stderr.write(f"{violations} violation(s)")
            sys.exit(1)
        self.stdout.write("weave_check: clean")
