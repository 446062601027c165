"""One path served by two apps: each HTTP method keeps its own app's handler and permissions."""

from rest_framework.views import APIView

from api.permissions import Authenticated


def by_method(name: str, **views: type[APIView]) -> type[APIView]:
    """``by_method("Signals", GET=ListView, POST=AcceptView)``: one view class, one handler per method."""

    def get_permissions(self):
        view = views.get(self.request.method)
        return [permission() for permission in (view.permission_classes if view else [Authenticated])]

    attrs = {method.lower(): getattr(view, method.lower()) for method, view in views.items()}
    attrs |= {"http_method_names": [m.lower() for m in views], "get_permissions": get_permissions}
    return type(name, (APIView,), attrs)
