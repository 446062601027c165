"""The operator console: recovery forms, previews, control forms and bulk actions on instances.

Modelled on Django's ``UserAdmin.user_change_password``: per-object admin views added by
``get_urls()``, wrapped in ``admin_view``, that check the permission server side, render a
form and, on success, message and redirect. Nothing here writes a table: every change goes
through the recovery and engine services, which enforce every rule.
"""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from console.admin import WorkflowInstanceAdmin
from console.forms import DECLARATIONS, OPERATION_FORMS, form_command, fresh_key, hidden_copy, recovery_form_class
from core.errors import Aborted, WeaveError
from core.fields import json_form_value
from core.identity import identity_of_user
from engine.instances import instance_cancel, instance_pause, instance_resume
from engine.signals import signal_accept
from history.models import Step, Task, WorkflowInstance
from history.selectors.instances import task_attempts
from recovery.eligibility import instance_eligibility, operation_preview
from recovery.operations import SERVICES

PERMISSIONS = {
    "recover": "history.recover_workflowinstance",
    "control": "history.control_workflowinstance",
    "signal": "history.signal_workflowinstance",
}
CONTROLS = {"pause": instance_pause, "resume": instance_resume, "cancel": instance_cancel}


def _attach(form: forms.Form, error: WeaveError) -> None:
    """Show a service refusal on the field it names, or above the form."""
    field = error.field
    if field in form.fields and not isinstance(form.fields[field].widget, forms.HiddenInput):
        form.add_error(field, error.message)
    else:
        form.add_error(None, f"{error.code}: {error.message}")


def preview_rows(preview: dict, prefix: str = "") -> list[tuple[str, object, object, bool]]:
    """Flatten a preview into (what, before, after, changed) rows; ``{before, after}`` pairs are changes."""
    rows = []
    for key, value in preview.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and set(value) == {"before", "after"}:
            rows.append((name, value["before"], value["after"], value["before"] != value["after"]))
        elif isinstance(value, dict):
            rows += preview_rows(value, f"{name}.")
        else:
            rows.append((name, value, value, False))
    return rows


class ControlForm(forms.Form):
    reason = forms.CharField(max_length=1024, widget=forms.Textarea(attrs={"rows": 2, "cols": 80}))
    expected_control_revision = forms.CharField(widget=forms.HiddenInput)


class SignalForm(forms.Form):
    target_step_key = forms.CharField(max_length=64)
    name = forms.CharField(max_length=128)
    payload_version = forms.CharField(max_length=64)
    correlation_key = forms.CharField(max_length=256, required=False)
    payload = forms.CharField(widget=forms.Textarea(attrs={"rows": 4, "cols": 80}), help_text="JSON, kept exactly.")
    reason = forms.CharField(max_length=1024, widget=forms.Textarea(attrs={"rows": 2, "cols": 80}))
    evidence_ref = forms.CharField(max_length=512, required=False)
    idempotency_key = forms.CharField(widget=forms.HiddenInput, max_length=128)

    def clean_payload(self):
        try:
            return json_form_value(self.cleaned_data["payload"])
        except ValueError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc}") from None


class BulkForm(forms.Form):
    reason = forms.CharField(max_length=1024, widget=forms.Textarea(attrs={"rows": 2, "cols": 80}))
    evidence_ref = forms.CharField(max_length=512)
    declaration = forms.BooleanField(required=True)


