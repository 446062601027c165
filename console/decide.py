"""The decision form: what the operator established about the instance in review, stated once (kind, outcome,
reason, evidence, one declaration), previewed as the whole chain of operations it runs with what the background
does between them, and made on one confirm (``recovery.decisions``); the decision's page follows it and, under a
four-eyes policy, is where a second person approves or rejects it."""

import datetime as dt
from types import SimpleNamespace

from django import forms
from django.contrib import messages
from django.urls import reverse
from django.utils.html import format_html

from console.audit import actor_names
from console.forms import CommonFields, attach_error, fresh_key, hidden_copy, result_contract_error
from console.links import instance_label
from console.proposals import MINE_DAYS, MINE_SHOWN, QUEUE_SHOWN, AnswerForm, local_time
from console.refusals import acted_since, acted_words, refusal_attach
from core import clock, exactjson
from core.errors import Aborted, WeaveError
from core.fields import json_form_value
from core.identity import Identity, identity_of_user
from core.request_id import request_id_of
from history.models import Decision, DecisionState, InstanceState, ReviewCause, WorkflowInstance
from history.selectors.access import visible_rows
from recovery.consequences import decision_consequences
from recovery.decisions import KINDS, decision_approve, decision_make, decision_reject
from recovery.eligibility import instance_eligibility
from recovery.operations import OPERATIONS

# The kind a review cause usually calls for; the form offers it first when it is possible now.
KIND_BY_CAUSE = {
    ReviewCause.TASK_FAILED_BUDGET_LEFT: "retry",
    ReviewCause.POLL_REQUEST_FAILED: "retry",
    ReviewCause.SIGNAL_CONTRACT_VIOLATION: "rearm",
    ReviewCause.WAIT_EXPIRED: "rearm",
}
# Of the decisions of an instance, how many its page lists (the newest).
SHOWN = 5


class DecideForm(CommonFields):
    kind = forms.ChoiceField(choices=[(kind.name, kind.title) for kind in KINDS.values()], widget=forms.RadioSelect)
    conclusion = forms.ChoiceField(
        choices=[("SUCCEEDED", "SUCCEEDED"), ("FAILED", "FAILED")],
        required=False,
        help_text="How the step's work ended (only for “The work ended this way”).",
    )
    result = forms.CharField(
        strip=False,
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80, "class": "vLargeTextField"}),
        help_text=(
            "JSON, kept exactly as written: the step's result (SUCCEEDED: of the contract shown; FAILED: the failure "
            "details), or the poll's answer for “The answer is still pending”."
        ),
    )
    step_key = forms.CharField(widget=forms.HiddenInput)
    field_order = ["kind", "conclusion", "result", "reason", "evidence_ref", "declaration"]

    def __init__(self, *args, definition=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.definition = definition
        self.fields["declaration"].label = "I declare (declared)"
        self.fields["declaration"].help_text = (
            "that what I chose above is established, in the words beside it; this one declaration covers every "
            "operation of the chain."
        )

    def clean_result(self):
        text = self.cleaned_data["result"]
        if text == "":
            return text
        try:
            return json_form_value(text)
        except ValueError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc}") from None

    def clean(self):
        """The outcome the chosen kind needs, and a SUCCEEDED result judged against the step's contract, beside the
        other fields' errors."""
        data = super().clean()
        kind = KINDS.get(data.get("kind", ""))
        if kind is None:
            return data
        for name in kind.outcome:
            if self.data.get(name, "") == "" and name not in self.errors:
                self.add_error(name, f"{kind.title} needs the {name}.")
        if kind.name == "conclude" and "result" in data and data.get("conclusion") and "step_key" in data:
            problem = result_contract_error(self.definition, data["step_key"], data["conclusion"], data["result"])
            if problem:
                self.add_error("result", problem)
        return data

    def command(self) -> dict:
        """The decision's command, as the API takes it, from the valid form."""
        data = self.cleaned_data
        kind = KINDS[data["kind"]]
        command = {
            "kind": kind.name,
            "step_key": data["step_key"],
            "expected_revision": data["expected_revision"],
            "reason": data["reason"],
            "evidence_ref": data["evidence_ref"],
            "declared": True,
        }
        return command | {name: data[name] for name in kind.outcome}


