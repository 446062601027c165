"""gunicorn's settings for the web application; ``gunicorn weave_site.wsgi:application`` reads this file from the
working directory (the Procfile and the systemd unit start it there). The environment can change each value.

SIGTERM stops gracefully: no new connections, requests in flight get ``graceful_timeout`` seconds. SIGHUP reloads:
new workers start with the new code and settings, then the old ones stop the same graceful way.
"""

import multiprocessing
import os


def _whole(name: str, default: int) -> int:
    text = os.environ.get(name, "")
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise SystemExit(f"gunicorn.conf.py: {name}: {text!r} is not a positive whole number (unset, it is {default})")
    return int(text)


bind = os.environ.get("WEAVE_BIND", "127.0.0.1:8000")
# Requests wait on the database, not the CPU: two per core and one more, as gunicorn's documentation suggests.
workers = _whole("WEB_CONCURRENCY", multiprocessing.cpu_count() * 2 + 1)
# A worker silent this long is killed and replaced (a request never takes this long: its queries are bounded).
timeout = _whole("WEAVE_WEB_TIMEOUT_SECONDS", 30)
graceful_timeout = _whole("WEAVE_WEB_GRACEFUL_SECONDS", 20)
keepalive = 5
# Behind a proxy that holds connections open, recycle workers now and then (jittered: not all at once).
max_requests = _whole("WEAVE_WEB_MAX_REQUESTS", 10000)
max_requests_jitter = max_requests // 10
# No access log of gunicorn's own: the application writes one line per request (logger weave.http) with its request
# id, route, status and duration, in the format WEAVE_LOG_FORMAT chooses (core/logs.py).
accesslog = None
# gunicorn's own lines (start, workers booted or killed) on standard error, as JSON too when the application's are.
if os.environ.get("WEAVE_LOG_FORMAT") == "json":
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "core.logs.json_formatter"}},
        # gunicorn merges this over its own configuration key by key: its root logger names "console".
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
        "root": {"level": "WARNING", "handlers": ["console"]},
        "loggers": {"gunicorn.error": {"level": "INFO", "handlers": ["console"], "propagate": False}},
    }
# The proxy's X-Forwarded-* are trusted from these addresses only (the proxy runs on the same host by default).
forwarded_allow_ips = os.environ.get("WEAVE_FORWARDED_ALLOW_IPS", "127.0.0.1,::1")
