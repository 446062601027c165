from django.urls import path

from recovery.api import RecoveryView
from recovery.operations import OPERATIONS

urlpatterns = [
    path(f"workflows/<str:instance_id>/recovery/{name}", RecoveryView.as_view(operation=name)) for name in OPERATIONS
]
