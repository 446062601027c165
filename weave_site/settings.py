"""Settings, read from the environment.

WEAVE_DATABASE_URL selects the database: an SQLite file under var/ by default,
``mysql://root@127.0.0.1:3306/weave`` for MariaDB/MySQL in production.
WEAVE_SECRET_KEY is required: there is no built-in key (``make run`` makes one under var/).
WEAVE_PROFILE=production turns on the deployment profile (HTTPS only, HSTS, secure cookies,
explicit hosts) that ``manage.py check --deploy`` passes clean; docs/deployment.md "Production settings profile".
"""

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONCE, NONE, SELF
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

PROFILE = os.environ.get("WEAVE_PROFILE", "")
if PROFILE not in ("", "production"):
    raise ImproperlyConfigured(f"WEAVE_PROFILE: {PROFILE!r} is not a profile; use 'production' or leave it unset")
PRODUCTION = PROFILE == "production"


def _env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def _env_whole(name: str, default: int, *, least: int = 1) -> int:
    """A whole number from the environment, ``default`` when unset or empty; anything but a whole number of at
    least ``least`` (1 or 0) stops the process with the variable and the value named."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not text.isascii() or not text.isdigit() or int(text) < least:
        kind = "positive whole number" if least else "whole number of 0 or more"
        raise ImproperlyConfigured(f"{name}: {text!r} is not a {kind} (unset, it is {default})")
    return int(text)


def _weak(key: str) -> bool:
    return len(key) < 50 or len(set(key)) < 5


# The key signs sessions, CSRF tokens and list cursors: a key known to anyone (a constant in the
# source) would let them forge cursors, so without one the process does not start.
SECRET_KEY = os.environ.get("WEAVE_SECRET_KEY", "")
if not SECRET_KEY:
    raise ImproperlyConfigured(
        "WEAVE_SECRET_KEY is not set: export a random key of at least 50 characters "
        "(python -c 'import secrets; print(secrets.token_urlsafe(50))'); `make run` makes one under var/"
    )
# Keys retired by a rotation (comma-separated): what they signed — sessions, list cursors — still verifies,
# while everything new is signed with WEAVE_SECRET_KEY. Drop a key once its sessions have expired.
SECRET_KEY_FALLBACKS = _env_list("WEAVE_SECRET_KEY_FALLBACKS")

if PRODUCTION and _weak(SECRET_KEY):
    raise ImproperlyConfigured(
        "WEAVE_SECRET_KEY: at least 50 characters, not a repeated few, under WEAVE_PROFILE=production"
    )
if PRODUCTION and any(_weak(key) for key in SECRET_KEY_FALLBACKS):
    raise ImproperlyConfigured(
        "WEAVE_SECRET_KEY_FALLBACKS: each key at least 50 characters, not a repeated few, "
        "under WEAVE_PROFILE=production"
    )

DEBUG = os.environ.get("WEAVE_DEBUG", "") == "1"
if PRODUCTION and DEBUG:
    raise ImproperlyConfigured("WEAVE_DEBUG=1 is refused under WEAVE_PROFILE=production")
ALLOWED_HOSTS = _env_list("WEAVE_ALLOWED_HOSTS", "" if PRODUCTION else "127.0.0.1,localhost")
if PRODUCTION and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("WEAVE_ALLOWED_HOSTS is required under WEAVE_PROFILE=production (comma-separated)")
CSRF_TRUSTED_ORIGINS = _env_list("WEAVE_CSRF_TRUSTED_ORIGINS")

if PRODUCTION:
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = _env_whole("WEAVE_HSTS_SECONDS", 365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = os.environ.get("WEAVE_HSTS_INCLUDE_SUBDOMAINS", "1") == "1"
    SECURE_HSTS_PRELOAD = os.environ.get("WEAVE_HSTS_PRELOAD", "1") == "1"
# Behind a TLS-terminating proxy the request arrives as plain HTTP: name the header the proxy sets
# ("X-Forwarded-Proto: https"), and only when the proxy always sets or overwrites it.
_proxy_ssl_header = os.environ.get("WEAVE_PROXY_SSL_HEADER", "")
if _proxy_ssl_header:
    _header, _, _value = _proxy_ssl_header.partition(":")
    if not _header.strip() or not _value.strip():
        raise ImproperlyConfigured("WEAVE_PROXY_SSL_HEADER: 'Header-Name: value', e.g. 'X-Forwarded-Proto: https'")
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _header.strip().upper().replace("-", "_"), _value.strip())
# Defaults restated because the tests and the documentation rely on them.
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

INSTALLED_APPS = [
    "console.apps.ConsoleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # Before staticfiles: runserver leaves /static/ to WhiteNoise, as gunicorn does.
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "axes",
    "csp",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "history",
    "engine",
    "recovery.apps.RecoveryConfig",
    "console",
]

MIDDLEWARE = [
    "core.request_id.RequestIdMiddleware",
    # Every answer counted by status (core/metrics.py; exposed by manage.py weave_metrics).
    "core.metrics.HttpMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # /static/ from STATIC_ROOT (collectstatic), answered before the session, CSRF and CSP middleware run.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "csp.middleware.CSPMiddleware",
    # A body sent without a length that the server did not frame: 411, never read as empty (api/parsing.py).
    "api.parsing.LengthRequiredMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # The signed-in operator's time zone for the request (console/zone.py).
    "console.zone.ViewerZoneMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes requires: it turns a locked-out login into its 429 answer.
    "axes.middleware.AxesMiddleware",
]

# Only scripts and styles served by the app itself run; our templates' few <style> blocks carry
# the per-request nonce, and Swagger UI loads its start script from a URL (no inline script).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, NONCE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

# Admin login throttle (django-axes): failures are counted per username and, separately, per
# client address; at the limit that username, or that address, is refused (429) until the
# cool-off has passed since the last failure. The API's bearer tokens never go through a login.
AUTHENTICATION_BACKENDS = [
    "weave_site.security.ThrottledLoginBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_FAILURE_LIMIT = _env_whole("WEAVE_LOGIN_FAILURE_LIMIT", 5)
_cooloff_minutes = _env_whole("WEAVE_LOGIN_COOLOFF_MINUTES", 15)
AXES_COOLOFF_TIME = timedelta(minutes=_cooloff_minutes)
AXES_COOLOFF_MESSAGE = (
    f"Too many failed logins for this username or from this address ({AXES_FAILURE_LIMIT} within "
    f"{_cooloff_minutes} minutes): try again {_cooloff_minutes} minutes after the last one."
)
AXES_RESET_ON_SUCCESS = False
AXES_ENABLE_ADMIN = False
AXES_CLIENT_IP_CALLABLE = "weave_site.security.client_address"
# The request.META key of the client address: REMOTE_ADDR, or behind a proxy the header it
# always sets (e.g. HTTP_X_REAL_IP); a header a client can set itself would let it dodge the throttle.
WEAVE_CLIENT_ADDRESS_META = os.environ.get("WEAVE_CLIENT_ADDRESS_META", "REMOTE_ADDR")

ROOT_URLCONF = "weave_site.urls"
WSGI_APPLICATION = "weave_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


# Health and the background's heartbeats (api/health_views.py, engine/background.py). /readyz waits this long for
# the database, and a new MariaDB connection gives up after it (connect_timeout): neither a probe nor a
# request nor the background hangs for the system's minutes on a host that does not answer.
WEAVE_READY_TIMEOUT_SECONDS = _env_whole("WEAVE_READY_TIMEOUT_SECONDS", 2)
# A runner or worker whose last finished pass is older than this is stale (console, GET /v1/background).
WEAVE_HEARTBEAT_STALE_SECONDS = _env_whole("WEAVE_HEARTBEAT_STALE_SECONDS", 30)
# A load balancer probes over plain HTTP: the probes are answered there, past the production profile's redirect.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
# Seconds a web process keeps its database connection between requests; 0 opens one per request.
WEAVE_DB_CONN_MAX_AGE = _env_whole("WEAVE_DB_CONN_MAX_AGE", 60, least=0)


def database_from_url(url: str) -> dict:
    """One database config from a URL, with the options the lock-based design needs.

    ``mysql://user@host1:port1,host2:port2,…/name`` names the nodes of a Galera cluster (``NODES``): each
    connection goes to the first of them that is up and synced (``core.db``).
    """
    nodes = []
    scheme, _, rest = url.partition("://")
    credentials, at, hosts = rest.partition("/")[0].rpartition("@")
    if scheme == "mysql" and "," in hosts:
        for node in hosts.split(","):
            host, _, port = node.partition(":")
            nodes.append((host, int(port or 3306)))
        url = url.replace(f"{credentials}{at}{hosts}", f"{credentials}{at}{hosts.split(',')[0]}", 1)
    # A web process keeps its connection between requests for this long, checked before each request reuses it
    # (on a cluster, that its node is still ready: core.db): a request does not pay a connection's set-up.
    config = dj_database_url.parse(url, conn_max_age=WEAVE_DB_CONN_MAX_AGE, conn_health_checks=True)
    engine = config["ENGINE"]
    if nodes:
        config["NODES"] = nodes
    if engine == "django.db.backends.mysql":
        config["ENGINE"] = "core.db"  # atomic blocks open with START TRANSACTION
        config["OPTIONS"] = {
            "charset": "utf8mb4",
            # Rows are locked explicitly (SELECT ... FOR UPDATE); READ COMMITTED makes
            # every locking read see the latest committed row and avoids gap locks.
            "isolation_level": "read committed",
            "init_command": "SET sql_mode='STRICT_TRANS_TABLES,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO'",
            "connect_timeout": WEAVE_READY_TIMEOUT_SECONDS,
        }
        # The collation production creates its database with (scripts/serve.sh): text compares without case
        # there, and the tests and plan tests walk the same comparisons and indexes.
        config["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}
    elif engine == "django.db.backends.sqlite3":
        config["OPTIONS"] = {
            # Writers take the lock at BEGIN and queue behind each other instead of
            # failing on lock upgrade; WAL lets readers run beside one writer.
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    return config


DATABASES = {
    "default": database_from_url(os.environ.get("WEAVE_DATABASE_URL", f"sqlite:///{VAR_DIR / 'weave.sqlite3'}"))
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# weave_site/formats/en: times to the second, 24-hour, with the zone, wherever Django formats one.
FORMAT_MODULE_PATH = ["weave_site.formats"]

# Input limits (core/limits.py): a larger request body is refused with 413 before it is read;
# one client JSON value (input, result, payload) is stored only up to this many UTF-8 bytes.
WEAVE_MAX_BODY_BYTES = _env_whole("WEAVE_MAX_BODY_BYTES", 1024 * 1024)
WEAVE_MAX_JSON_BYTES = _env_whole("WEAVE_MAX_JSON_BYTES", 256 * 1024)

# How long a recovery proposal waits for its approval before the runner expires it.
WEAVE_PROPOSAL_TTL_SECONDS = _env_whole("WEAVE_PROPOSAL_TTL_SECONDS", 24 * 3600)

# The watchdog (engine/watchdog.py) marks an instance stalled past these bounds: paused this long, or an inbox
# record or continuation of it waiting this long for the runner.
WEAVE_STALL_PAUSED_SECONDS = _env_whole("WEAVE_STALL_PAUSED_SECONDS", 4 * 3600)
WEAVE_STALL_WAITING_SECONDS = _env_whole("WEAVE_STALL_WAITING_SECONDS", 300)
# … or a task of it queued again after failing this many attempts in a row with one failure pattern.
WEAVE_STALL_RETRIES = _env_whole("WEAVE_STALL_RETRIES", 5)
# Outgoing webhooks (engine/notify.py): a failed delivery is retried after this many seconds, doubled each time
# (at most an hour), up to this many attempts in all (the default spans about an hour and a half).
WEAVE_WEBHOOK_RETRY_SECONDS = _env_whole("WEAVE_WEBHOOK_RETRY_SECONDS", 10)
WEAVE_WEBHOOK_ATTEMPTS = _env_whole("WEAVE_WEBHOOK_ATTEMPTS", 10)

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# collectstatic writes each file under a name carrying a hash of its content, gzipped beside it, and WhiteNoise
# serves those names cached for good ("immutable"). Only the hashed names are kept: a page naming a file by its
# plain name gets a 404 at once, and {% static %} of a file missing from the manifest is an error, not a dead link.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_KEEP_ONLY_HASHED_FILES = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["api.authentication.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["api.permissions.Authenticated"],
    "DEFAULT_RENDERER_CLASSES": ["api.rendering.ExactJSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["api.parsing.ExactJSONParser"],
    "EXCEPTION_HANDLER": "api.errors.envelope_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Weave API",
    "DESCRIPTION": "History reads, workflow control and the recovery operations.",
    "VERSION": "1",
    # Tags come from the path after /v1/; the probes at the site root (/healthz, /readyz) must not shorten it to /.
    "SCHEMA_PATH_PREFIX": "/v1/",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "api.schema.postprocess"],
}

# Logs on standard error (core/logs.py): WEAVE_LOG_FORMAT=json writes one JSON object per line with the request,
# background pass, namespace and instance each line belongs to; plain (the default, for a terminal) the message
# alone. The web process's access lines (logger weave.http) are on at INFO whatever the root level.
LOG_FORMAT = os.environ.get("WEAVE_LOG_FORMAT", "") or "plain"
if LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"WEAVE_LOG_FORMAT: {LOG_FORMAT!r} is not a log format; use 'json' or 'plain' (unset)")
_log_level = os.environ.get("WEAVE_LOG_LEVEL", "")
LOG_LEVEL = (_log_level or "WARNING").upper()
if LOG_LEVEL not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
    raise ImproperlyConfigured(
        f"WEAVE_LOG_LEVEL: {_log_level!r} is not a level; use DEBUG, INFO, WARNING (unset), ERROR or CRITICAL"
    )
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "core.logs.ContextFilter"}},
    "formatters": {"plain": {"format": "%(message)s"}, "json": {"()": "core.logs.json_formatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["context"], "formatter": LOG_FORMAT}},
    # The product's own lines (requests, busy runner passes, tasks run, set-aside items) at INFO unless
    # WEAVE_LOG_LEVEL says otherwise; the libraries' at LOG_LEVEL.
    "loggers": {"weave": {"level": LOG_LEVEL if _log_level else "INFO"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
}
