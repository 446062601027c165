"""The operator console: the engine's tables read-only, the instance page, and the operator's forms.

The recovery, control and signal forms and the bulk actions are per-object admin views added by
``get_urls()``, wrapped in ``admin_view``, modelled on Django's ``UserAdmin.user_change_password``:
they check the permission server side, render a form and, on success, message and redirect.
Nothing here writes a table: every change goes through the recovery and engine services, which
enforce every rule.
"""

import dataclasses
import datetime as dt
import functools
import json
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import (
    Http404,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    JsonResponse,
    StreamingHttpResponse,
)
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join

from console.approvals import instance_proposals, proposal_decide, proposal_of, proposal_page
from console.attention import ACTIONS as ATTENTION_ACTIONS
from console.attention import attention_context, attention_post, may_annotate
from console.audit import EXPORT_FORMATS, TimeRangeFilter, actor_names, export_lines, newest_first
from console.facts import decision_facts
from console.forms import (
    BulkForm,
    ControlForm,
    SignalForm,
    attach_error,
    declaration_label,
    form_command,
    fresh_key,
    hidden_copy,
    preview_rows,
    recovery_form_class,
)
from console.graph import step_graph_svg
from console.links import next_operation, operation_link
from console.queue import age
from console.views_saved import SavedViewForm, kept_query
from core import clock
from core.errors import Aborted, InvalidArgument, WeaveError
from core.identity import identity_of_user
from core.ids import ROOT_STEP_KEY
from core.request_id import request_id_of
from engine.instances import instance_cancel, instance_pause, instance_resume
from engine.signals import signal_accept
from engine.state import FINISHED
from history import models
from history.events import KINDS
from history.selectors.access import INSTANCE_NOT_FOUND, visible_rows
from history.selectors.events import event_filters, sequence_parse
from history.selectors.instance_page import NEWEST_FIRST, instance_page
from history.selectors.instances import task_attempts
from recovery.consequences import operation_consequences
from recovery.eligibility import instance_eligibility, operation_preview
from recovery.operations import OPERATIONS
from recovery.pipeline import PROPOSED

PERMISSIONS = {
    "recover": "history.recover_workflowinstance",
    "control": "history.control_workflowinstance",
    "signal": "history.signal_workflowinstance",
}
CONTROLS = {"pause": instance_pause, "resume": instance_resume, "cancel": instance_cancel}


# The admin page of each timeline subject; an audit's depends on which audit it is.
SUBJECT_ADMIN = {
    "instance": "workflowinstance",
    "step": "step",
    "activation": "activation",
    "task": "task",
    "attempt": "attempt",
    "wait": "wait",
    "signal": "signal",
    "inbox": "inboxrecord",
    "result": "resultevent",
}
AUDIT_ADMIN = {
    "workflow_operation": "workflowoperation",
    "execution_audit": "executionaudit",
    "signal_operation": "signaloperation",
}


def timeline_query(request):
    """The timeline's filters and page (``before``: a sequence) from the page's GET parameters.

    A bad value is dropped with a message: the page still shows, from the newest event, unfiltered.
    """
    query = request.GET
    try:
        filters = event_filters(kinds=[k for k in query.getlist("kind") if k], step_key=query.get("step") or None)
        before = sequence_parse(query["before"], field="before") if "before" in query else None
    except InvalidArgument as error:
        messages.error(request, f"Timeline filter ignored: {error.message}")
        return NEWEST_FIRST, None
    return dataclasses.replace(filters, descending=True), before


def timeline_subject_url(event, *, with_audit: bool) -> str | None:
    """The admin page of an event's subject, where there is one the user may open."""
    name = SUBJECT_ADMIN.get(event.subject_type)
    if event.subject_type == "audit":
        name = AUDIT_ADMIN.get(event.audit_record) if with_audit else None
    return reverse(f"admin:history_{name}_change", args=[event.subject_id]) if name else None


class CappedCountPaginator(Paginator):
    """Counts at most CAP rows, so a changelist over millions of rows never scans them all."""

    CAP = 10_000

    @cached_property
    def count(self) -> int:
        # No ORDER BY inside the capped count: it would sort CAP rows just to count them.
        return self.object_list.order_by()[: self.CAP + 1].count()


class DefinitionFilter(admin.SimpleListFilter):
    """Definitions of the user's namespace: a small table, never a DISTINCT over instances."""

    title = "definition"
    parameter_name = "definition"

    def lookups(self, request, model_admin):
        rows = scoped(request, models.WorkflowDefinition.objects.order_by("name", "version"))
        return [(d.id, str(d)) for d in rows]

    def queryset(self, request, queryset):
        return queryset.filter(definition_id=self.value()) if self.value() else queryset


