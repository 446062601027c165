from django.urls import path

from bench import default_admin, naive
from weave_site.urls import urlpatterns as product

W = "naive/workflows/<str:id>"

urlpatterns = [
    *product,
    path(f"{W}/steps/<str:key>/activations", naive.activations),
    path(f"{W}/steps/<str:key>/activations/<str:activation>/rounds", naive.rounds),
    path(f"{W}/signals", naive.signals),
    path("naive/workflows", naive.instances),
    path("bench-default-admin/", default_admin.site.urls),
]
