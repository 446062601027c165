"""The instance page's "Attention and notes" box and its three POST-only actions: acknowledge, assign, note.

The box shows who acknowledged the current review and when, who is assigned, and the newest notes (a
correction beside the note it corrects). Each action calls one service of ``history.annotations``, which
decides everything, then redirects back to the page with a message; a refusal names its field there.
"""

from types import SimpleNamespace

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Subquery
from django.http import HttpResponseNotAllowed, HttpResponseRedirect

from console.admins.base import PERMISSIONS as OPERATOR_PERMISSIONS
from console.audit import actor_names
from console.forms import fresh_key
from core import limits
from core.errors import InvalidArgument, WeaveError
from core.identity import Identity, identity_of_user, queue_set
from core.request_id import request_id_of
from history.annotations import note_add, review_acknowledge, review_assign
from history.models import InstanceState, Note, Operator, ReviewAttention, WorkflowInstance
from history.selectors.access import definition_visible
from history.selectors.annotations import instance_notes, note_counts, review_attention_of

ACTIONS = ("acknowledge", "assign", "note")
# Either permission is enough, as either scope is for the API.
PERMISSIONS = ("history.annotate_workflowinstance", "history.recover_workflowinstance")
# The page shows the newest notes; the API lists them all.
NOTES_SHOWN = 50