class QueueFilter(admin.SimpleListFilter):
    title = "queue"
    parameter_name = "queue"

    def lookups(self, request, model_admin):
        rows = scoped(request, models.Queue.objects.order_by("name"))
        return [(q.id, q.name) for q in rows]

    def queryset(self, request, queryset):
        return queryset.filter(queue_id=self.value()) if self.value() else queryset


def _ago(moment, suffix: str):
    """How long ago, with the time itself (in the viewer's zone) on hover."""
    if moment is None:
        return None
    shown = date_format(timezone.localtime(moment), "DATETIME_FORMAT")
    return format_html('<span title="{}">{}{}</span>', shown, age(clock.now() - moment), suffix)


# A bulk action handles at most this many instances, the first by id; the page says so.
BULK_CAP = 200


def _bulk_judgement(identity, spec, instance: models.WorkflowInstance, step_key: str) -> dict:
    """Whether ``spec`` is possible on the instance now and what it would change, by the commit's own checks."""
    eligibility = instance_eligibility(identity=identity, instance_id=instance.id)
    if spec.target == "instance":
        entry = eligibility[spec.name]
    else:
        entry = eligibility["steps"].get(step_key, {}).get(spec.name)
        entry = entry or {"possible": False, "reason": f"the instance has no step {step_key!r}"}
    if not entry["possible"]:
        return {"possible": False, "reason": entry["reason"], "revision": eligibility["revision"]}
    changes = [(what, before, after) for what, before, after, changed in preview_rows(entry["preview"]) if changed]
    return {"possible": True, "changes": changes, "revision": eligibility["revision"]}


def _controls(instance: models.WorkflowInstance) -> list[dict]:
    """The control actions that can succeed on the instance as read (the services refuse the others)."""
    if instance.state in FINISHED:
        return []
    actions = ["resume" if instance.paused else "pause"]
    if not instance.stop_kind:
        actions.append("cancel")
    return [
        {
            "action": action,
            "url": reverse("admin:history_workflowinstance_control", args=[instance.id, action])
            + f"?control_revision={instance.control_revision}",
        }
        for action in actions
    ]


def _background_pending(instance: models.WorkflowInstance) -> int:
    """What the background has yet to take in for the instance: inbox records to consume, continuations to
    apply, and a stop to settle (CANCELLING)."""
    records = models.InboxRecord.objects.filter(instance_id=instance.id, state=models.InboxState.PENDING)
    # PENDING continuations are few: the (state, created_at) index finds them, then the instance filters.
    continuations = models.Continuation.objects.filter(state=models.ContinuationState.PENDING, instance_id=instance.id)
    settling = 1 if instance.state == models.InstanceState.CANCELLING else 0
    return records.count() + continuations.count() + settling


def _last_decision(instance: models.WorkflowInstance, identity) -> dict:
    """The reason and evidence of this operator's latest operation on the instance since it entered review."""
    if identity is None or instance.review_since is None:
        return {}
    last = (
        models.WorkflowOperation.objects.filter(
            workflow_id=instance.id, actor_id=identity.actor_id, created_at__gte=instance.review_since
        )
        .order_by("-created_at", "-id")
        .first()
    )
    if last is None:
        return {}
    return {"reason": last.reason, "evidence_ref": last.evidence_ref, "prefilled_from": last}


def _reviewed_decision(step: models.Step) -> dict:
    """A conclusion's fields as the latest ReviewTask of the step's current activation decided them (its task's
    outcome and exact result, its reason and evidence), for the operator to confirm or edit; none without one."""
    review = (
        models.WorkflowOperation.objects.filter(
            workflow_id=step.instance_id,
            activation_id=step.current_activation_id,
            action="workflow.review_task",
            execution_audit__isnull=False,
        )
        .select_related("execution_audit__task")
        .order_by("-created_at", "-id")
        .first()
    )
    if review is None or step.current_activation_id is None:
        return {}
    task = review.execution_audit.task
    return {
        "conclusion": task.outcome,
        "result": task.result,
        "reason": review.reason,
        "evidence_ref": review.evidence_ref,
        "prefilled_from": review,
    }


def scoped(request, queryset):
    """What this admin user may see: its operator namespace and queues (a bare superuser sees all)."""
    user = request.user
    if user.is_superuser and not hasattr(user, "weave_operator"):
        return queryset
    return visible_rows(queryset, identity_of_user(user))


