"""The product's settings plus the naive endpoints the benchmarks compare against."""

from weave_site.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
