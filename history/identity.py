"""Who is acting: a credential (API) or an operator (admin), reduced to one shape."""

from dataclasses import dataclass

from history.errors import PermissionDenied


@dataclass(frozen=True)
class Identity:
    namespace_id: str
    actor_id: str
    scopes: frozenset[str]
    # None means every queue of the namespace ("*").
    queues: frozenset[str] | None
    credential_id: str | None = None
    application_id: str | None = None

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes

    def require_scope(self, scope: str) -> None:
        if scope not in self.scopes:
            raise PermissionDenied(f"this credential lacks the {scope} scope")

    def can_access_queues(self, names: list[str]) -> bool:
        return self.queues is None or set(names) <= self.queues


def queue_set(access: object) -> frozenset[str] | None:
    """Stored queue access ("*" or a list of names) as an Identity queue set."""
    if access == "*":
        return None
    return frozenset(access or [])
