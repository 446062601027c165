from django.contrib import admin
from django.urls import include, path

from api.engine_views import WorkflowSignalView
from api.history_views import SignalListView
from api.routing import by_method

# Reading the signals is history's, accepting one is the engine's.
WorkflowSignals = by_method("WorkflowSignals", GET=SignalListView, POST=WorkflowSignalView)

urlpatterns = [
    path("admin/", admin.site.urls),
    path("v1/workflows/<str:id>/signals", WorkflowSignals.as_view()),
    path("v1/", include("api.history_urls")),
    path("v1/", include("api.engine_urls")),
    path("v1/", include("api.recovery_urls")),
]

handler404 = "api.errors.api_not_found"
handler500 = "api.errors.api_server_error"
