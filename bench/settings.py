"""The product's settings plus the naive endpoints the benchmarks compare against."""

from weave_site.settings import *  # noqa: F403
from weave_site.settings import STORAGES

ROOT_URLCONF = "bench.urls"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
# The plain storage and nothing collected, as the tests': a page renders where collectstatic never ran.
STORAGES = STORAGES | {"staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
STATIC_ROOT = None
