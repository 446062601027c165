"""The Access heading's tables: tenancy, credentials, operators and the approval policies."""

from django import forms
from django.contrib import admin

from console.admins.base import NamespaceSettingAdmin, NamespaceSettingForm, ReadOnlyAdmin
from history import models
from recovery.operations import OPERATIONS


@admin.register(models.Namespace)
class NamespaceAdmin(ReadOnlyAdmin):
    list_display = ("name", "id", "created_at")
    search_fields = ("=id", "name")


@admin.register(models.Application)
class ApplicationAdmin(ReadOnlyAdmin):
    list_display = ("name", "namespace", "active_tasks", "max_active_tasks")
    search_fields = ("=id", "name")


@admin.register(models.Queue)
class QueueAdmin(ReadOnlyAdmin):
    list_display = ("name", "namespace", "active_tasks", "max_active_tasks")
    search_fields = ("=id", "name")


@admin.register(models.Credential)
class CredentialAdmin(ReadOnlyAdmin):
    list_display = ("label", "key_id", "namespace", "actor_id", "created_at", "expires_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("=id", "=key_id", "label", "=actor_id")
    exclude = ("token_digest",)


@admin.register(models.Operator)
class OperatorAdmin(ReadOnlyAdmin):
    list_display = ("user", "namespace", "actor_id")
    list_select_related = ("user", "namespace")


class ApprovalPolicyForm(NamespaceSettingForm):
    """A policy of the operator's namespace: a definition name of it (or every one) and an operation (or every one)."""

    class Meta:
        model = models.ApprovalPolicy
        fields = ("definition_name", "operation", "approvals_required")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        names = models.WorkflowDefinition.objects.filter(namespace_id=self.namespace_id).values_list("name", flat=True)
        self.fields["definition_name"] = forms.ChoiceField(
            choices=[("", "every definition"), *((name, name) for name in sorted(set(names)))],
            required=False,
            label="Definition",
        )
        self.fields["operation"] = forms.ChoiceField(
            choices=[("", "every operation"), *((op.name, op.title) for op in OPERATIONS.values())],
            required=False,
        )


@admin.register(models.ApprovalPolicy)
class ApprovalPolicyAdmin(NamespaceSettingAdmin):
    """Which recovery operations need a second person; the approvers group manages them (its permissions)."""

    list_display = ("definition_name_shown", "operation_shown", "approvals_required")
    form = ApprovalPolicyForm

    @admin.display(description="definition", ordering="definition_name")
    def definition_name_shown(self, policy) -> str:
        return policy.definition_name or "every definition"

    @admin.display(description="operation", ordering="operation")
    def operation_shown(self, policy) -> str:
        return OPERATIONS[policy.operation].title if policy.operation else "every operation"
