from django.apps import AppConfig


class RecoveryConfig(AppConfig):
    name = "recovery"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from history.eligibility import register_eligibility
        from recovery.eligibility import instance_eligibility_document

        # The instance detail API shows the same eligibility as the admin (history cannot import recovery).
        register_eligibility(instance_eligibility_document)
