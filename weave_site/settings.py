"""Settings, read from the environment.

WEAVE_DATABASE_URL selects the database: an SQLite file under var/ by default,
``mysql://root@127.0.0.1:3306/weave`` for MariaDB/MySQL in production.
"""

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

SECRET_KEY = os.environ.get("WEAVE_SECRET_KEY", "weave-local-development-key-not-for-production")
DEBUG = os.environ.get("WEAVE_DEBUG", "") == "1"
ALLOWED_HOSTS = [h for h in os.environ.get("WEAVE_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "history",
    "engine",
    "recovery",
]

MIDDLEWARE = [
    "weave_site.api.request_id.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

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


def database_from_url(url: str) -> dict:
    """One database config from a URL, with the options the lock-based design needs."""
    config = dj_database_url.parse(url, conn_max_age=0)
    engine = config["ENGINE"]
    if engine == "django.db.backends.mysql":
        config["OPTIONS"] = {
            "charset": "utf8mb4",
            # Rows are locked explicitly (SELECT ... FOR UPDATE); READ COMMITTED makes
            # every locking read see the latest committed row and avoids gap locks.
            "isolation_level": "read committed",
            "init_command": "SET sql_mode='STRICT_TRANS_TABLES,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO'",
        }
        config["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_bin"}
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

# Input limits (history/limits.py): a larger request body is refused with 413 before it is read;
# one client JSON value (input, result, payload) is stored only up to this many UTF-8 bytes.
WEAVE_MAX_BODY_BYTES = int(os.environ.get("WEAVE_MAX_BODY_BYTES", 1024 * 1024))
WEAVE_MAX_JSON_BYTES = int(os.environ.get("WEAVE_MAX_JSON_BYTES", 256 * 1024))

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["weave_site.api.authentication.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["weave_site.api.permissions.Authenticated"],
    "DEFAULT_RENDERER_CLASSES": ["weave_site.api.rendering.ExactJSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["weave_site.api.parsing.ExactJSONParser"],
    "EXCEPTION_HANDLER": "weave_site.api.errors.envelope_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Weave API",
    "DESCRIPTION": "History reads, workflow control and the six recovery operations.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "engine.openapi.postprocess"],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("WEAVE_LOG_LEVEL", "WARNING")},
}