def kind_choices(identity, instance: WorkflowInstance, step_key: str, chosen: str) -> list[dict]:
    """Each kind with its words, its chain, and whether it can start now (its first operation possible on the
    step, judged by the operations' own eligibility) or why not."""
    eligibility = instance_eligibility(identity=identity, instance_id=instance.id)
    on_step = eligibility["steps"].get(step_key, {})
    choices = []
    for kind in KINDS.values():
        first = [name for name in kind.operations if name != "continue"]
        why = [f"{OPERATIONS[name].title}: {on_step[name].get('reason', '')}" for name in first if name in on_step]
        possible = any(on_step.get(name, {}).get("possible") for name in first)
        choices.append(
            {
                "kind": kind,
                "chain": " → ".join(OPERATIONS[name].title for name in kind.operations),
                "possible": possible,
                "reason": "" if possible else "; ".join(why) or f"step {step_key!r} has none of its operations",
                "checked": kind.name == chosen,
                "outcome": " ".join(kind.outcome),
            }
        )
    # The kind asked for (or its cause's) when it can start; else the first that can.
    if not any(choice["checked"] and choice["possible"] for choice in choices):
        first = next((choice for choice in choices if choice["possible"]), None)
        for choice in choices:
            choice["checked"] = choice is first
    return choices


def decide_initial(request, instance: WorkflowInstance, carried: dict) -> dict:
    """The form as the link from the queue or the instance page opens it: the revision the operator saw, the
    step in review, the kind its cause calls for, this operator's reason and evidence of the review so far."""
    seen = request.GET
    return {
        "kind": seen.get("kind") or KIND_BY_CAUSE.get(instance.review_cause, "conclude"),
        "step_key": seen.get("step") or instance.review_step_key,
        "expected_revision": seen.get("revision") or str(instance.revision),
        "idempotency_key": fresh_key(),
        "conclusion": "SUCCEEDED",
        **carried,
    }


def decide_post(request, identity, instance: WorkflowInstance) -> tuple[DecideForm, object, Decision | None]:
    """A posted decision form: previewed (the chain, rolled back), or confirmed (the decision made); the form,
    the preview and the decision made (None until confirmed, or when refused)."""
    form = DecideForm(request.POST, definition=instance.definition)
    if not form.is_valid():
        return form, None, None
    command = form.command()
    try:
        if "_confirm" in request.POST:
            decision, receipt = decision_make(
                identity=identity,
                instance_id=instance.id,
                idempotency_key=form.cleaned_data["idempotency_key"],
                command=command,
                request_id=request_id_of(request),
            )
            _made(request, decision, replayed=receipt.replayed)
            return form, None, decision
        chain = decision_consequences(identity=identity, instance_id=instance.id, command=command)
        return hidden_copy(form), chain, None
    except WeaveError as error:
        refusal_attach(form, error, instance=instance, user=request.user, seen=form.cleaned_data["expected_revision"])
        return form, None, None


def decide_decided(request, instance: WorkflowInstance, seen: str):
    """Why the form is not offered: someone decided since the page the link was read from, and the instance is
    no longer in review; None while it is."""
    if instance.state == InstanceState.NEEDS_REVIEW:
        return None
    acted = acted_since(instance, seen)
    if acted is not None:
        return acted_words(acted, user=request.user, instance=instance, outcome="so this form is not offered again.")
    return f"The instance is {instance.state}, not in review: there is nothing to decide."


def _made(request, decision: Decision, *, replayed: bool) -> None:
    kind = KINDS[decision.kind].title
    if replayed:
        messages.warning(request, f"“{kind}” was already decided with this form (same key): nothing ran twice.")
    elif decision.state == DecisionState.PROPOSED:
        messages.info(
            request,
            f"“{kind}” needs a second person's approval here: it is proposed until {local_time(decision.expires_at)}; "
            "nothing ran yet.",
        )
    elif decision.state == DecisionState.REFUSED:
        refusal = decision.refusal
        messages.error(request, f"“{kind}” stopped at {_refused_at(decision)}: {refusal['code']}: {refusal['message']}")
    else:
        messages.success(request, f"“{kind}” decided: {_progress(decision)}")


def _answerer(decision: Decision, names: dict) -> str:
    """Who approved or rejected the decision (their login where known); blank while nobody has."""
    by = (decision.approval or {}).get("by", "")
    return names.get((decision.namespace_id, by)) or by


def _refused_at(decision: Decision) -> str:
    """The step a refused decision stopped at, in words."""
    operation = decision.refusal["operation"]
    return OPERATIONS[operation].title if operation else "its first step"


def _progress(decision: Decision) -> str:
    """Where the decision stands, in words."""
    ran = ", ".join(OPERATIONS[step["operation"]].title for step in decision.steps) or "nothing yet"
    if decision.state == DecisionState.SUCCEEDED:
        return f"done ({ran}); the review is lifted."
    if decision.state == DecisionState.RUNNING:
        return f"ran {ran}; next when the background has taken in the last step ({decision.waiting or 'now'})."
    return f"{decision.state.lower()}; ran {ran}."


