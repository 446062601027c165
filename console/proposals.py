"""Proposals in the console (four eyes): those waiting on an instance and on the queue, and the page where a
second person reads one — its command, the preview it was proposed with, what it would do now — and
approves or rejects it. Every decision goes through ``recovery.proposals``, which decides everything.
"""

from types import SimpleNamespace

from django import forms
from django.contrib import messages
from django.http import Http404
from django.urls import reverse

from console.audit import actor_names
from console.forms import attach_error, fresh_key, preview_rows
from core import clock, exactjson, limits
from core.errors import Aborted, WeaveError
from core.identity import Identity, identity_of_user
from core.request_id import request_id_of
from history.models import Proposal, ProposalState, WorkflowInstance
from history.selectors.access import visible_rows
from recovery.consequences import operation_consequences
from recovery.operations import OPERATIONS
from recovery.proposals import proposal_approve, proposal_reject

# The queue lists the proposals waiting longest first, up to this many.
QUEUE_SHOWN = 25


class DecisionForm(forms.Form):
    reason = forms.CharField(
        max_length=limits.MAX_REASON,
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        help_text="Approve: an optional note. Reject: required, why it must not run.",
    )
    idempotency_key = forms.CharField(widget=forms.HiddenInput, max_length=limits.MAX_IDEMPOTENCY_KEY)


def _pending(queryset):
    return queryset.filter(state=ProposalState.PENDING, expires_at__gt=clock.now())


def _described(proposals: list[Proposal], instance_revisions: dict[str, int]) -> list[SimpleNamespace]:
    """Each proposal with its operation's title, its proposer's login and whether the instance moved since."""
    names = actor_names(SimpleNamespace(namespace_id=p.namespace_id, actor_id=p.proposed_by) for p in proposals)
    return [
        SimpleNamespace(
            proposal=p,
            title=OPERATIONS[p.operation].title,
            proposer=names.get((p.namespace_id, p.proposed_by), p.proposed_by),
            stale=instance_revisions.get(p.workflow_id, p.expected_revision) != p.expected_revision,
            url=reverse("admin:history_workflowinstance_proposal", args=[p.workflow_id, p.id]),
        )
        for p in proposals
    ]


def instance_proposals(instance: WorkflowInstance) -> list[SimpleNamespace]:
    """The instance's proposals still waiting for a second person, oldest first."""
    proposals = list(_pending(Proposal.objects.filter(workflow_id=instance.id)).order_by("created_at"))
    return _described(proposals, {instance.id: instance.revision})


def queue_proposals(identity: Identity) -> list[SimpleNamespace]:
    """The proposals of every instance the operator may see that wait for a second person, oldest first."""
    proposals = list(_pending(visible_rows(Proposal.objects.all(), identity)).order_by("created_at")[:QUEUE_SHOWN])
    revisions = dict(
        WorkflowInstance.objects.filter(pk__in={p.workflow_id for p in proposals}).values_list("id", "revision")
    )
    return _described(proposals, revisions)


def proposal_of(instance: WorkflowInstance, proposal_id: str) -> Proposal:
    proposal = Proposal.objects.filter(pk=proposal_id, workflow_id=instance.id).first()
    if proposal is None:
        raise Http404("no such proposal of this instance")
    return proposal


def proposal_page(request, instance: WorkflowInstance, proposal: Proposal) -> dict:
    """The proposal page's context: what was proposed, by whom, and what it would change now."""
    identity = identity_of_user(request.user)
    command = exactjson.loads(proposal.command)
    now_refused, consequences = None, None
    if proposal.state == ProposalState.PENDING:
        try:
            consequences = operation_consequences(
                identity=identity, operation=proposal.operation, instance_id=instance.id, command=command
            )
        except WeaveError as error:
            now_refused = f"{error.code}: {error.message}"
    return {
        "proposal": _described([proposal], {instance.id: instance.revision})[0],
        "command": sorted((name, exactjson.dumps(value)) for name, value in command.items()),
        "preview": preview_rows(proposal.preview),
        "consequences": consequences,
        "now_refused": now_refused,
        "own": identity is not None and identity.actor_id == proposal.proposed_by,
        "form": DecisionForm(initial={"idempotency_key": fresh_key()}),
    }


def proposal_decide(request, instance: WorkflowInstance, proposal: Proposal) -> DecisionForm | None:
    """Approve or reject (the submit button's name says which); None once done (a message says what happened),
    else the form with the refusal on it."""
    form = DecisionForm(request.POST)
    if not form.is_valid():
        return form
    approve = "_approve" in request.POST
    command = {"reason": form.cleaned_data["reason"]} if form.cleaned_data["reason"] or not approve else {}
    try:
        receipt = (proposal_approve if approve else proposal_reject)(
            identity=identity_of_user(request.user),
            instance_id=instance.id,
            proposal_id=proposal.id,
            idempotency_key=form.cleaned_data["idempotency_key"],
            command=command,
            request_id=request_id_of(request),
        )
    except WeaveError as error:
        if isinstance(error, Aborted):
            error = Aborted(f"{error.message}. Nothing was written; the proposer can submit it again.")
        attach_error(form, error)
        return form
    title = OPERATIONS[proposal.operation].title
    if approve:
        messages.success(
            request,
            f"{title} approved and applied: instance {receipt.data['state']}, revision {receipt.data['revision']}.",
        )
    else:
        messages.success(request, f"{title} rejected: nothing was run.")
    return None
