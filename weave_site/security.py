"""The admin login throttle's two hooks into django-axes."""

from axes.backends import AxesStandaloneBackend
from django.conf import settings


class ThrottledLoginBackend(AxesStandaloneBackend):
    """django-axes' lockout check for every login that comes with its request.

    The admin login form always passes the request. A call without one (Django's test client
    ``login()``) is not a client's attempt: it skips the check instead of failing.
    """

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


def client_address(request) -> str | None:
    """The address a login attempt is counted against (settings.WEAVE_CLIENT_ADDRESS_META)."""
    value = request.META.get(settings.WEAVE_CLIENT_ADDRESS_META) or request.META.get("REMOTE_ADDR")
    # In a forwarded list only the last entry, appended by the proxy in front, cannot be forged by the client.
    return value.split(",")[-1].strip() if value else None
