from django.urls import path

from history.api.identity_views import CredentialSelfView

urlpatterns = [
    path("credentials/self", CredentialSelfView.as_view()),
]
