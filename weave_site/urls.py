from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("v1/", include("history.urls")),
    path("v1/", include("engine.urls")),
    path("v1/", include("recovery.urls")),
]

handler404 = "weave_site.api.errors.api_not_found"
handler500 = "weave_site.api.errors.api_server_error"