class ReadOnlyAdmin(admin.ModelAdmin):
    paginator = CappedCountPaginator
    show_full_result_count = False
    list_per_page = 50

    class Media:
        css = {"all": ["console/console.css"]}

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        return scoped(request, super().get_queryset(request))

    def get_list_select_related(self, request):
        # Django's default follows every foreign key recursively once list_display shows one: for
        # poll rounds a 34-table join MariaDB never finishes planning. Join only the columns shown.
        if self.list_select_related is not False:
            return self.list_select_related
        foreign_keys = {f.name for f in self.model._meta.fields if f.many_to_one}
        return tuple(name for name in self.list_display if name in foreign_keys)


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


@admin.register(models.WorkflowDefinition)
class WorkflowDefinitionAdmin(ReadOnlyAdmin):
    list_display = ("name", "version", "namespace", "created_at")
    search_fields = ("=id", "name")


@admin.register(models.WorkflowInstance)
class WorkflowInstanceAdmin(ReadOnlyAdmin):
    # Narrow enough for 1 280 px beside the filters: the id shortened (whole on hover), the flags in the state.
    list_display = (
        "instance",
        "definition",
        "business_key",
        "state_and_flags",
        "cause_of_review",
        "in_review_for",
        "updated",
    )
    list_display_links = ("instance",)
    list_filter = (
        "state",
        "review_cause",
        "paused",
        "stop_kind",
        DefinitionFilter,
        ("updated_at", admin.DateFieldListFilter),
        ("created_at", admin.DateFieldListFilter),
    )
    # Prefixes (LIKE 'x%'), each an index range: the primary key, and (namespace, business key).
    search_fields = ("^id", "^business_key")
    ordering = ("-updated_at",)
    instance_template = "admin/console/instance_page.html"
    change_list_template = "admin/console/instance_change_list.html"
    actions = ["continue_selected", "retry_step_selected"]

    # The stored code, as the API answers it (the filter lists each code's meaning), and the step it concerns.
    @admin.display(description="review cause · step", ordering="review_cause")
    def cause_of_review(self, instance) -> str:
        if not instance.review_cause:
            return None
        return " · ".join(filter(None, [instance.review_cause, instance.review_step_key]))

    @admin.display(description="instance", ordering="id")
    def instance(self, instance):
        return format_html('<code title="{}">{}…</code>', instance.id, instance.id[:8])

    @admin.display(description="state", ordering="state")
    def state_and_flags(self, instance) -> str:
        flags = [instance.state, *(["paused"] if instance.paused else [])]
        flags += [f"stop {instance.stop_kind}"] if instance.stop_kind else []
        return " · ".join(flags)

    @admin.display(description="in review for", ordering="review_since")
    def in_review_for(self, instance):
        return _ago(instance.review_since, "")

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, instance):
        return _ago(instance.updated_at, " ago")

    def changelist_view(self, request, extra_context=None):
        saving = {"save_form": SavedViewForm(user=request.user), "current_query": kept_query(request.GET)}
        return super().changelist_view(request, {**saving, **(extra_context or {})})

    def instance_context(self, request, instance) -> dict:
        """The page's data, with the operations this user may start from it."""
        user = request.user
        with_audit = user.has_perm("history.audit_workflowinstance")
        events, events_before = timeline_query(request)
        page = instance_page(instance=instance, with_audit=with_audit, events=events, events_before=events_before)
        for event in page.events.items:
            event.subject_url = timeline_subject_url(event, with_audit=with_audit)
        audits = [*page.workflow_operations, *page.execution_audits]
        names = actor_names(audits)
        for row in audits:
            row.actor_name = names.get((row.namespace_id, row.actor_id), "")
        states = {view.step.key: view.step.state for view in page.steps}
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Instance {instance.id}",
            "page": page,
            "graph": step_graph_svg(instance.definition.spec.get("steps", []), states),
            "with_audit": with_audit,
            "controls": _controls(instance) if user.has_perm(PERMISSIONS["control"]) else [],
            "can_signal": user.has_perm(PERMISSIONS["signal"]),
            "timeline": self._timeline_context(page, events, events_before),
            "facts": decision_facts(page),
            # Records the background has not consumed yet: the page follows it until they are.
            "pending": _background_pending(instance),
            "proposals": instance_proposals(instance),
            # Acknowledgement, assignment and notes: never the engine's state.
            "attention": attention_context(request, instance),
        }
        identity = identity_of_user(user)
        if not self.has_recover_permission(request) or identity is None:
            return context
        eligibility = instance_eligibility(identity=identity, instance_id=instance.id)
        tasks = {t.id: t for view in page.steps for a in view.activations for t in a.tasks}
        for view in page.steps:
            view.operations = [
                operation_link(instance, view.step, name, entry, tasks)
                for name, entry in eligibility["steps"].get(view.step.key, {}).items()
                if not OPERATIONS[name].step_kinds or view.step.kind in OPERATIONS[name].step_kinds
            ]
        context["instance_operations"] = [
            operation_link(instance, None, op.name, eligibility[op.name], tasks)
            for op in OPERATIONS.values()
            if op.target == "instance"
        ]
        context["next_operation"] = next_operation(
            instance, eligibility, {v.step.key: v.step for v in page.steps}, tasks
        )
        return context

    @staticmethod
    def _timeline_context(page, events, events_before: int | None) -> dict:
        """The filter form's choices and the link to the next (older) page, keeping the filters."""
        kept = {"step": events.step_key, "kind": list(events.kinds)}
        kept = {name: value for name, value in kept.items() if value}
        older = None
        if page.events.next_key is not None:
            older = "?" + urlencode(kept | {"before": page.events.next_key[0]}, doseq=True) + "#timeline"
        return {
            "steps": [view.step.key for view in page.steps] + [ROOT_STEP_KEY],
            "kinds": KINDS,
            "step": events.step_key,
            "kind": events.kinds[0] if len(events.kinds) == 1 else "",
            "older": older,
            "newest": None if events_before is None else "?" + urlencode(kept, doseq=True) + "#timeline",
        }

    def visible_instance(self, request, object_id) -> models.WorkflowInstance:
        """The instance if this user may see it (the API's visibility rule), else 404 with the API's message."""
        instance = self.get_queryset(request).select_related("definition").filter(pk=object_id).first()
        if instance is None:
            raise Http404(INSTANCE_NOT_FOUND)
        return instance

    def change_view(self, request, object_id, form_url="", extra_context=None):
        if not self.has_view_permission(request):
            raise PermissionDenied
        instance = self.visible_instance(request, object_id)
        return TemplateResponse(request, self.instance_template, self.instance_context(request, instance))

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
            path("<str:object_id>/status/", view(self.status_view), name="history_workflowinstance_status"),
            path(
                "<str:object_id>/proposals/<str:proposal_id>/",
                view(self.proposal_view),
                name="history_workflowinstance_proposal",
            ),
            path(
                "<str:object_id>/attention/<str:action>/",
                view(self.attention_view),
                name="history_workflowinstance_attention",
            ),
            *super().get_urls(),
        ]

    def attention_view(self, request, object_id, action):
        """Acknowledge, assign or note (POST only); back to the instance page with a message."""
        if action not in ATTENTION_ACTIONS:
            raise Http404("no such action")
        if request.method == "POST" and not may_annotate(request.user):
            raise PermissionDenied
        instance = self.visible_instance(request, object_id)
        return attention_post(request, instance, action, back=self._instance_url(instance.id))

    def proposal_view(self, request, object_id, proposal_id):
        """A proposal held for approval: read it, then approve or reject it (the recover permission)."""
        self._identity(request, "recover")
        instance = self.visible_instance(request, object_id)
        proposal = proposal_of(instance, proposal_id)
        form = None
        if request.method == "POST":
            form = proposal_decide(request, instance, proposal)
            if form is None:
                return HttpResponseRedirect(self._instance_url(instance.id))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Proposal — instance {instance.id}",
            "instance": instance,
            "instance_url": self._instance_url(instance.id),
            **proposal_page(request, instance, proposal),
            **({"form": form} if form is not None else {}),
        }
        return TemplateResponse(request, "admin/console/proposal.html", context)

    def status_view(self, request, object_id):
        """What the instance page polls while the background has records to consume: small, no page."""
        if request.method != "GET":
            return HttpResponseNotAllowed(["GET"])
        if not self.has_view_permission(request):
            raise PermissionDenied
        instance = self.visible_instance(request, object_id)
        return JsonResponse(
            {"state": instance.state, "revision": str(instance.revision), "pending": _background_pending(instance)}
        )

    # ---- one recovery operation: form → preview → confirm -------------------------------

    def _initial(self, request, instance, operation) -> dict:
        """Hidden fields from the page the operator looked at (the link), else the current rows; the reason
        and evidence of this operator's last decision in this review, and a ResolveStep's conclusion from the
        step's ReviewTask, for the operator to confirm or edit."""
        seen = request.GET
        initial = {"expected_revision": seen.get("revision") or str(instance.revision), "idempotency_key": fresh_key()}
        initial |= _last_decision(instance, identity_of_user(request.user))
        if operation.target == "step":
            step = models.Step.objects.filter(instance_id=instance.id, key=seen.get("step", "")).first()
            initial |= {
                "step_key": seen.get("step", ""),
                "activation_id": seen.get("activation") or (step.current_activation_id if step else ""),
                "expected_step_revision": seen.get("step_revision") or (str(step.revision) if step else ""),
            }
            if operation.with_conclusion and step is not None:
                initial |= _reviewed_decision(step)
        if operation.target == "task":
            task = models.Task.objects.filter(source_instance_id=instance.id, id=seen.get("task", "")).first()
            initial |= {
                "task_id": seen.get("task", ""),
                "expected_task_revision": seen.get("task_revision") or (str(task.revision) if task else ""),
            }
        return initial

    def recovery_view(self, request, object_id, operation):
        spec = OPERATIONS.get(operation)
        if spec is None:
            raise Http404("no such recovery operation")
        identity = self._identity(request, "recover")
        instance = self.visible_instance(request, object_id)
        form_class = recovery_form_class(spec)
        preview, consequences, conflict = None, None, False
        if request.method == "POST":
            form = form_class(request.POST)
            if form.is_valid():
                command = form_command(spec, form.cleaned_data)
                try:
                    if "_confirm" in request.POST:
                        receipt = spec.service(
                            identity=identity,
                            instance_id=instance.id,
                            idempotency_key=form.cleaned_data["idempotency_key"],
                            command=command,
                            request_id=request_id_of(request),
                        )
                        self._done(request, spec, receipt)
                        return HttpResponseRedirect(self._instance_url(instance.id))
                    preview = preview_rows(
                        operation_preview(
                            identity=identity, operation=spec.name, instance_id=instance.id, command=command
                        )
                    )
                    consequences = operation_consequences(
                        identity=identity, operation=spec.name, instance_id=instance.id, command=command
                    )
                    form = hidden_copy(form)
                except WeaveError as error:
                    conflict = isinstance(error, Aborted)
                    attach_error(form, error)
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
            "consequences": consequences,
            "conflict": conflict,
            "instance_url": self._instance_url(instance.id),
            "subject": self._subject(request.POST if request.method == "POST" else request.GET, instance),
            "prefilled_from": form.initial.get("prefilled_from"),
        }
        return TemplateResponse(request, "admin/console/operation_form.html", context)

    def _subject(self, data, instance) -> dict:
        """The step and task the decision is about, as they are now, for the operator to read."""
        step = models.Step.objects.filter(
            instance_id=instance.id, key=data.get("step_key") or data.get("step", "")
        ).first()
        task = models.Task.objects.filter(
            source_instance_id=instance.id, id=data.get("task_id") or data.get("task", "")
        ).first()
        # The task's attempts with any late evidence beside the UNKNOWN one: what its worker reported
        # after the lease was lost is what the operator verifies the outcome against.
        attempts = task_attempts(task.id) if task is not None else []
        return {"step": step, "task": task, "attempts": attempts}

    def _done(self, request, spec, receipt) -> None:
        data = receipt.data
        if receipt.status == PROPOSED:
            messages.info(
                request,
                f"{spec.title} needs a second person's approval here: it is held as proposal {data['proposal_id']} "
                f"until {data['expires_at']}; nothing was run yet.",
            )
        elif receipt.replayed:
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
                    CONTROLS[action](
                        identity=identity,
                        instance_id=instance.id,
                        command=dict(form.cleaned_data),
                        request_id=request_id_of(request),
                    )
                    messages.success(request, f"Instance {action} recorded.")
                    return HttpResponseRedirect(self._instance_url(instance.id))
                except WeaveError as error:
                    attach_error(form, error)
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
                        request_id=request_id_of(request),
                    )
                    messages.success(request, "Signal accepted; the background matches it to its wait.")
                    return HttpResponseRedirect(self._instance_url(instance.id))
                except WeaveError as error:
                    attach_error(form, error)
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
        return TemplateResponse(request, "admin/console/simple_form.html", context)

    # ---- bulk actions --------------------------------------------------------------------

    @admin.action(description="Continue selected instances", permissions=["recover"])
    def continue_selected(self, request, queryset):
        return self._bulk(request, queryset, operation="continue")

    @admin.action(description="Retry one step on selected instances", permissions=["recover"])
    def retry_step_selected(self, request, queryset):
        return self._bulk(request, queryset, operation="retry-step")

    def _bulk(self, request, queryset, *, operation):
        identity = self._identity(request, "recover")
        spec = OPERATIONS[operation]
        # Counted only up to one past the cap: "select all" over a million rows stays one bounded read.
        selected = queryset.order_by()[: BULK_CAP + 1].count()
        instances = list(queryset.select_related("definition").order_by("id")[:BULK_CAP])
        step_key = request.POST.get("step_key", "")
        form = BulkForm(request.POST if "apply" in request.POST else None)
        declaration_label(form.fields["declaration"], spec, " for every eligible instance below")
        steps = {}
        if spec.target == "step" and step_key:
            steps = {s.instance_id: s for s in models.Step.objects.filter(instance__in=instances, key=step_key)}
        results = None
        if "apply" in request.POST and form.is_valid():
            results = [self._bulk_one(request, identity, spec, i, form.cleaned_data, step_key) for i in instances]
        judged = {}
        if results is None and (spec.target != "step" or step_key):
            judged = {i.id: _bulk_judgement(identity, spec, i, step_key) for i in instances}
        step_keys = sorted({s["key"] for i in instances for s in i.definition.spec.get("steps", [])})
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": spec.title + " — selected instances",
            "operation": spec,
            "action": request.POST.get("action"),
            "rows": [(i, steps.get(i.id), judged.get(i.id)) for i in instances],
            "eligible": sum(1 for j in judged.values() if j["possible"]),
            "selected": selected,
            "cap": BULK_CAP,
            "form": form,
            "results": results,
            "step_key": step_key,
            "step_keys": step_keys,
            "needs_step": spec.target == "step",
            "bulk_key": request.POST.get("bulk_key") or fresh_key(),
        }
        return TemplateResponse(request, "admin/console/bulk.html", context)

    def _bulk_one(self, request, identity, spec, instance, data, step_key) -> dict:
        """One instance of a bulk action, with the revisions the operator saw on the intermediate page."""
        post = request.POST
        if post.get(f"eligible_{instance.id}") != "1":
            return {"instance": instance, "ok": False, "skipped": True, "message": "not eligible when previewed"}
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
            receipt = spec.service(
                identity=identity,
                instance_id=instance.id,
                idempotency_key=f"{post.get('bulk_key')}-{instance.id}"[:128],
                command=command,
                request_id=request_id_of(request),
            )
        except WeaveError as error:
            return {"instance": instance, "ok": False, "code": error.code, "message": error.message}
        return {
            "instance": instance,
            "ok": True,
            "replayed": receipt.replayed,
            "message": f"{receipt.data['state']} at revision {receipt.data['revision']}",
        }


