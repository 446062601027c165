"""The instance list's bulk actions, shaped like Django's ``delete_selected``: an intermediate page says what
each selected instance would change (by the commit's own checks) and re-posts the selection; applying runs the
operation once per instance through the recovery service, which enforces every rule."""

from django.contrib import admin
from django.template.response import TemplateResponse

from console.admins.base import operator_identity
from console.forms import BulkForm, declaration_label, fresh_key, preview_rows
from core.errors import WeaveError
from core.request_id import request_id_of
from history import models
from recovery.eligibility import instance_eligibility
from recovery.operations import OPERATIONS

# A bulk action handles at most this many instances, the first by id; the page says so.
BULK_CAP = 200


def bulk_actions() -> dict:
    """One admin action per operation that has one (``Operation.bulk``), in OPERATIONS' order, by the name the
    changelist posts (``retry_step_selected``)."""
    return {f"{op.name.replace('-', '_')}_selected": _bulk_action(op) for op in OPERATIONS.values() if op.bulk}


def _bulk_action(spec):
    def action(modeladmin, request, queryset):
        return _bulk(modeladmin, request, queryset, operation=spec.name)

    return admin.action(description=spec.bulk, permissions=["recover"])(action)


def _bulk(modeladmin, request, queryset, *, operation):
    identity = operator_identity(request, "recover")
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
        results = [_bulk_one(request, identity, spec, i, form.cleaned_data, step_key) for i in instances]
    judged = {}
    if results is None and (spec.target != "step" or step_key):
        judged = {i.id: _bulk_judgement(identity, spec, i, step_key) for i in instances}
    step_keys = sorted({s["key"] for i in instances for s in i.definition.spec.get("steps", [])})
    context = {
        **modeladmin.admin_site.each_context(request),
        "opts": modeladmin.model._meta,
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


def _bulk_one(request, identity, spec, instance, data, step_key) -> dict:
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
