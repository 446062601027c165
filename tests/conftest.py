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