@admin.register(models.Gate)
class GateAdmin(ReadOnlyAdmin):
    list_display = ("instance", "open", "revision")
    list_filter = ("open",)
    search_fields = ("=instance__id",)


@admin.register(models.Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ("key", "instance", "kind", "state", "revision", "updated_at")
    list_filter = ("kind", "state")
    search_fields = ("=id", "=instance__id", "key")


@admin.register(models.Activation)
class ActivationAdmin(ReadOnlyAdmin):
    list_display = ("id", "step", "sequence", "state", "revision", "created_at")
    list_filter = ("state",)
    search_fields = ("=id", "=instance__id", "=step__id")
    ordering = ("-created_at",)


@admin.register(models.Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ("id", "queue_name", "handler", "state", "attempt_count", "max_attempts", "priority", "created_at")
    # The queue's name without a join: joining the queue table makes MariaDB start from the queues
    # and sort every task.
    list_filter = ("state", QueueFilter, ("created_at", admin.DateFieldListFilter))
    search_fields = ("=id", "=business_key", "=source_instance__id")
    ordering = ("-created_at",)
    readonly_fields = ("execution_history",)

    @admin.display(description="queue")
    def queue_name(self, obj):
        return queue_name(obj.queue_id)

    @admin.display(description="attempts and late evidence")
    def execution_history(self, obj):
        """Each attempt with what its worker reported after the lease was lost, if anything."""
        return render_to_string("admin/history/task/attempts.html", {"attempts": task_attempts(obj.id)})


@functools.lru_cache(maxsize=4096)
def queue_name(queue_id: str) -> str:
    """Queue names never change, and there are few: one lookup per queue per process."""
    return models.Queue.objects.filter(id=queue_id).values_list("name", flat=True).first() or queue_id


@admin.register(models.Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ("id", "task", "number", "worker", "state", "lease_expires_at", "finished_at")
    list_filter = ("state",)
    search_fields = ("=id", "=task__id")


@admin.register(models.ResultEvent)
class ResultEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "task", "seq", "kind", "outcome", "task_revision", "created_at")
    list_filter = ("kind",)
    search_fields = ("=id", "=task__id")


@admin.register(models.InboxRecord)
class InboxRecordAdmin(ReadOnlyAdmin):
    list_display = ("id", "instance", "source_kind", "state", "disposition", "created_at", "consumed_at")
    list_filter = ("state", "source_kind", "disposition")
    search_fields = ("=id", "=instance__id", "=source_id")


@admin.register(models.PollRound)
class PollRoundAdmin(ReadOnlyAdmin):
    list_display = ("id", "activation", "round", "task", "created_at")
    search_fields = ("=id", "=activation__id", "=instance__id")


@admin.register(models.Wait)
class WaitAdmin(ReadOnlyAdmin):
    list_display = ("id", "step", "kind", "generation", "state", "deadline_at", "winner_signal")
    list_select_related = ("step",)
    list_filter = ("kind", "state")
    search_fields = ("=id", "=instance__id")


@admin.register(models.Signal)
class SignalAdmin(ReadOnlyAdmin):
    list_display = ("id", "workflow", "name", "target_step_key", "state", "disposition", "accepted_at")
    list_filter = ("state", "disposition")
    search_fields = ("=id", "=workflow__id", "name")


def before_after_table(before, after):
    """Before and after side by side, one row per key, changed keys highlighted."""
    # None is "no prior state" (an acceptance), not a value to compare.
    before_map = {} if before is None else before if isinstance(before, dict) else {"value": before}
    after_map = {} if after is None else after if isinstance(after, dict) else {"value": after}
    keys = list(dict.fromkeys([*before_map, *after_map]))

    def cell(mapping, key):
        return json.dumps(mapping[key], ensure_ascii=False, sort_keys=True) if key in mapping else "—"

    rows = format_html_join(
        "",
        '<tr class="{}"><th>{}</th><td><code>{}</code></td><td><code>{}</code></td></tr>',
        (
            (
                "changed" if cell(before_map, k) != cell(after_map, k) else "same",
                k,
                cell(before_map, k),
                cell(after_map, k),
            )
            for k in keys
        ),
    )
    return format_html(
        '<table class="weave-diff"><thead><tr><th>field</th><th>before</th><th>after</th></tr></thead>'
        "<tbody>{}</tbody></table>",
        rows,
    )


class AuditChangeList(ChangeList):
    """The page's rows, each with who its actor is (one query for the page, not one per row)."""

    def get_results(self, request):
        super().get_results(request)
        names = actor_names(self.result_list)
        for row in self.result_list:
            row.actor_name = names.get((row.namespace_id, row.actor_id), "")


class AuditAdmin(ReadOnlyAdmin):
    list_display = ("id", "action", "actor", "reason", "request_id", "created_at")
    list_filter = ("action", ("created_at", TimeRangeFilter))
    # Reason by words it contains; the other columns exact; a login's name finds its actor (see below).
    search_fields = ("=id", "=operation_id", "=actor_id", "=request_id", "reason")
    ordering = ("-created_at",)
    readonly_fields = ("actor", "before_and_after")
    exclude = ("before", "after")
    change_list_template = "admin/console/audit_change_list.html"
    # The target columns an export adds to the shared ones, per audit.
    export_columns: tuple[str, ...] = ()

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) and request.user.has_perm("history.audit_workflowinstance")

    def get_changelist(self, request, **kwargs):
        return AuditChangeList

    @admin.display(description="actor")
    def actor(self, obj):
        name = getattr(obj, "actor_name", None)
        if name is None:
            name = actor_names([obj]).get((obj.namespace_id, obj.actor_id), "")
        return format_html('{} <code class="weave-muted">{}</code>', name or "unknown actor", obj.actor_id)

    @admin.display(description="before → after")
    def before_and_after(self, obj):
        return before_after_table(obj.before, obj.after)

    def get_search_results(self, request, queryset, search_term):
        found, duplicates = super().get_search_results(request, queryset, search_term)
        logins = search_term.split()
        if logins:
            actors = scoped(request, models.Operator.objects.filter(user__username__in=logins)).values("actor_id")
            found |= queryset.filter(actor_id__in=actors)
        return found, duplicates

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}_export"
        export = path("export/<str:fmt>/", self.admin_site.admin_view(self.export_view), name=name)
        return [export, *super().get_urls()]

    def export_view(self, request, fmt):
        """The changelist's rows as its filters and search choose them, all of them, streamed newest first."""
        if fmt not in EXPORT_FORMATS:
            raise Http404("export formats: csv, jsonl")
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters:
            return HttpResponseBadRequest("a filter of this list is not valid; open the list to see which")
        rows = newest_first(changelist.get_queryset(request))
        names: dict = {}

        def record(row) -> dict:
            key = (row.namespace_id, row.actor_id)
            if key not in names:
                names.update(actor_names([row]))
            return {
                "id": row.id,
                "created_at": row.created_at.astimezone(dt.UTC).isoformat(),
                "action": row.action,
                "actor_id": row.actor_id,
                "actor": names.get(key, ""),
                "operation_id": row.operation_id,
                "request_id": row.request_id,
                "reason": row.reason,
                "evidence_ref": row.evidence_ref,
                **{column: getattr(row, column) for column in self.export_columns},
                "before": row.before,
                "after": row.after,
            }

        columns = ["id", "created_at", "action", "actor_id", "actor", "operation_id", "request_id", "reason"]
        columns += ["evidence_ref", *self.export_columns, "before", "after"]
        response = StreamingHttpResponse(export_lines(rows, columns, record, fmt), content_type=EXPORT_FORMATS[fmt])
        stamp = clock.now().strftime("%Y%m%dT%H%M%SZ")
        response["Content-Disposition"] = f'attachment; filename="{self.opts.model_name}-{stamp}.{fmt}"'
        return response


