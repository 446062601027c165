from django.apps import AppConfig


class RecoveryConfig(AppConfig):
    name = "recovery"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The runner (below this layer) drives the decisions waiting on it: its passes are a table it lets the
        # layers above add to; this one runs last, after the inbox and continuations it waits for.
        from engine.runner import PASSES
        from recovery.decisions import pass_decisions

        PASSES["decisions"] = pass_decisions
