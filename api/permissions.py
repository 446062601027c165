"""Scope checks: no scope implies another."""

from rest_framework.permissions import BasePermission

from core.errors import Unauthenticated


class Authenticated(BasePermission):
    def has_permission(self, request, view):
        if request.auth is None:
            raise Unauthenticated("authentication required: send 'Authorization: Bearer <token>'")
        return True


def scope_required(*scopes: str) -> type[BasePermission]:
    """A permission class admitting identities that hold one of ``scopes`` (401 before 403)."""

    class ScopeRequired(Authenticated):
        def has_permission(self, request, view):
            super().has_permission(request, view)
            request.auth.require_scope(*scopes)
            return True

    ScopeRequired.__name__ = f"ScopeRequired[{'|'.join(scopes)}]"
    return ScopeRequired
