from django.apps import AppConfig
from django.db.models.signals import post_migrate


class HistoryConfig(AppConfig):
    name = "history"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from history.events import events_follow
        from history.groups import groups_ensure

        events_follow()

        # After the auth app has created this app's permissions.
        post_migrate.connect(groups_ensure, sender=self)
