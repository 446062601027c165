"""Who is acting: a credential (API) or an operator (admin), reduced to one shape."""

from dataclasses import dataclass

from core.errors import PermissionDenied


@dataclass(frozen=True)
class Identity:
    namespace_id: str
    actor_id: str
    scopes: frozenset[str]
    # None means every queue of the namespace ("*").
    queues: frozenset[str] | None
    credential_id: str | None = None
    application_id: str | None = None

    def require_scope(self, *scopes: str) -> None:
        """Refuse unless the identity holds one of ``scopes`` (one is enough: no scope implies another)."""
        if self.scopes.isdisjoint(scopes):
            raise PermissionDenied(f"this credential lacks the {' or '.join(scopes)} scope")

    def can_access_queues(self, names: list[str]) -> bool:
        return self.queues is None or set(names) <= self.queues


def queue_set(access: object) -> frozenset[str] | None:
    """Stored queue access ("*" or a list of names) as an Identity queue set."""
    if access == "*":
        return None
    return frozenset(access or [])


def identity_stored(identity: Identity) -> dict:
    """The columns a row keeps to act later as ``identity`` (a decision, a campaign); ``identity_of_stored`` reads
    them back."""
    return {
        "actor_id": identity.actor_id,
        "scopes": sorted(identity.scopes),
        "queue_access": "*" if identity.queues is None else sorted(identity.queues),
        "credential_id": identity.credential_id or "",
    }


def identity_of_stored(row) -> Identity:
    """Whoever made ``row``, as they were then (``identity_stored``), in its namespace."""
    return Identity(
        namespace_id=row.namespace_id,
        actor_id=row.actor_id,
        scopes=frozenset(row.scopes),
        queues=queue_set(row.queue_access),
        credential_id=row.credential_id or None,
    )


# Django permission → API scope, for admin users acting under an Operator identity.
PERMISSION_SCOPES = {
    "history.view_workflowinstance": "workflows:read",
    "history.audit_workflowinstance": "workflows:audit:read",
    "history.recover_workflowinstance": "workflows:recover",
    "history.control_workflowinstance": "workflows:control",
    "history.signal_workflowinstance": "workflows:write",
    "history.annotate_workflowinstance": "workflows:annotate",
}


def identity_of_user(user) -> Identity | None:
    """The identity of an admin user: its Operator row plus the scopes its permissions grant."""
    operator = getattr(user, "weave_operator", None) if user.is_authenticated else None
    if operator is None:
        return None
    scopes = frozenset(scope for perm, scope in PERMISSION_SCOPES.items() if user.has_perm(perm))
    return Identity(
        namespace_id=operator.namespace_id,
        actor_id=operator.actor_id,
        scopes=scopes,
        queues=queue_set(operator.queue_access),
    )
