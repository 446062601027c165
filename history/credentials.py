"""Issuing and verifying bearer tokens. Only a digest of a token is ever stored."""

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from core import clock
from core.errors import Unauthenticated
from core.identity import Identity, queue_set
from history.models import Credential
from history.prepared import Prepared

# Every API request reads its credential by the token's key id.
_credential_of_key = Prepared(lambda key_id: Credential.objects.filter(key_id=key_id)[:1])
TOKEN_PATTERN = re.compile(r"weave_([0-9a-f]{16})_([A-Za-z0-9_\-]{43})")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class IssuedToken:
    credential: Credential
    token: str


def credential_issue(
    *,
    namespace_id: str,
    application_id: str | None,
    actor_id: str,
    label: str,
    scopes: list[str],
    queue_access: str | list[str],
    expires_at=None,
) -> IssuedToken:
    """Create a credential; the returned token is the only copy of the secret."""
    key_id = secrets.token_hex(8)
    token = f"weave_{key_id}_{secrets.token_urlsafe(32)}"
    credential = Credential.objects.create(
        namespace_id=namespace_id,
        application_id=application_id,
        actor_id=actor_id,
        label=label,
        key_id=key_id,
        token_digest=_digest(token),
        scopes=sorted(set(scopes)),
        queue_access=queue_access,
        expires_at=expires_at,
    )
    return IssuedToken(credential=credential, token=token)


def credential_authenticate(*, token: str) -> Identity:
    """The identity behind a token; unknown, wrong, revoked and expired look the same."""
    refused = Unauthenticated("the bearer token is invalid, revoked or expired")
    match = TOKEN_PATTERN.fullmatch(token)
    if match is None:
        raise refused
    credential = _credential_of_key.first(match.group(1))
    if credential is None or not hmac.compare_digest(credential.token_digest, _digest(token)):
        raise refused
    now = clock.now()
    if credential.revoked_at is not None or (credential.expires_at is not None and credential.expires_at <= now):
        raise refused
    return identity_of_credential(credential)


def identity_of_credential(credential: Credential) -> Identity:
    return Identity(
        namespace_id=credential.namespace_id,
        actor_id=credential.actor_id,
        scopes=frozenset(credential.scopes),
        queues=queue_set(credential.queue_access),
        credential_id=credential.id,
        application_id=credential.application_id,
    )
