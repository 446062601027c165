from django.urls import path

from api.recovery_views import RecoveryView
from recovery.operations import SERVICES

urlpatterns = [
    path(f"workflows/<str:instance_id>/recovery/{name}", RecoveryView.as_view(operation=name)) for name in SERVICES
]