@admin.register(models.SignalOperation)
class SignalOperationAdmin(AuditAdmin):
    search_fields = AuditAdmin.search_fields + ("=workflow__id", "=signal__id")
    export_columns = ("workflow_id", "signal_id")


@admin.register(models.WorkflowOperation)
class WorkflowOperationAdmin(AuditAdmin):
    list_display = ("id", "action", "workflow", "step_key", "actor", "reason", "request_id", "created_at")
    search_fields = AuditAdmin.search_fields + ("=workflow__id",)
    export_columns = ("workflow_id", "step_key", "activation_id")


@admin.register(models.ExecutionAudit)
class ExecutionAuditAdmin(AuditAdmin):
    search_fields = AuditAdmin.search_fields + ("=task__id",)
    export_columns = ("task_id",)


@admin.register(models.IdempotencyReceipt)
class IdempotencyReceiptAdmin(ReadOnlyAdmin):
    list_display = ("key", "operation", "namespace", "workflow", "status_code", "created_at")
    list_select_related = ("namespace",)
    search_fields = ("=key", "=workflow__id")


class ApprovalPolicyForm(forms.ModelForm):
    """A policy of the operator's namespace: a definition name of it (or every one) and an operation (or every one)."""

    class Meta:
        model = models.ApprovalPolicy
        fields = ("definition_name", "operation", "approvals_required")

    namespace_id = ""  # set per request by ApprovalPolicyAdmin.get_form

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        namespace_id = self.instance.namespace_id = self.namespace_id
        names = models.WorkflowDefinition.objects.filter(namespace_id=namespace_id).values_list("name", flat=True)
        self.fields["definition_name"] = forms.ChoiceField(
            choices=[("", "every definition"), *((name, name) for name in sorted(set(names)))],
            required=False,
            label="Definition",
        )
        self.fields["operation"] = forms.ChoiceField(
            choices=[("", "every operation"), *((op.name, op.title) for op in OPERATIONS.values())],
            required=False,
        )

    def validate_unique(self):
        # namespace is not a form field, so the model form would leave the unique constraint unchecked.
        try:
            self.instance.validate_constraints()
        except ValidationError as error:
            self._update_errors(error)


