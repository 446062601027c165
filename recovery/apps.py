from django.apps import AppConfig


class RecoveryConfig(AppConfig):
    name = "recovery"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The runner (below this layer) drives the decisions waiting on it: its passes are a table it lets the
        # layers above add to; this one runs last, after the inbox and continuations it waits for.
        from engine.runner import DUE, PASSES
        from recovery.campaigns import campaigns_due, pass_campaigns
        from recovery.decisions import decisions_due, pass_decisions
        from recovery.repairs import pass_repair_checks, repairs_due

        PASSES["decisions"], DUE["decisions"] = pass_decisions, decisions_due
        # After the decisions: a campaign's items are decisions, driven on by the next passes.
        PASSES["campaigns"], DUE["campaigns"] = pass_campaigns, campaigns_due
        PASSES["repairs"], DUE["repairs"] = pass_repair_checks, repairs_due
