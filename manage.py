#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "weave_site.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    from weave_site.observability import observability_init

    try:
        # Sentry and traces for the background too (weave_runner, weave_worker), when their variables are set.
        observability_init()
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as error:
        if settings.configured:
            raise  # a fault of the code, not of the environment: its traceback says where
        # The settings refused the environment (no WEAVE_SECRET_KEY, a bad value): their message names it.
        sys.exit(f"{os.path.basename(sys.argv[0])}: {error}")


if __name__ == "__main__":
    main()
