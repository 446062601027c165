"""The test suite's settings: the product's, with a secret key made for this run and plain static file names.

pytest (pyproject.toml) loads this module; it sets WEAVE_SECRET_KEY in the environment before the
product settings read it, so the servers and commands the tests start as subprocesses inherit the
same key (and DJANGO_SETTINGS_MODULE). No key is written anywhere.
"""

import os
import secrets

os.environ.setdefault("WEAVE_SECRET_KEY", "weave-test-" + secrets.token_urlsafe(48))

from weave_site.settings import *  # noqa: E402, F403
from weave_site.settings import STORAGES  # noqa: E402

# The plain storage: {% static %} names a file as it is, so no test needs collectstatic run first; the product's
# manifest storage is tested on its own (tests/weave_site/test_static.py). Nothing is collected for the tests: no
# STATIC_ROOT for WhiteNoise to scan (or warn about) at every new client (a live server serves the apps' own files).
STORAGES = STORAGES | {"staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
STATIC_ROOT = None
