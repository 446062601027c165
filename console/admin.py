"""The operator console's instance admin: the list of instances and the instance page, and the operator's
forms on it; importing ``console.admins`` registers every other table, under the site's headings.

The recovery, control, signal, proposal and attention forms are per-object admin views added by ``get_urls()``,
wrapped in ``admin_view``, modelled on Django's ``UserAdmin.user_change_password``: they check the permission
server side, render a form and, on success, message and redirect. The bulk actions are in
``console/actions.py``. Nothing here writes a table: every change goes through the recovery and engine services,
which enforce every rule.
"""

import dataclasses
import datetime as dt
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html

# Imported for their registrations: every table but the instances, under the site's headings.
import console.admins.access  # noqa: F401
import console.admins.audit  # noqa: F401
import console.admins.notifications  # noqa: F401
import console.admins.records  # noqa: F401
import console.admins.work  # noqa: F401
from console import actions as bulk_actions
from console.admins.base import PERMISSIONS, ReadOnlyAdmin, operator_identity
from console.admins.campaigns import campaign_from_selection
from console.admins.cases import case_from_selection
from console.attention import ACTIONS as ATTENTION_ACTIONS
from console.attention import attention_context, attention_post, may_annotate
from console.audit import actor_names
from console.controls import control_effect, signal_outcome, signal_target_chosen, signal_targets, step_contract
from console.decide import (
    AnswerForm,
    DecideForm,
    decide_decided,
    decide_initial,
    decide_post,
    decision_answer,
    decision_page,
    decision_rows,
    kind_choices,
)
from console.facts import decision_facts
from console.filters import DefinitionFilter
from console.forms import (
    ControlForm,
    SignalForm,
    attach_error,
    form_command,
    fresh_key,
    hidden_copy,
    preview_rows,
    recovery_form_class,
)
from console.graph import step_graph_svg
from console.links import copy_button, decide_link, instance_label, instance_name, next_operation, operation_link
from console.proposals import instance_proposals, local_time, proposal_decide, proposal_of, proposal_page
from console.queue import age
from console.refusals import acted_since, acted_words, refusal_attach
from console.saved_views import SavedViewForm, kept_query
from core import clock
from core.errors import Aborted, InvalidArgument, WeaveError
from core.identity import identity_of_user
from core.ids import ROOT_STEP_KEY
from core.request_id import request_id_of
from engine.instances import instance_cancel, instance_pause, instance_resume
from engine.signaling import signal_accept
from engine.state import FINISHED
from history import models
from history.events import KINDS
from history.selectors.access import INSTANCE_NOT_FOUND
from history.selectors.events import event_filters, sequence_parse
from history.selectors.instance_page import NEWEST_FIRST, instance_page
from history.selectors.instances import task_attempts
from recovery.consequences import control_consequences, operation_consequences, signal_consequences
from recovery.decisions import KINDS as DECISION_KINDS
from recovery.eligibility import instance_eligibility, operation_preview
from recovery.operations import OPERATIONS
from recovery.pipeline import PROPOSED

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


def _ago(moment, suffix: str):
    """How long ago, with the time itself (in the viewer's zone) on hover."""
    if moment is None:
        return None
    shown = date_format(timezone.localtime(moment), "DATETIME_FORMAT")
    return format_html('<span title="{}">{}{}</span>', shown, age(clock.now() - moment), suffix)


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


def _following(instance: models.WorkflowInstance) -> dict:
    """What the instance page follows it by: the background's pending work, whether the instance can still move
    (unfinished; in review only while the background has work of it, a decision of it runs or a task of it runs)
    and the version the page compares with its status to know it changed."""
    pending = _background_pending(instance)
    running = models.Task.objects.filter(source_instance_id=instance.id, state=models.TaskState.LEASED)
    # An instance has a few decisions: their states tell a decision's progress that moves no revision (a refusal,
    # an approval's answer, an expiry).
    decisions = list(models.Decision.objects.filter(workflow_id=instance.id).values_list("state", flat=True))
    deciding = decisions.count(models.DecisionState.RUNNING)
    moving = instance.state not in FINISHED and (
        instance.state != models.InstanceState.NEEDS_REVIEW or pending > 0 or deciding > 0 or running.exists()
    )
    version = ".".join([str(instance.revision), str(pending), *sorted(decisions)])
    return {"pending": pending, "moving": moving, "version": version}


