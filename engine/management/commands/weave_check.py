import sys

from django.core.management.base import BaseCommand

from engine.check import invariants_check


class Command(BaseCommand):
    help = "Check the engine invariants (ownership, sequences, quota, revisions, inbox); exit 1 on a violation."

    def handle(self, *args, **options):
        violations = invariants_check()
        for violation in violations:
            self.stdout.write(str(violation))
        if violations:
            self.stderr.write(f"{len(violations)} violation(s)")
            sys.exit(1)
        self.stdout.write("weave_check: clean")
