from django.contrib import admin
from django.urls import include, path

from api.health_views import LivenessView, ReadinessView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("v1/", include("api.urls")),
    # The probes of a load balancer, at the root where it looks for them.
    path("healthz", LivenessView.as_view()),
    path("readyz", ReadinessView.as_view()),
]

handler404 = "api.errors.api_not_found"
handler500 = "api.errors.api_server_error"
