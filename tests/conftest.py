import pytest
from rest_framework.test import APIClient

from history.credentials import credential_issue
from history.models import Scope
from history.tenancy import namespace_ensure


@pytest.fixture
def tenancy(db):
    namespace, application, queues = namespace_ensure(name="acme", application="billing", queues=["payments"])
    return namespace, application, queues


@pytest.fixture
def issue_token(tenancy):
    """Issue a token in the test namespace: issue_token(scopes=[...], queues=...)."""
    namespace, application, _ = tenancy

    def issue(*, scopes=(Scope.READ,), queues="*", actor_id="a" * 32, **extra):
        return credential_issue(
            namespace_id=namespace.id,
            application_id=application.id,
            actor_id=actor_id,
            label="test",
            scopes=list(scopes),
            queue_access=queues,
            **extra,
        )

    return issue


@pytest.fixture
def api():
    return APIClient()


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@pytest.fixture
def reliability_report(record_property):
    """Record a test's own counts (``title``, {what: count}); the run prints them summed per title at its end."""

    def report(title: str, counts: dict) -> None:
        record_property("reliability", (title, dict(counts)))

    return report


def pytest_terminal_summary(terminalreporter):
    """The reliability counts of every test that recorded some, summed per title; works under xdist too."""
    # Each phase's report carries the properties recorded so far: keep the fullest one per test.
    recorded: dict[str, list] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            properties = [v for n, v in getattr(report, "user_properties", ()) if n == "reliability"]
            if len(properties) > len(recorded.get(getattr(report, "nodeid", ""), ())):
                recorded[report.nodeid] = properties
    totals: dict[str, dict] = {}
    for title, counts in (p for properties in recorded.values() for p in properties):
        merged = totals.setdefault(title, {})
        for what, count in counts.items():
            merged[what] = merged.get(what, 0) + count
    if totals:
        terminalreporter.section("reliability counts")
        for title, counts in sorted(totals.items()):
            terminalreporter.line(f"{title}: " + ", ".join(f"{count} {what}" for what, count in counts.items()))
