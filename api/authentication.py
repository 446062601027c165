"""`Authorization: Bearer <token>` for the JSON API."""

from rest_framework.authentication import BaseAuthentication, get_authorization_header

from core.errors import Unauthenticated
from history.credentials import credential_authenticate


class BearerTokenAuthentication(BaseAuthentication):
    def authenticate(self, request):
        header = get_authorization_header(request)
        if not header:
            return None
        try:
            scheme, _, token = header.decode("ascii").partition(" ")
        except UnicodeDecodeError:
            raise Unauthenticated("the Authorization header is not ASCII") from None
        if scheme.lower() != "bearer" or not token or " " in token:
            raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
        identity = credential_authenticate(token=token)
        return (identity, identity)

    def authenticate_header(self, request):
        return 'Bearer realm="weave"'
