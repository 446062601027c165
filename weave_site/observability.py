"""Error reports (Sentry) and traces (OpenTelemetry), each switched on by its own standard environment variable.

``SENTRY_DSN`` sends unhandled errors and error log lines to Sentry (sentry_sdk reads ``SENTRY_ENVIRONMENT`` and
``SENTRY_RELEASE`` itself). ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, or
``OTEL_TRACES_EXPORTER``) traces every request through the OpenTelemetry Django instrumentation; the exporter reads
the other ``OTEL_*`` variables itself. Neither package is in requirements.txt: a variable set without its package
stops the process at start, naming the variable and the file to install.

``observability_init`` runs from the entry points (weave_site/wsgi.py, weave_site/asgi.py, manage.py), not from the
settings: the instrumentation edits the settings' MIDDLEWARE, so it must run after they are read and before the
application loads its middleware; and the test suite, which reads the settings too, never reports anywhere.
"""

import os
from collections.abc import Mapping

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from core.logs import bound
from core.request_id import request_id_of

REQUIREMENTS = "requirements-observability.txt"
TRACES_EXPORTERS = ("otlp", "console", "none")
# The OTLP exporter installed is the HTTP one (protobuf), not gRPC.
OTLP_PROTOCOL = "http/protobuf"


def observability_init(environ: Mapping[str, str] = os.environ) -> None:
    """Switch on what the environment asks for; refuse, naming the variable, what cannot be done."""
    if environ.get("SENTRY_DSN"):
        _sentry_init(environ["SENTRY_DSN"])
    switch, exporter = _traces_exporter(environ)
    if exporter is not None:
        _traces_init(switch, exporter)


def _not_installed(variable: str, what: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{variable} is set but {what} is not installed: pip install -r {REQUIREMENTS}")


def _with_log_context(event: dict, hint: dict) -> dict:
    """An error report carries the request, pass, namespace and instance its log lines carry."""
    event.setdefault("tags", {}).update(bound())
    return event


def _span_with_request_id(span, request) -> None:
    span.set_attribute("weave.request_id", request_id_of(request))


def _sentry_init(dsn: str) -> None:
    try:
        import sentry_sdk
        from sentry_sdk.integrations.django import DjangoIntegration
    except ImportError as error:
        raise _not_installed("SENTRY_DSN", "sentry-sdk") from error
    # send_default_pii stays off: no Authorization header, cookie or signed-in user is sent.
    sentry_sdk.init(dsn=dsn, integrations=[DjangoIntegration()], before_send=_with_log_context)


def _traces_exporter(environ: Mapping[str, str]) -> tuple[str, str | None]:
    """(the variable that switched traces on, the exporter's name), or ("", None) when nothing asks for traces."""
    switch, name = "", None
    chosen = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if chosen:
        if chosen not in TRACES_EXPORTERS:
            raise ImproperlyConfigured(f"OTEL_TRACES_EXPORTER: {chosen!r} is not one of {', '.join(TRACES_EXPORTERS)}")
        switch, name = "OTEL_TRACES_EXPORTER", None if chosen == "none" else chosen
    else:
        switch = next(
            (v for v in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT") if environ.get(v)), ""
        )
        name = "otlp" if switch else None
    if name == "otlp":
        for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            protocol = environ.get(variable) or OTLP_PROTOCOL
            if protocol != OTLP_PROTOCOL:
                raise ImproperlyConfigured(f"{variable}: {protocol!r}: only the {OTLP_PROTOCOL} exporter is installed")
    return switch, name


def _traces_init(switch: str, exporter_name: str) -> None:
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.instrumentation.django import DjangoInstrumentor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError as error:
        raise _not_installed(switch, "OpenTelemetry") from error
    # Read the settings here: the instrumentation would take their refusal for "no settings" and run on empty ones.
    # Its middleware goes inside the request id's and the metrics': a span carries the request id, and a request
    # the tracing refuses (a Host not allowed) is still answered with its id, counted and logged.
    inside = settings.MIDDLEWARE.index("core.metrics.HttpMetricsMiddleware") + 1
    # The service's name and attributes come from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter() if exporter_name == "otlp" else ConsoleSpanExporter())
    )
    trace.set_tracer_provider(provider)
    DjangoInstrumentor().instrument(middleware_position=inside, request_hook=_span_with_request_id)
