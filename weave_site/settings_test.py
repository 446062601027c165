"""The test suite's settings: the product's, with a secret key made for this run.

pytest (pyproject.toml) loads this module; it sets WEAVE_SECRET_KEY in the environment before the
product settings read it, so the servers and commands the tests start as subprocesses inherit the
same key (and DJANGO_SETTINGS_MODULE). No key is written anywhere.
"""

import os
import secrets

os.environ.setdefault("WEAVE_SECRET_KEY", "weave-test-" + secrets.token_urlsafe(48))

from weave_site.settings import *  # noqa: E402, F403