def decision_rows(instance: WorkflowInstance) -> list[dict]:
    """The instance's newest decisions with where each stands and its page, for the instance page."""
    decisions = Decision.objects.filter(workflow_id=instance.id).order_by("-created_at", "-id")[:SHOWN]
    return _described(list(decisions), {instance.id: instance})


def queue_decisions(identity: Identity) -> list[dict]:
    """The decisions of every instance the operator may see that wait for a second person, oldest first."""
    waiting = Decision.objects.filter(state=DecisionState.PROPOSED, expires_at__gt=clock.now())
    return _with_instances(list(visible_rows(waiting, identity).order_by("expires_at", "id")[:QUEUE_SHOWN]))


def my_decisions(identity: Identity) -> list[dict]:
    """The operator's own decisions of the last MINE_DAYS days, newest first, each with where it stands."""
    since = clock.now() - dt.timedelta(days=MINE_DAYS)
    own = Decision.objects.filter(actor_id=identity.actor_id, created_at__gte=since)
    return _with_instances(list(visible_rows(own, identity).order_by("-created_at", "-id")[:MINE_SHOWN]))


def _with_instances(decisions: list[Decision]) -> list[dict]:
    instances = WorkflowInstance.objects.filter(pk__in={d.workflow_id for d in decisions}).select_related("definition")
    return _described(decisions, {instance.id: instance for instance in instances})


def _described(decisions: list[Decision], instances: dict[str, WorkflowInstance]) -> list[dict]:
    """Each decision with its kind's words, its maker's login, where it stands, its instance and its page."""
    answered = [d for d in decisions if d.approval]
    answerers = [SimpleNamespace(namespace_id=d.namespace_id, actor_id=d.approval["by"]) for d in answered]
    names = actor_names([*decisions, *answerers])
    return [
        {
            "decision": decision,
            "title": KINDS[decision.kind].title,
            "maker": names.get((decision.namespace_id, decision.actor_id)) or decision.actor_id,
            "answered_by": _answerer(decision, names),
            "progress": _progress(decision),
            "instance_label": instance_label(instances[decision.workflow_id]),
            "url": reverse("admin:history_workflowinstance_decision", args=[decision.workflow_id, decision.id]),
        }
        for decision in decisions
    ]


def decision_answer(request, identity, instance: WorkflowInstance, decision: Decision) -> AnswerForm | None:
    """Approve or reject a proposed decision; None when done (the message says how it went), else the form with
    the refusal."""
    form = AnswerForm(request.POST)
    if not form.is_valid():
        return form
    approve, command = form.answer(request)
    try:
        answered, _ = (decision_approve if approve else decision_reject)(
            identity=identity,
            instance_id=instance.id,
            decision_id=decision.id,
            idempotency_key=form.cleaned_data["idempotency_key"],
            command=command,
            request_id=request_id_of(request),
        )
    except WeaveError as error:
        attach_error(form, error)
        if isinstance(error, Aborted):
            form.add_error(None, "Nothing ran: the decision's maker decides again on what the page shows now.")
        return form
    kind = KINDS[answered.kind].title
    done = f"“{kind}” approved: {_progress(answered)}" if approve else f"“{kind}” rejected: nothing of it ran."
    following = next((d for d in queue_decisions(identity) if d["decision"].actor_id != identity.actor_id), None)
    if following is not None:
        done = format_html(
            '{} Next decision awaiting approval: <a href="{}" id="next-decision">{} — {}</a>',
            done,
            following["url"],
            following["title"],
            following["instance_label"],
        )
    messages.success(request, done)
    return None


def decision_page(request, instance: WorkflowInstance, decision: Decision) -> dict:
    """The decision page's context: what was decided, by whom, where it stands; a proposed one's chain as it
    would run now (or the refusal approving it would meet)."""
    identity = identity_of_user(request.user)
    command = exactjson.loads(decision.command)
    chain, now_refused = None, None
    if decision.state == DecisionState.PROPOSED and identity is not None:
        try:
            chain = decision_consequences(identity=identity, instance_id=instance.id, command=command)
        except WeaveError as error:
            now_refused = f"{error.code}: {error.message}"
    row = _described([decision], {instance.id: instance})[0]
    return {
        "decision": decision,
        "kind": KINDS[decision.kind],
        "maker": row["maker"],
        "answered_by": row["answered_by"],
        "progress": row["progress"],
        "steps": [step | {"title": OPERATIONS[step["operation"]].title} for step in decision.steps],
        "refused_at": _refused_at(decision) if decision.refusal else "",
        "command": sorted((name, exactjson.dumps(value)) for name, value in command.items()),
        "chain": chain,
        "now_refused": now_refused,
        "own": identity is not None and identity.actor_id == decision.actor_id,
    }