class RecoveryInstanceAdmin(WorkflowInstanceAdmin):
    instance_template = "admin/recovery/instance_page.html"
    actions = ["continue_selected", "retry_step_selected"]

    # ---- permissions -------------------------------------------------------------------

    def has_recover_permission(self, request) -> bool:
        return request.user.has_perm(PERMISSIONS["recover"])

    def _identity(self, request, permission: str):
        if not request.user.has_perm(PERMISSIONS[permission]):
            raise PermissionDenied
        identity = identity_of_user(request.user)
        if identity is None:
            raise PermissionDenied
        return identity

    def _instance_url(self, instance_id: str) -> str:
        return reverse("admin:history_workflowinstance_change", args=[instance_id])

    # ---- the instance page -------------------------------------------------------------

    def instance_context(self, request, instance) -> dict:
        context = super().instance_context(request, instance)
        user = request.user
        context["can_control"] = user.has_perm(PERMISSIONS["control"])
        context["can_signal"] = user.has_perm(PERMISSIONS["signal"])
        identity = identity_of_user(user)
        if not self.has_recover_permission(request) or identity is None:
            return context
        eligibility = instance_eligibility(identity=identity, instance_id=instance.id)
        page = context["page"]
        tasks = {t.id: t for view in page.steps for a in view.activations for t in a.tasks}
        for view in page.steps:
            view.operations = [
                self._button(instance, view.step, name, entry, tasks)
                for name, entry in eligibility["steps"].get(view.step.key, {}).items()
            ]
        context["continue_operation"] = self._button(instance, None, "continue", eligibility["continue"], tasks)
        return context

    def _button(self, instance, step: Step | None, name: str, entry: dict, tasks: dict[str, Task]) -> dict:
        query = {"revision": instance.revision}
        if step is not None:
            query |= {"step": step.key, "step_revision": step.revision, "activation": step.current_activation_id or ""}
        if entry.get("task_id"):
            task = tasks.get(entry["task_id"])
            query |= {"task": entry["task_id"], "task_revision": task.revision if task else ""}
        url = reverse("admin:history_workflowinstance_recovery", args=[instance.id, name])
        return {
            "name": name,
            "title": OPERATION_FORMS[name].title,
            "possible": entry["possible"],
            "reason": entry.get("reason", ""),
            "url": f"{url}?{'&'.join(f'{k}={v}' for k, v in query.items())}",
        }

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path(
                "<str:object_id>/recovery/<str:operation>/",
                view(self.recovery_view),
                name="history_workflowinstance_recovery",
            ),
            path(
                "<str:object_id>/control/<str:action>/",
                view(self.control_view),
                name="history_workflowinstance_control",
            ),
            path("<str:object_id>/signal/", view(self.signal_view), name="history_workflowinstance_signal"),
            *super().get_urls(),
        ]

    # ---- one recovery operation: form → preview → confirm -------------------------------

    def _initial(self, request, instance, operation) -> dict:
        """Hidden fields from the page the operator looked at (the link), else the current rows."""
        seen = request.GET
        initial = {"expected_revision": seen.get("revision") or str(instance.revision), "idempotency_key": fresh_key()}
        if operation.target == "step":
            step = Step.objects.filter(instance_id=instance.id, key=seen.get("step", "")).first()
            initial |= {
                "step_key": seen.get("step", ""),
                "activation_id": seen.get("activation") or (step.current_activation_id if step else ""),
                "expected_step_revision": seen.get("step_revision") or (str(step.revision) if step else ""),
            }
        if operation.target == "task":
            task = Task.objects.filter(source_instance_id=instance.id, id=seen.get("task", "")).first()
            initial |= {
                "task_id": seen.get("task", ""),
                "expected_task_revision": seen.get("task_revision") or (str(task.revision) if task else ""),
            }
        return initial

    def recovery_view(self, request, object_id, operation):
        spec = OPERATION_FORMS.get(operation)
        if spec is None:
            raise Http404("no such recovery operation")
        identity = self._identity(request, "recover")
        instance = self.visible_instance(request, object_id)
        form_class = recovery_form_class(spec)
        preview, conflict = None, False
        if request.method == "POST":
            form = form_class(request.POST)
            if form.is_valid():
                command = form_command(spec, form.cleaned_data)
                try:
                    if "_confirm" in request.POST:
                        receipt = SERVICES[spec.name](
                            identity=identity,
                            instance_id=instance.id,
                            idempotency_key=form.cleaned_data["idempotency_key"],
                            command=command,
                        )
                        self._done(request, spec, receipt)
                        return HttpResponseRedirect(self._instance_url(instance.id))
                    preview = preview_rows(
                        operation_preview(
                            identity=identity, operation=spec.name, instance_id=instance.id, command=command
                        )
                    )
                    form = hidden_copy(form)
                except WeaveError as error:
                    conflict = isinstance(error, Aborted)
                    _attach(form, error)
        else:
            form = form_class(initial=self._initial(request, instance, spec))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"{spec.title} — instance {instance.id}",
            "instance": instance,
            "operation": spec,
            "form": form,
            "preview": preview,
            "conflict": conflict,
            "instance_url": self._instance_url(instance.id),
            "subject": self._subject(request.POST if request.method == "POST" else request.GET, instance),
        }
        return TemplateResponse(request, "admin/recovery/operation_form.html", context)

    def _subject(self, data, instance) -> dict:
        """The step and task the decision is about, as they are now, for the operator to read."""
        step = Step.objects.filter(instance_id=instance.id, key=data.get("step_key") or data.get("step", "")).first()
        task = Task.objects.filter(
            source_instance_id=instance.id, id=data.get("task_id") or data.get("task", "")
        ).first()
        # The task's attempts with any late evidence beside the UNKNOWN one: what its worker reported
        # after the lease was lost is what the operator verifies the outcome against.
        attempts = task_attempts(task.id) if task is not None else []
        return {"step": step, "task": task, "attempts": attempts}

    def _done(self, request, spec, receipt) -> None:
        data = receipt.data
        if receipt.replayed:
            messages.warning(
                request,
                f"{spec.title} was already applied with this form (same idempotency key): nothing was done twice.",
            )
        else:
            messages.success(
                request,
                f"{spec.title} applied: instance {data['state']}, revision {data['revision']}, "
                f"operation {data['operation_id']}.",
            )

    # ---- pause / resume / cancel, send signal -------------------------------------------

    def control_view(self, request, object_id, action):
        if action not in CONTROLS:
            raise Http404("no such control action")
        identity = self._identity(request, "control")
        instance = self.visible_instance(request, object_id)
        if request.method == "POST":
            form = ControlForm(request.POST)
            if form.is_valid():
                try:
                    CONTROLS[action](identity=identity, instance_id=instance.id, command=dict(form.cleaned_data))
                    messages.success(request, f"Instance {action} recorded.")
                    return HttpResponseRedirect(self._instance_url(instance.id))
                except WeaveError as error:
                    _attach(form, error)
        else:
            form = ControlForm(
                initial={"expected_control_revision": request.GET.get("control_revision") or instance.control_revision}
            )
        return self._simple_form(request, instance, form, title=f"{action.capitalize()} instance")

    def signal_view(self, request, object_id):
        identity = self._identity(request, "signal")
        instance = self.visible_instance(request, object_id)
        if request.method == "POST":
            form = SignalForm(request.POST)
            if form.is_valid():
                command = {k: v for k, v in form.cleaned_data.items() if k != "idempotency_key" and v != ""}
                try:
                    signal_accept(
                        identity=identity,
                        instance_id=instance.id,
                        command=command,
                        idempotency_key=form.cleaned_data["idempotency_key"],
                    )
                    messages.success(request, "Signal accepted; the background matches it to its wait.")
                    return HttpResponseRedirect(self._instance_url(instance.id))
                except WeaveError as error:
                    _attach(form, error)
        else:
            form = SignalForm(initial={"idempotency_key": fresh_key()})
        return self._simple_form(request, instance, form, title="Send signal")

    def _simple_form(self, request, instance, form, *, title):
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"{title} — instance {instance.id}",
            "instance": instance,
            "form": form,
            "instance_url": self._instance_url(instance.id),
        }
        return TemplateResponse(request, "admin/recovery/simple_form.html", context)

    # ---- bulk actions --------------------------------------------------------------------

    @admin.action(description="Continue selected instances", permissions=["recover"])
    def continue_selected(self, request, queryset):
        return self._bulk(request, queryset, operation="continue")

    @admin.action(description="Retry one step on selected instances", permissions=["recover"])
    def retry_step_selected(self, request, queryset):
        return self._bulk(request, queryset, operation="retry-step")

    def _bulk(self, request, queryset, *, operation):
        identity = self._identity(request, "recover")
        spec = OPERATION_FORMS[operation]
        instances = list(queryset.select_related("definition").order_by("id")[:200])
        step_key = request.POST.get("step_key", "")
        form = BulkForm(request.POST if "apply" in request.POST else None)
        form.fields["declaration"].label = f"I declare ({spec.declaration}) for every instance below"
        form.fields["declaration"].help_text = DECLARATIONS[spec.declaration]
        steps = {}
        if operation == "retry-step" and step_key:
            steps = {s.instance_id: s for s in Step.objects.filter(instance__in=instances, key=step_key)}
        results = None
        if "apply" in request.POST and form.is_valid():
            results = [self._bulk_one(request, identity, spec, i, form.cleaned_data, step_key) for i in instances]
        step_keys = sorted({s["key"] for i in instances for s in i.definition.spec.get("steps", [])})
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": spec.title + " — selected instances",
            "operation": spec,
            "action": request.POST.get("action"),
            "rows": [(i, steps.get(i.id)) for i in instances],
            "form": form,
            "results": results,
            "step_key": step_key,
            "step_keys": step_keys,
            "needs_step": operation == "retry-step",
            "bulk_key": request.POST.get("bulk_key") or fresh_key(),
        }
        return TemplateResponse(request, "admin/recovery/bulk.html", context)

    def _bulk_one(self, request, identity, spec, instance, data, step_key) -> dict:
        """One instance of a bulk action, with the revisions the operator saw on the intermediate page."""
        post = request.POST
        command = {
            "expected_revision": post.get(f"revision_{instance.id}", ""),
            "reason": data["reason"],
            "evidence_ref": data["evidence_ref"],
            spec.declaration: True,
        }
        if spec.target == "step":
            command |= {
                "step_key": step_key,
                "activation_id": post.get(f"activation_{instance.id}", ""),
                "expected_step_revision": post.get(f"step_revision_{instance.id}", ""),
            }
        try:
            receipt = SERVICES[spec.name](
                identity=identity,
                instance_id=instance.id,
                idempotency_key=f"{post.get('bulk_key')}-{instance.id}"[:128],
                command=command,
            )
        except WeaveError as error:
            return {"instance": instance, "ok": False, "code": error.code, "message": error.message}
        return {
            "instance": instance,
            "ok": True,
            "replayed": receipt.replayed,
            "message": f"{receipt.data['state']} at revision {receipt.data['revision']}",
        }


admin.site.unregister(WorkflowInstance)
admin.site.register(WorkflowInstance, RecoveryInstanceAdmin)