def _awaits(identity, instance: models.WorkflowInstance, operation, data) -> bool:
    """Whether the form's subject still awaits ``operation``: its task is in review, or the eligibility (the
    commit's own checks) finds the operation possible on its step or on the instance."""
    if operation.target == "task":
        task_id = data.get("task_id") or data.get("task", "")
        return models.Task.objects.filter(
            source_instance_id=instance.id, id=task_id, state=models.TaskState.NEEDS_REVIEW
        ).exists()
    eligibility = instance_eligibility(identity=identity, instance_id=instance.id)
    if operation.target == "instance":
        return eligibility[operation.name]["possible"]
    entry = eligibility["steps"].get(data.get("step_key") or data.get("step", ""), {}).get(operation.name)
    return bool(entry and entry["possible"])


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


def _facts(instance: models.WorkflowInstance):
    """The facts of the step in review, as the instance page shows them, for a form deciding on it."""
    return decision_facts(instance_page(instance=instance, with_audit=False, events=NEWEST_FIRST, events_before=None))


# The repairs the instance page shows, the latest first.
REPAIRS_SHOWN = 5


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
    # The instance column links its name itself, beside the id's copy button (a button inside a link is invalid).
    list_display_links = None
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
    # Each served in order by the namespace's (review_since, id) and (updated_at, id) indexes; a state or a cause
    # is a filter, whose index orders by update.
    sortable_by = ("in_review_for", "updated")
    instance_template = "admin/console/instance_page.html"
    change_list_template = "admin/console/instance_change_list.html"

    @property
    def actions(self):
        """The bulk actions' names, one per operation that has one, read from OPERATIONS when asked, a campaign
        and a case."""
        return [*bulk_actions.bulk_actions(), "campaign_from_selection", "case_from_selection"]

    def get_action(self, action):
        own = {"campaign_from_selection": campaign_from_selection, "case_from_selection": case_from_selection}
        func = {**bulk_actions.bulk_actions(), **own}.get(action)
        if func is None:
            return super().get_action(action)
        return func, action, func.short_description

    # The stored code, as the API answers it (the filter lists each code's meaning), and the step it concerns.
    @admin.display(description="review cause · step", ordering="review_cause")
    def cause_of_review(self, instance) -> str:
        if not instance.review_cause:
            return None
        return " · ".join(filter(None, [instance.review_cause, instance.review_step_key]))

    @admin.display(description="instance", ordering="id")
    def instance(self, instance):
        return instance_label(instance)

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
            "title": instance_name(instance),
            "copy_id": copy_button(instance.id, "instance id"),
            "page": page,
            "graph": step_graph_svg(instance.definition.spec.get("steps", []), states),
            "with_audit": with_audit,
            "controls": _controls(instance) if user.has_perm(PERMISSIONS["control"]) else [],
            "can_signal": user.has_perm(PERMISSIONS["signal"]),
            "timeline": self._timeline_context(page, events, events_before),
            "facts": decision_facts(page),
            # Records the background has not consumed yet, and whether the page follows the instance.
            **_following(instance),
            "proposals": instance_proposals(instance),
            "decisions": decision_rows(instance),
            "stall": models.Stall.objects.filter(instance_id=instance.id).first(),
            # Whether its latest repairs worked (recovery.repairs), the latest first.
            "repairs": models.RepairCheck.objects.filter(instance_id=instance.id).order_by("-made_at")[:REPAIRS_SHOWN],
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
        if instance.state == models.InstanceState.NEEDS_REVIEW:
            context["decide_url"] = decide_link(instance)
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
        instance = (
            self.get_queryset(request)
            .select_related("definition", "failure_signature", "root_signature")
            .filter(pk=object_id)
            .first()
        )
        if instance is None:
            raise Http404(INSTANCE_NOT_FOUND)
        return instance

    def change_view(self, request, object_id, form_url="", extra_context=None):
        if not self.has_view_permission(request):
            raise PermissionDenied
        instance = self.visible_instance(request, object_id)
        return TemplateResponse(request, self.instance_template, self.instance_context(request, instance))

    # ---- permissions -------------------------------------------------------------------

    # What the bulk actions' ``permissions=["recover"]`` asks (``console/actions.py``).
    def has_recover_permission(self, request) -> bool:
        return request.user.has_perm(PERMISSIONS["recover"])

    # What opening a case from a selection asks (``console/admins/cases.py``).
    def has_annotate_permission(self, request) -> bool:
        return may_annotate(request.user) and identity_of_user(request.user) is not None

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
            path("<str:object_id>/decide/", view(self.decide_view), name="history_workflowinstance_decide"),
            path(
                "<str:object_id>/decisions/<str:decision_id>/",
                view(self.decision_view),
                name="history_workflowinstance_decision",
            ),
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
        operator_identity(request, "recover")
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
            "title": f"Proposal — {instance_name(instance)}",
            "instance": instance,
            "facts": _facts(instance),
            "instance_url": self._instance_url(instance.id),
            **proposal_page(request, instance, proposal),
            **({"form": form} if form is not None else {}),
        }
        return TemplateResponse(request, "admin/console/proposal.html", context)

    # ---- one decision: form → preview of the whole chain → confirm; its page -----------------

    def decide_view(self, request, object_id):
        """State a decision about the instance in review once; preview its chain; make it on one confirm."""
        identity = operator_identity(request, "recover")
        instance = self.visible_instance(request, object_id)
        chain, decided = None, None
        if request.method == "POST":
            form, chain, decision = decide_post(request, identity, instance)
            if decision is not None:
                return HttpResponseRedirect(self._instance_url(instance.id) + "#decisions")
        else:
            form = DecideForm(
                initial=decide_initial(request, instance, _last_decision(instance, identity_of_user(request.user))),
                definition=instance.definition,
            )
            decided = decide_decided(request, instance, form.initial["expected_revision"])
        step_key = form.data.get("step_key") if form.is_bound else form.initial["step_key"]
        chosen = form.data.get("kind") if form.is_bound else form.initial["kind"]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Decide — {instance_name(instance)}",
            "instance": instance,
            "form": form,
            "chain": chain,
            "chosen": DECISION_KINDS.get(chosen),
            "decided": decided,
            "kinds": kind_choices(identity, instance, step_key, chosen) if chain is None and not decided else [],
            "facts": _facts(instance),
            "contract": step_contract(instance, step_key) if step_key else None,
            "step_key": step_key,
            "prefilled_from": form.initial.get("prefilled_from"),
            "instance_url": self._instance_url(instance.id),
        }
        return TemplateResponse(request, "admin/console/decide_form.html", context)

    def decision_view(self, request, object_id, decision_id):
        """A decision: where it stands, its steps and refusal; a proposed one is approved or rejected here."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        instance = self.visible_instance(request, object_id)
        decision = models.Decision.objects.filter(pk=decision_id, workflow_id=instance.id).first()
        if decision is None:
            raise Http404("decision_id: no such decision of this workflow")
        form = None
        if request.method == "POST":
            identity = operator_identity(request, "recover")
            form = decision_answer(request, identity, instance, decision)
            if form is None:
                return HttpResponseRedirect(self._instance_url(instance.id) + "#decisions")
        elif decision.state == models.DecisionState.PROPOSED and self.has_recover_permission(request):
            form = AnswerForm(initial={"idempotency_key": fresh_key()})
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Decision — {instance_name(instance)}",
            "instance": instance,
            "facts": _facts(instance) if decision.state == models.DecisionState.PROPOSED else None,
            "instance_url": self._instance_url(instance.id),
            "form": form,
            **decision_page(request, instance, decision),
        }
        return TemplateResponse(request, "admin/console/decision.html", context)

    def status_view(self, request, object_id):
        """What the instance page polls while the instance can still move: small, no page."""
        if request.method != "GET":
            return HttpResponseNotAllowed(["GET"])
        if not self.has_view_permission(request):
            raise PermissionDenied
        instance = self.visible_instance(request, object_id)
        return JsonResponse({"state": instance.state, "revision": str(instance.revision), **_following(instance)})

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
        identity = operator_identity(request, "recover")
        instance = self.visible_instance(request, object_id)
        form_class = recovery_form_class(spec)
        preview, consequences, conflict, decided = None, None, False, None
        if request.method == "POST":
            form = form_class(request.POST, definition=instance.definition)
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
                    seen = form.cleaned_data["expected_revision"]
                    acted = refusal_attach(form, error, instance=instance, user=request.user, seen=seen)
                    conflict = isinstance(error, Aborted) and acted is None
                    # Someone else took this decision: the form is not offered again.
                    if acted is not None and not _awaits(identity, instance, spec, request.POST):
                        decided = acted
        else:
            form = form_class(initial=self._initial(request, instance, spec))
            acted = acted_since(instance, form.initial["expected_revision"])
            if acted is not None and not _awaits(identity, instance, spec, request.GET):
                decided = acted_words(
                    acted, user=request.user, instance=instance, outcome="so this form is not offered again."
                )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"{spec.title} — {instance_name(instance)}",
            "instance": instance,
            "operation": spec,
            "form": form,
            "preview": preview,
            "consequences": consequences,
            "conflict": conflict,
            "decided": decided,
            "instance_url": self._instance_url(instance.id),
            "subject": self._subject(request.POST if request.method == "POST" else request.GET, instance),
            "facts": _facts(instance) if preview is None and not decided else None,
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
                f"until {local_time(dt.datetime.fromisoformat(data['expires_at']))}; nothing was run yet.",
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

    # ---- pause / resume / cancel, send signal: form → preview → confirm ------------------

    def control_view(self, request, object_id, action):
        if action not in CONTROLS:
            raise Http404("no such control action")
        identity = operator_identity(request, "control")
        instance = self.visible_instance(request, object_id)
        preview = None
        if request.method == "POST":
            form = ControlForm(request.POST)
            if form.is_valid():
                command = dict(form.cleaned_data)
                try:
                    if "_confirm" in request.POST:
                        CONTROLS[action](
                            identity=identity,
                            instance_id=instance.id,
                            command=command,
                            request_id=request_id_of(request),
                        )
                        messages.success(request, f"Instance {action} recorded.")
                        return HttpResponseRedirect(self._instance_url(instance.id))
                    preview = {
                        "effect": control_effect(action, instance),
                        "consequences": control_consequences(
                            control=CONTROLS[action], identity=identity, instance_id=instance.id, command=command
                        ),
                    }
                    form = hidden_copy(form)
                except WeaveError as error:
                    seen = form.cleaned_data["expected_control_revision"]
                    refusal_attach(
                        form, error, instance=instance, user=request.user, seen=seen, field="control_revision"
                    )
        else:
            seen = request.GET.get("control_revision") or instance.control_revision
            form = ControlForm(
                initial={"expected_control_revision": seen} | _last_decision(instance, identity_of_user(request.user))
            )
        title = f"{action.capitalize()} instance"
        return self._simple_form(request, instance, form, title=title, preview=preview, confirm=f"Confirm {action}")

    def signal_view(self, request, object_id):
        """Send a signal, its target filled in from the step's open wait (a choice when several are open) or
        the definition, its contract shown, previewed (which wait takes it, or that it is buffered) and then
        confirmed."""
        identity = operator_identity(request, "signal")
        instance = self.visible_instance(request, object_id)
        targets = signal_targets(instance)
        preview = None
        if request.method == "POST":
            form = SignalForm(request.POST)
            step_key = request.POST.get("target_step_key", "")
            if form.is_valid():
                # A blank correlation key is one (a blank business key); a blank evidence reference is none.
                data = form.cleaned_data
                command = {k: v for k, v in data.items() if k != "idempotency_key" and (v != "" or k != "evidence_ref")}
                try:
                    if "_confirm" in request.POST:
                        signal_accept(
                            identity=identity,
                            instance_id=instance.id,
                            command=command,
                            idempotency_key=data["idempotency_key"],
                            request_id=request_id_of(request),
                        )
                        messages.success(request, "Signal accepted; the background matches it to its wait.")
                        return HttpResponseRedirect(self._instance_url(instance.id))
                    disposition, consequences = signal_consequences(
                        identity=identity, instance_id=instance.id, command=command
                    )
                    preview = {"effect": signal_outcome(disposition, instance, step_key), "consequences": consequences}
                    form = hidden_copy(form)
                except WeaveError as error:
                    attach_error(form, error)
        else:
            target = signal_target_chosen(targets, request.GET)
            step_key = target.step_key if target else ""
            carried = _last_decision(instance, identity_of_user(request.user))
            form = SignalForm(
                initial={"idempotency_key": fresh_key(), **(target.initial() if target else {}), **carried}
            )
        return self._simple_form(
            request,
            instance,
            form,
            title="Send signal",
            preview=preview,
            confirm="Confirm the signal",
            targets=targets if len(targets) > 1 else [],
            target_step_key=step_key,
            contract=step_contract(instance, step_key) if step_key else None,
        )

    def _simple_form(self, request, instance, form, *, title, preview, confirm, **extra):
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"{title} — {instance_name(instance)}",
            "instance": instance,
            "form": form,
            "preview": preview,
            "confirm": confirm,
            "prefilled_from": form.initial.get("prefilled_from"),
            "instance_url": self._instance_url(instance.id),
            **extra,
        }
        return TemplateResponse(request, "admin/console/simple_form.html", context)
