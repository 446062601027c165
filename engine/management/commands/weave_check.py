import sys

from django.core.management.base import BaseCommand

from engine.check import invariants_stream


class Command(BaseCommand):
    help = "Check the engine invariants (ownership, sequences, quota, revisions, inbox); exit 1 on a violation."

    def handle(self, *args, **options):
        violations = 0
        for violation in invariants_stream():
            self.stdout.write(str(violation))
            violations += 1
        if violations:
            self.stderr.write(f"{violations} violation(s)")
            sys.exit(1)
        self.stdout.write("weave_check: clean")
