import pytest

from history.credentials import identity_of_credential
from history.models import Scope


@pytest.fixture
def recover_token(issue_token):
    """A credential holding workflows:recover (and read) on every queue."""
    return issue_token(scopes=[Scope.RECOVER, Scope.READ])


@pytest.fixture
def recoverer(recover_token):
    return identity_of_credential(recover_token.credential)
