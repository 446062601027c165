from django.urls import path

from api import engine_views as api

urlpatterns = [
    path("workflows", api.WorkflowStartView.as_view()),
    path("workflows/<str:id>/pause", api.WorkflowPauseView.as_view()),
    path("workflows/<str:id>/resume", api.WorkflowResumeView.as_view()),
    path("workflows/<str:id>/cancel", api.WorkflowCancelView.as_view()),
    path("queues/<str:queue>/claim", api.QueueClaimView.as_view()),
    path("tasks/<str:task_id>/heartbeat", api.TaskHeartbeatView.as_view()),
    path("tasks/<str:task_id>/complete", api.TaskCompleteView.as_view()),
]
