from django.contrib import admin
from django.urls import include, path

from engine.api import WorkflowSignalView
from history.api.history_views import SignalListView
from weave_site.api.routing import by_method

# Reading the signals is history's, accepting one is the engine's.
WorkflowSignals = by_method("WorkflowSignals", GET=SignalListView, POST=WorkflowSignalView)

urlpatterns = [
    path("admin/", admin.site.urls),
    path("v1/workflows/<str:id>/signals", WorkflowSignals.as_view()),
    path("v1/", include("history.urls")),
    path("v1/", include("engine.urls")),
    path("v1/", include("recovery.urls")),
]

handler404 = "weave_site.api.errors.api_not_found"
handler500 = "weave_site.api.errors.api_server_error"
