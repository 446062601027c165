"""Proposals in the console (four eyes): those waiting on an instance and on the queue, the operator's own with
their outcome, and the page where a second person reads one — its command, the preview it was proposed with,
what it would do now — and approves or rejects it. Every decision goes through ``recovery.proposals``, which
decides everything.
"""

import datetime as dt
from types import SimpleNamespace

from django import forms
from django.contrib import messages
from django.http import Http404
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html

from console.audit import actor_names
from console.forms import fresh_key, preview_rows
from console.links import instance_label, instance_name
from console.refusals import refusal_attach
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
# "My proposals" on the home page: the operator's own of the last days, newest first, up to this many.
MINE_DAYS = 7
MINE_SHOWN = 10


class AnswerForm(forms.Form):
    """Approve or reject what another person proposed: a proposal or a decision."""

    reason = forms.CharField(
        max_length=limits.MAX_REASON,
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        help_text="Approve: an optional note. Reject: required, why it must not run.",
    )
    idempotency_key = forms.CharField(widget=forms.HiddenInput, max_length=limits.MAX_IDEMPOTENCY_KEY)

    def answer(self, request) -> tuple[bool, dict]:
        """Whether the valid form approves (the submit button's name says), and the command: a rejection's
        reason, an approval's note when one was given."""
        approve = "_approve" in request.POST
        reason = self.cleaned_data["reason"]
        return approve, {"reason": reason} if reason or not approve else {}


def _pending(queryset):
    return queryset.filter(state=ProposalState.PENDING, expires_at__gt=clock.now())


def local_time(moment: dt.datetime) -> str:
    """A time as the console shows it in text (a message): in the viewer's zone, by Django's date format."""
    return date_format(timezone.localtime(moment), "DATETIME_FORMAT")


def _outcome(proposal: Proposal, now: dt.datetime) -> str:
    """The proposal's state, EXPIRED once its expiry has passed even before the background closes it so."""
    if proposal.state == ProposalState.PENDING and proposal.expires_at <= now:
        return ProposalState.EXPIRED
    return proposal.state


def _described(proposals: list[Proposal], instances: dict[str, WorkflowInstance]) -> list[SimpleNamespace]:
    """Each proposal with its operation's title, its instance and that instance's name (text and linked), its
    proposer's and decider's logins, its outcome, and whether the instance moved since."""
    actors = [(p.namespace_id, actor) for p in proposals for actor in (p.proposed_by, p.decided_by) if actor]
    names = actor_names(SimpleNamespace(namespace_id=ns, actor_id=actor) for ns, actor in actors)
    now = clock.now()
    described = []
    for p in proposals:
        instance = instances.get(p.workflow_id)
        described.append(
            SimpleNamespace(
                proposal=p,
                title=OPERATIONS[p.operation].title,
                instance=instance,
                instance_name=instance_name(instance) if instance is not None else p.workflow_id,
                instance_label=instance_label(instance) if instance is not None else p.workflow_id,
                proposer=names.get((p.namespace_id, p.proposed_by), p.proposed_by),
                decider=names.get((p.namespace_id, p.decided_by), p.decided_by),
                outcome=_outcome(p, now),
                stale=instance is not None and instance.revision != p.expected_revision,
                url=reverse("admin:history_workflowinstance_proposal", args=[p.workflow_id, p.id]),
            )
        )
    return described


def _with_instances(proposals: list[Proposal]) -> list[SimpleNamespace]:
    """``_described`` with the proposals' instances and their definitions read in one query."""
    instances = WorkflowInstance.objects.filter(pk__in={p.workflow_id for p in proposals}).select_related("definition")
    return _described(proposals, {instance.id: instance for instance in instances})


def instance_proposals(instance: WorkflowInstance) -> list[SimpleNamespace]:
    """The instance's proposals still waiting for a second person, oldest first."""
    proposals = list(_pending(Proposal.objects.filter(workflow_id=instance.id)).order_by("created_at"))
    return _described(proposals, {instance.id: instance})


def queue_proposals(identity: Identity) -> list[SimpleNamespace]:
    """The proposals of every instance the operator may see that wait for a second person, oldest first."""
    proposals = _pending(visible_rows(Proposal.objects.all(), identity)).order_by("created_at", "id")
    return _with_instances(list(proposals[:QUEUE_SHOWN]))


def my_proposals(identity: Identity) -> list[SimpleNamespace]:
    """The operator's own proposals of the last MINE_DAYS days, newest first, each with its outcome."""
    since = clock.now() - dt.timedelta(days=MINE_DAYS)
    own = visible_rows(Proposal.objects.filter(proposed_by=identity.actor_id, created_at__gte=since), identity)
    return _with_instances(list(own.order_by("-created_at", "-id")[:MINE_SHOWN]))


def next_proposal(identity: Identity) -> SimpleNamespace | None:
    """The proposal waiting longest that this operator may decide: visible to them and not their own."""
    waiting = _pending(visible_rows(Proposal.objects.exclude(proposed_by=identity.actor_id), identity))
    first = waiting.order_by("created_at", "id").first()
    return _with_instances([first])[0] if first is not None else None


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
        "proposal": _described([proposal], {instance.id: instance})[0],
        "command": sorted((name, exactjson.dumps(value)) for name, value in command.items()),
        "preview": preview_rows(proposal.preview),
        "consequences": consequences,
        "now_refused": now_refused,
        "own": identity is not None and identity.actor_id == proposal.proposed_by,
        "form": AnswerForm(initial={"idempotency_key": fresh_key()}),
    }


def proposal_decide(request, instance: WorkflowInstance, proposal: Proposal) -> AnswerForm | None:
    """Approve or reject (the submit button's name says which); None once done (a message says what happened),
    else the form with the refusal on it. The message links the next proposal this person may decide, if any."""
    form = AnswerForm(request.POST)
    if not form.is_valid():
        return form
    identity = identity_of_user(request.user)
    approve, command = form.answer(request)
    try:
        receipt = (proposal_approve if approve else proposal_reject)(
            identity=identity,
            instance_id=instance.id,
            proposal_id=proposal.id,
            idempotency_key=form.cleaned_data["idempotency_key"],
            command=command,
            request_id=request_id_of(request),
        )
    except WeaveError as error:
        if isinstance(error, Aborted):
            error = Aborted(f"{error.message}. Nothing was written; the proposer can submit it again.")
        refusal_attach(form, error, instance=instance, user=request.user, seen=proposal.expected_revision)
        return form
    title = OPERATIONS[proposal.operation].title
    if approve:
        done = f"{title} approved and applied: instance {receipt.data['state']}, revision {receipt.data['revision']}."
    else:
        done = f"{title} rejected: nothing was run."
    following = next_proposal(identity)
    if following is not None:
        done = format_html(
            '{} Next proposal: <a href="{}" id="next-proposal">{} — {}</a>',
            done,
            following.url,
            following.title,
            following.instance_name,
        )
    messages.success(request, done)
    return None
