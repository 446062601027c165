from django.urls import path
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularSwaggerSplitView

from api import history_views as views
from api.identity_views import CredentialSelfView

W = "workflows/<str:id>"

urlpatterns = [
    path("credentials/self", CredentialSelfView.as_view()),
    path("openapi.json", SpectacularJSONAPIView.as_view(), name="openapi-schema"),
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="openapi-schema"), name="openapi-docs"),
    path(f"{W}", views.InstanceDetailView.as_view()),
    path(f"{W}/steps/<str:key>/activations", views.ActivationListView.as_view()),
    path(f"{W}/steps/<str:key>/activations/<str:activation>", views.ActivationDetailView.as_view()),
    path(f"{W}/steps/<str:key>/activations/<str:activation>/rounds", views.PollRoundListView.as_view()),
    path(f"{W}/signals/<str:signal>", views.SignalDetailView.as_view()),
    path(f"{W}/signals/<str:signal>/operations", views.SignalOperationListView.as_view()),
    path(f"{W}/signals/<str:signal>/operations/<str:operation>", views.SignalOperationDetailView.as_view()),
    path(f"{W}/tasks/<str:task>", views.TaskDetailView.as_view()),
    path(f"{W}/operations", views.WorkflowOperationListView.as_view()),
]
