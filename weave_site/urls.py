from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("v1/", include("api.urls")),
]

handler404 = "api.errors.api_not_found"
handler500 = "api.errors.api_server_error"
