"""Sentry and OpenTelemetry: off unless their own variables ask; a variable without its package stops the process."""

import os
import subprocess
import sys
import types
from pathlib import Path
from unittest.mock import Mock

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from core.logs import log_context
from weave_site.observability import observability_init

ROOT = Path(__file__).resolve().parents[2]
DSN = "https://public@sentry.example.invalid/7"
ENDPOINT = "http://127.0.0.1:4318"
INSTALL = "pip install -r requirements-observability.txt"


def _fake_modules(monkeypatch, modules: dict[str, dict]) -> None:
    """Put modules with these attributes, and every package above them, in sys.modules."""
    made: dict[str, types.ModuleType] = {}
    for name, attributes in modules.items():
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            package = ".".join(parts[:depth])
            if package not in made:
                made[package] = types.ModuleType(package)
                monkeypatch.setitem(sys.modules, package, made[package])
                if depth > 1:
                    setattr(made[".".join(parts[: depth - 1])], parts[depth - 1], made[package])
        for attribute, value in attributes.items():
            setattr(made[name], attribute, value)


@pytest.fixture
def absent(monkeypatch):
    """Make these packages unimportable, as where requirements-observability.txt was never installed."""

    def hide(*names: str) -> None:
        for name in names:
            monkeypatch.setitem(sys.modules, name, None)

    return hide


def test_nothing_is_switched_on_without_the_variables(absent):
    absent("sentry_sdk", "opentelemetry")
    observability_init({})  # switching anything on would need a package, and raise


def test_sentry_dsn_without_sentry_sdk_stops_naming_the_variable_and_the_file(absent):
    absent("sentry_sdk")
    with pytest.raises(ImproperlyConfigured) as refused:
        observability_init({"SENTRY_DSN": DSN})
    assert str(refused.value) == f"SENTRY_DSN is set but sentry-sdk is not installed: {INSTALL}"


@pytest.mark.parametrize(
    ("environ", "variable"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "OTEL_TRACES_EXPORTER"),
    ],
)
def test_an_otel_variable_without_opentelemetry_stops_naming_it_and_the_file(absent, environ, variable):
    absent("opentelemetry")
    with pytest.raises(ImproperlyConfigured) as refused:
        observability_init(environ)
    assert str(refused.value) == f"{variable} is set but OpenTelemetry is not installed: {INSTALL}"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER: 'zipkin' is not one of otlp, console, none"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc': only the http/protobuf exporter is installed",
        ),
    ],
)
def test_a_bad_otel_setting_is_refused_naming_it(environ, message):
    with pytest.raises(ImproperlyConfigured) as refused:
        observability_init(environ)
    assert str(refused.value) == message


def test_otel_traces_exporter_none_switches_traces_off_whatever_the_endpoint(absent):
    absent("opentelemetry")
    observability_init({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT})


def test_sentry_dsn_initialises_sentry_with_it_and_the_django_integration(monkeypatch):
    init, integration = Mock(), Mock()
    _fake_modules(
        monkeypatch,
        {"sentry_sdk": {"init": init}, "sentry_sdk.integrations.django": {"DjangoIntegration": integration}},
    )
    observability_init({"SENTRY_DSN": DSN})
    init.assert_called_once()
    options = init.call_args.kwargs
    assert options["dsn"] == DSN
    assert options["integrations"] == [integration.return_value]
    # An error report carries the ids its log lines carry.
    with log_context(request_id="r" * 32, instance="i" * 32):
        event = options["before_send"]({"tags": {"kept": "1"}}, {})
    assert event["tags"] == {"kept": "1", "request_id": "r" * 32, "instance": "i" * 32}


def test_an_otlp_endpoint_instruments_django_inside_the_request_id_and_the_metrics(monkeypatch):
    exporter, console, provider, processor, instrumentor, set_provider = (Mock() for _ in range(6))
    _fake_modules(
        monkeypatch,
        {
            "opentelemetry.trace": {"set_tracer_provider": set_provider},
            "opentelemetry.exporter.otlp.proto.http.trace_exporter": {"OTLPSpanExporter": exporter},
            "opentelemetry.instrumentation.django": {"DjangoInstrumentor": instrumentor},
            "opentelemetry.sdk.trace": {"TracerProvider": provider},
            "opentelemetry.sdk.trace.export": {"BatchSpanProcessor": processor, "ConsoleSpanExporter": console},
        },
    )
    observability_init({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT})
    set_provider.assert_called_once_with(provider.return_value)
    processor.assert_called_once_with(exporter.return_value)
    provider.return_value.add_span_processor.assert_called_once_with(processor.return_value)
    console.assert_not_called()
    position = instrumentor.return_value.instrument.call_args.kwargs["middleware_position"]
    assert settings.MIDDLEWARE[position - 1] == "core.metrics.HttpMetricsMiddleware"


def test_manage_py_stops_with_one_line_when_sentry_sdk_is_missing():
    start = (
        "import sys; sys.modules['sentry_sdk'] = None; sys.argv = ['manage.py', 'check']; import manage; manage.main()"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "weave_site.settings", "SENTRY_DSN": DSN}
    done = subprocess.run(
        [sys.executable, "-c", start], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert done.stderr == f"manage.py: SENTRY_DSN is set but sentry-sdk is not installed: {INSTALL}\n"