@admin.register(models.ApprovalPolicy)
class ApprovalPolicyAdmin(admin.ModelAdmin):
    """Which recovery operations need a second person; the approvers group manages them (its permissions)."""

    list_display = ("definition_name_shown", "operation_shown", "approvals_required")
    form = ApprovalPolicyForm

    class Media:
        css = {"all": ["console/console.css"]}

    @admin.display(description="definition", ordering="definition_name")
    def definition_name_shown(self, policy) -> str:
        return policy.definition_name or "every definition"

    @admin.display(description="operation", ordering="operation")
    def operation_shown(self, policy) -> str:
        return OPERATIONS[policy.operation].title if policy.operation else "every operation"

    def get_queryset(self, request):
        return scoped(request, super().get_queryset(request))

    def get_form(self, request, obj=None, change=False, **kwargs):
        identity = identity_of_user(request.user)
        if identity is None:
            raise PermissionDenied
        form = super().get_form(request, obj, change, **kwargs)
        return type(form.__name__, (form,), {"namespace_id": identity.namespace_id})


@admin.register(models.Continuation)
class ContinuationAdmin(ReadOnlyAdmin):
    list_display = ("id", "instance", "step_key", "kind", "state", "created_at", "applied_at")
    list_filter = ("state",)
    search_fields = ("=id", "=instance__id")


@admin.register(models.Incident)
class IncidentAdmin(ReadOnlyAdmin):
    list_display = ("duty", "item_kind", "item_id", "instance", "error_class", "count", "last_seen_at", "resolved_at")
    list_filter = ("duty", ("resolved_at", admin.EmptyFieldListFilter))
    search_fields = ("=item_id", "=instance__id", "error_class")

    def get_queryset(self, request):
        # An instance's incident is seen only by those who see the instance (its definition's queues).
        instances = scoped(request, models.WorkflowInstance.objects.all()).values("id")
        return super().get_queryset(request).filter(Q(instance__isnull=True) | Q(instance_id__in=instances))
