from django.apps import AppConfig


class RecoveryConfig(AppConfig):
    name = "recovery"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The runner (below this layer) drives the decisions waiting on it: its passes are a table it lets the
        # layers above add to; this one runs last, after the inbox and continuations it waits for.
        from engine.runner import PASSES
        from recovery.campaigns import pass_campaigns
        from recovery.decisions import pass_decisions
        from recovery.repairs import pass_repair_checks

        PASSES["decisions"] = pass_decisions
        # After the decisions: a campaign's items are decisions, driven on by the next passes.
        PASSES["campaigns"] = pass_campaigns
        PASSES["repairs"] = pass_repair_checks
