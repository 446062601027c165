"""Every /v1/ path and its view: history reads, engine commands and the worker protocol, recovery, the background."""

from django.urls import path
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularSwaggerSplitView

from api import annotation_views, campaign_views, decision_views, engine_views, history_views
from api.health_views import BackgroundView
from api.identity_views import CredentialSelfView
from api.index_views import ApiIndexView
from api.recovery_views import ProposalApproveView, ProposalRejectView, RecoveryView
from recovery.operations import OPERATIONS

W = "workflows/<str:id>"

urlpatterns = [
    path("", ApiIndexView.as_view()),
    path("credentials/self", CredentialSelfView.as_view(), name="credential-self"),
    path("background", BackgroundView.as_view()),
    path("openapi.json", SpectacularJSONAPIView.as_view(), name="openapi-schema"),
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="openapi-schema"), name="openapi-docs"),
    # Before workflows/<id>, which would take "review-summary" for an id.
    path("workflows/review-summary", history_views.ReviewSummaryView.as_view(), name="review-summary"),
    path("signatures", history_views.SignatureListView.as_view(), name="signatures"),
    path(f"{W}", history_views.InstanceDetailView.as_view()),
    path(f"{W}/steps/<str:key>/activations", history_views.ActivationListView.as_view()),
    path(f"{W}/steps/<str:key>/activations/<str:activation>", history_views.ActivationDetailView.as_view()),
    path(f"{W}/steps/<str:key>/activations/<str:activation>/rounds", history_views.PollRoundListView.as_view()),
    path(f"{W}/signals", engine_views.WorkflowSignalsView.as_view()),
    path(f"{W}/signals/<str:signal>", history_views.SignalDetailView.as_view()),
    path(f"{W}/signals/<str:signal>/operations", history_views.SignalOperationListView.as_view()),
    path(f"{W}/signals/<str:signal>/operations/<str:operation>", history_views.SignalOperationDetailView.as_view()),
    path(f"{W}/tasks/<str:task>", history_views.TaskDetailView.as_view()),
    path(f"{W}/operations", history_views.WorkflowOperationListView.as_view()),
    path(f"{W}/events", history_views.EventListView.as_view()),
    path(f"{W}/notes", annotation_views.WorkflowNotesView.as_view()),
    path(f"{W}/acknowledge", annotation_views.WorkflowAcknowledgeView.as_view()),
    path(f"{W}/assign", annotation_views.WorkflowAssignView.as_view()),
    path("workflows", engine_views.WorkflowsView.as_view(), name="workflows"),
    path(f"{W}/pause", engine_views.WorkflowPauseView.as_view()),
    path(f"{W}/resume", engine_views.WorkflowResumeView.as_view()),
    path(f"{W}/cancel", engine_views.WorkflowCancelView.as_view()),
    path("queues/<str:queue>/claim", engine_views.QueueClaimView.as_view()),
    path("tasks/<str:task_id>/source", history_views.TaskSourceView.as_view()),
    path("tasks/<str:task_id>/heartbeat", engine_views.TaskHeartbeatView.as_view()),
    path("tasks/<str:task_id>/complete", engine_views.TaskCompleteView.as_view()),
    *(
        path(f"workflows/<str:instance_id>/recovery/{name}", RecoveryView.as_view(operation=name))
        for name in OPERATIONS
    ),
    path(f"{W}/decisions", decision_views.WorkflowDecisionsView.as_view()),
    path(f"{W}/decisions/<str:decision_id>", decision_views.WorkflowDecisionView.as_view()),
    path(f"{W}/decisions/<str:decision_id>/approve", decision_views.DecisionApproveView.as_view()),
    path(f"{W}/decisions/<str:decision_id>/reject", decision_views.DecisionRejectView.as_view()),
    path("workflows/<str:instance_id>/proposals/<str:proposal_id>/approve", ProposalApproveView.as_view()),
    path("workflows/<str:instance_id>/proposals/<str:proposal_id>/reject", ProposalRejectView.as_view()),
    path("campaigns", campaign_views.CampaignListView.as_view()),
    path("campaigns/<str:campaign_id>", campaign_views.CampaignDetailView.as_view()),
    path("campaigns/<str:campaign_id>/items", campaign_views.CampaignLedgerView.as_view()),
    *(
        path(f"campaigns/<str:campaign_id>/{action}", campaign_views.move_view(action))
        for action in campaign_views.ACTIONS
    ),
]