class NoteForm(forms.Form):
    text = forms.CharField(
        max_length=limits.MAX_NOTE_TEXT,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text=f"What you found or did: 1 to {limits.MAX_NOTE_TEXT} characters. Notes are never edited.",
    )
    evidence_ref = forms.CharField(
        max_length=limits.MAX_EVIDENCE_REF, required=False, strip=False, help_text="e.g. ticket:OPS-123 (no spaces)"
    )
    # The list offers the newest notes; the service decides whether the id is a note of this instance.
    corrects = forms.CharField(required=False, widget=forms.Select, help_text="the note this one corrects, if any")
    idempotency_key = forms.CharField(widget=forms.HiddenInput, max_length=limits.MAX_IDEMPOTENCY_KEY)

    def __init__(self, *args, notes=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["corrects"].widget.choices = [("", "nothing: a new note")] + [
            (note.id, f"{note.created_at:%Y-%m-%d %H:%M} — {note.text[:60]}") for note in notes
        ]


class AssignForm(forms.Form):
    assignee = forms.ChoiceField(required=False)

    def __init__(self, *args, operators=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["assignee"].choices = [("", "unassigned"), *operators]


def may_annotate(user) -> bool:
    return any(user.has_perm(permission) for permission in PERMISSIONS)


def _assignable(instance: WorkflowInstance) -> list[tuple[str, str]]:
    """(actor id, login name), by name, of the logins that could recover the instance: active staff holding the
    recover permission, acting as an operator of its namespace whose queues cover its definition's (as for any
    caller, ``definition_visible``). Viewers and auditors are not among them. One query."""
    recoverers = get_user_model().objects.with_perm(
        OPERATOR_PERMISSIONS["recover"], backend="django.contrib.auth.backends.ModelBackend"
    )
    rows = (
        Operator.objects.filter(namespace_id=instance.namespace_id, user__in=recoverers.filter(is_staff=True))
        .select_related("user")
        .order_by("user__username")
    )
    return [
        (row.actor_id, row.user.username)
        for row in rows
        if definition_visible(identity=_queues_of(row), definition=instance.definition)
    ]


def _queues_of(operator: Operator) -> Identity:
    """The operator's reach over queues, as the identity it acts under has it (no scopes: only queues are asked)."""
    return Identity(
        namespace_id=operator.namespace_id,
        actor_id=operator.actor_id,
        scopes=frozenset(),
        queues=queue_set(operator.queue_access),
    )


def attention_context(request, instance: WorkflowInstance) -> dict:
    """What the box shows: the current review's attention, the newest notes, and the forms when the user may act."""
    attention = review_attention_of([instance]).get(instance.id)
    notes = list(instance_notes(instance).order_by("-created_at", "-id")[:NOTES_SHOWN])
    shown = {note.id: note for note in notes}
    missing = {note.corrects_id for note in notes if note.corrects_id and note.corrects_id not in shown}
    corrected = shown | ({note.id: note for note in Note.objects.filter(pk__in=missing)} if missing else {})
    actors = {note.author for note in notes}
    if attention is not None:
        actors |= {attention.acknowledged_by, attention.assignee, attention.assigned_by} - {""}
    names = actor_names(SimpleNamespace(namespace_id=instance.namespace_id, actor_id=actor) for actor in actors)

    def name(actor: str) -> str:
        return names.get((instance.namespace_id, actor), actor)

    for note in notes:
        note.author_name = name(note.author)
        note.corrected = corrected.get(note.corrects_id)
    may = may_annotate(request.user)
    in_review = instance.state == InstanceState.NEEDS_REVIEW and instance.review_since is not None
    context = {
        "current": attention,
        "acknowledged_by": name(attention.acknowledged_by) if attention and attention.acknowledged_by else "",
        "assignee": name(attention.assignee) if attention and attention.assignee else "",
        "assigned_by": name(attention.assigned_by) if attention and attention.assigned_by else "",
        "notes": notes,
        "more_notes": len(notes) == NOTES_SHOWN,
        "in_review": in_review,
        "may_annotate": may,
    }
    if may:
        context["note_form"] = NoteForm(initial={"idempotency_key": fresh_key()}, notes=notes)
        if in_review:
            chosen = attention.assignee if attention else ""
            context["assign_form"] = AssignForm(initial={"assignee": chosen}, operators=_assignable(instance))
    return context


def attention_post(request, instance: WorkflowInstance, action: str, *, back: str):
    """Acknowledge, assign or note from the instance page, then back to it with what happened."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    identity = identity_of_user(request.user)
    if identity is None or not may_annotate(request.user):
        raise PermissionDenied
    request_id = request_id_of(request)
    try:
        if action == "acknowledge":
            earlier = review_attention_of([instance]).get(instance.id)
            review_acknowledge(identity=identity, instance_id=instance.id, request_id=request_id)
            already = earlier is not None and earlier.acknowledged_by
            messages.success(
                request, "The review was already acknowledged: nothing changed." if already else "Review acknowledged."
            )
        elif action == "assign":
            # Only a login that could recover the instance is a choice: any other is refused naming the field.
            form = AssignForm(request.POST, operators=_assignable(instance))
            _valid(form)
            assignee = form.cleaned_data["assignee"]
            review_assign(identity=identity, instance_id=instance.id, assignee=assignee, request_id=request_id)
            messages.success(request, "Review assigned." if assignee else "Review unassigned.")
        else:
            _note(request, identity, instance, request_id)
    except WeaveError as error:
        messages.error(request, f"{error.field}: {error.message}" if error.field else error.message)
    return HttpResponseRedirect(f"{back}#attention")


def _note(request, identity, instance: WorkflowInstance, request_id: str) -> None:
    form = NoteForm(request.POST)
    _valid(form)
    data = form.cleaned_data
    command = {"text": data["text"]} | {k: data[k] for k in ("evidence_ref", "corrects") if data[k]}
    receipt = note_add(
        identity=identity,
        instance_id=instance.id,
        command=command,
        idempotency_key=data["idempotency_key"],
        request_id=request_id,
    )
    messages.success(
        request, "This note was already added: nothing was added twice." if receipt.replayed else "Note added."
    )


def _valid(form: forms.Form) -> None:
    """A form error as the services' refusal naming its field."""
    if not form.is_valid():
        field, errors = next(iter(form.errors.items()))
        raise InvalidArgument(" ".join(errors), field=None if field == "__all__" else field)


def queue_attention(rows, namespace_id: str) -> None:
    """Set on each review queue row who acknowledged it and who is assigned (login names, else the actor id's
    start) and how many notes it has: two queries for the whole queue."""
    instances = [row.instance for row in rows]

    def login(field: str) -> Subquery:
        operator = Operator.objects.filter(namespace_id=namespace_id, actor_id=OuterRef(field))
        return Subquery(operator.values("user__username")[:1])

    named = ReviewAttention.objects.annotate(
        acknowledged_name=login("acknowledged_by"), assignee_name=login("assignee")
    )
    attention = review_attention_of(instances, rows=named)
    counts = note_counts(instances)
    for row in rows:
        current = attention.get(row.instance.id)
        if current is not None:
            row.acknowledged_by = current.acknowledged_by and (current.acknowledged_name or current.acknowledged_by[:8])
            row.assignee = current.assignee and (current.assignee_name or current.assignee[:8])
        row.notes = counts.get(row.instance.id, 0)
