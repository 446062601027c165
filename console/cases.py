"""Incident cases: the instances one cause stranded, opened from a failure signature or a selection, worked with
shared notes and evidence, counted "accounted for: N of M", and closed with a summary for the postmortem.

A member is accounted for once it is verified (its last repair judged effective by the runner,
``recovery.repairs``), succeeded, ended (failed or cancelled) or knowingly abandoned with a reason. A repair still
watched, one that did not work, or an instance running with no repair at all is not accounted for yet. The states
are read live from the instances and their repairs, in chunks of an index read each; the case stores only what a
person added (notes, abandonments) and, at its close, the summary, so the export of a closed case says what was
true when it closed.
"""

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from django.db import transaction

from console.audit import actor_names
from console.models import Case, CaseMember, CaseNote, CaseState
from core import clock
from core.identity import Identity
from core.times import format_time
from history.models import (
    FailureSignature,
    InstanceState,
    Operator,
    RepairCheck,
    RepairVerdict,
    Stall,
    WorkflowInstance,
    WorkflowOperation,
)
from history.selectors.access import visible_rows

# A case holds at most this many instances: a bigger fleet is more than one cause, or a campaign's.
MAX_MEMBERS = 10_000
# The summary's timeline keeps at most this many recovery and control operations (it says when it left some out).
MAX_OPERATIONS = 1_000
CHUNK = 1_000
STATUSES = (
    "in review",
    "stalled",
    "stopping",
    "running",
    "verifying",
    "ineffective",
    "verified",
    "succeeded",
    "ended",
    "abandoned",
)
ACCOUNTED = ("verified", "succeeded", "ended", "abandoned")
# A running member's status by the verdict on its last repair.
BY_VERDICT = {
    RepairVerdict.WATCHING: "verifying",
    RepairVerdict.EFFECTIVE: "verified",
    RepairVerdict.INEFFECTIVE: "ineffective",
    RepairVerdict.REGRESSED: "ineffective",
}


class CaseRefused(Exception):
    """What the case cannot do, in words for the operator."""


def case_open(
    *, identity: Identity, username: str, title: str, ticket_url: str, signature=None, instance_ids=None
) -> Case:
    """A new case of the instances in review with ``signature`` now, or of ``instance_ids``: those the identity
    may see. Refused when none is left or more than MAX_MEMBERS would be."""
    visible = visible_rows(WorkflowInstance.objects.all(), identity)
    if signature is not None:
        chosen = visible.filter(failure_signature_id=signature.pk, state=InstanceState.NEEDS_REVIEW)
    else:
        chosen = visible.filter(pk__in=list(instance_ids or ()))
    ids = list(chosen.order_by("id").values_list("id", flat=True)[: MAX_MEMBERS + 1])
    if not ids:
        raise CaseRefused("no instance you may see is in it: nothing to open a case for")
    if len(ids) > MAX_MEMBERS:
        raise CaseRefused(f"more than {MAX_MEMBERS} instances: narrow the selection, or split the cause")
    with transaction.atomic():
        case = Case.objects.create(
            namespace_id=identity.namespace_id,
            title=title,
            ticket_url=ticket_url,
            signature=signature,
            opened_by=username,
        )
        CaseMember.objects.bulk_create([CaseMember(case=case, instance_id=i) for i in ids], batch_size=CHUNK)
    return case


def _chunks(ids: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


@dataclass(frozen=True)
class Progress:
    statuses: dict[str, str]  # instance id → one of STATUSES
    counts: Counter

    @property
    def total(self) -> int:
        return len(self.statuses)

    @property
    def accounted(self) -> int:
        return sum(self.counts[status] for status in ACCOUNTED)


def case_progress(case: Case) -> Progress:
    """Each member's status now, and how many are in each."""
    members = list(case.members.values_list("instance_id", "abandoned_at"))
    statuses = {instance_id: "abandoned" for instance_id, abandoned in members if abandoned is not None}
    working = [instance_id for instance_id, abandoned in members if abandoned is None]
    for chunk in _chunks(working):
        stalled = set(Stall.objects.filter(instance_id__in=chunk).values_list("instance_id", flat=True))
        # The last repair of each, read from its (instance, made_at) index: a later one overwrites an earlier.
        checks = RepairCheck.objects.filter(instance_id__in=chunk).order_by("instance_id", "made_at", "id")
        verdicts = dict(checks.values_list("instance_id", "verdict"))
        for instance_id, state in WorkflowInstance.objects.filter(pk__in=chunk).values_list("id", "state"):
            statuses[instance_id] = _status(state, instance_id in stalled, verdicts.get(instance_id))
    return Progress(statuses, Counter(statuses.values()))


def _status(state: str, stalled: bool, verdict: str | None) -> str:
    if state == InstanceState.NEEDS_REVIEW:
        return "in review"
    if state == InstanceState.SUCCEEDED:
        return "succeeded"
    if state in (InstanceState.FAILED, InstanceState.CANCELLED):
        return "ended"
    if state == InstanceState.CANCELLING:
        return "stopping"
    if stalled:
        return "stalled"
    # Running on: accounted for once the runner judged its last repair effective.
    return BY_VERDICT[verdict] if verdict else "running"


def member_abandon(*, case: Case, instance_id: str, username: str, reason: str) -> None:
    """Give up a member knowingly: the reason is kept and the member counts as accounted for."""
    if case.state != CaseState.OPEN:
        raise CaseRefused("the case is closed")
    if not reason.strip():
        raise CaseRefused("reason: say why this instance is given up")
    changed = CaseMember.objects.filter(case=case, instance_id=instance_id, abandoned_at=None).update(
        abandoned_reason=reason.strip()[:1024], abandoned_by=username, abandoned_at=clock.now()
    )
    if not changed:
        raise CaseRefused("instance: not an instance of this case still being worked")


def case_close(*, case: Case, username: str) -> None:
    """Close the case once every member is accounted for; its summary is written then, once."""
    if case.state != CaseState.OPEN:
        raise CaseRefused("the case is already closed")
    progress = case_progress(case)
    if progress.accounted < progress.total:
        open_ = progress.total - progress.accounted
        raise CaseRefused(
            f"{open_} of {progress.total} instances are not accounted for yet"
            " (repair them and let the runner verify the repair, or abandon them)"
        )
    now = clock.now()
    with transaction.atomic():
        locked = Case.objects.select_for_update().get(pk=case.pk)
        if locked.state != CaseState.OPEN:
            raise CaseRefused("the case is already closed")
        locked.state, locked.closed_by, locked.closed_at = CaseState.CLOSED, username, now
        locked.summary = case_summary(locked, progress=progress)
        locked.save(update_fields=["state", "closed_by", "closed_at", "summary"])
    case.refresh_from_db()


def case_summary(case: Case, *, progress: Progress | None = None) -> dict:
    """The postmortem's record: the case, its counts, each member's outcome, who did what, and the timeline of
    the case's own entries and of the operations on its instances while it was open."""
    if case.summary is not None:
        return case.summary
    progress = progress or case_progress(case)
    members = list(case.members.order_by("instance_id"))
    keys = {}
    for chunk in _chunks([m.instance_id for m in members]):
        keys |= dict(WorkflowInstance.objects.filter(pk__in=chunk).values_list("id", "business_key"))
    until = case.closed_at or clock.now()
    operations = _operations(case, [m.instance_id for m in members], until)
    # Who, as the case's own entries name people: a login by its username, a token by its label.
    names = actor_names(operations[:MAX_OPERATIONS])
    logins = Operator.objects.filter(namespace_id=case.namespace_id, actor_id__in={r.actor_id for r in operations})
    names |= {(case.namespace_id, actor): user for actor, user in logins.values_list("actor_id", "user__username")}
    timeline = [_entry(case.opened_at, case.opened_by, "opened", case.title)]
    timeline += [_entry(n.created_at, n.author, "note", n.text, evidence=n.evidence_ref) for n in case.notes.all()]
    timeline += [
        _entry(m.abandoned_at, m.abandoned_by, "abandoned", m.abandoned_reason, instance=m.instance_id)
        for m in members
        if m.abandoned_at is not None
    ]
    for row in operations[:MAX_OPERATIONS]:
        who = names.get((row.namespace_id, row.actor_id), row.actor_id)
        timeline.append(
            _entry(row.created_at, who, row.action, row.reason, instance=row.workflow_id, evidence=row.evidence_ref)
        )
    if case.closed_at is not None:
        timeline.append(_entry(case.closed_at, case.closed_by, "closed", ""))
    timeline.sort(key=lambda entry: entry["at"])
    signature = FailureSignature.objects.filter(pk=case.signature_id).first() if case.signature_id else None
    return {
        "case": {
            "id": case.pk,
            "title": case.title,
            "state": case.state,
            "ticket_url": case.ticket_url,
            "signature": {"id": signature.id, "pattern": signature.pattern} if signature else None,
            "opened_by": case.opened_by,
            "opened_at": format_time(case.opened_at),
            "closed_by": case.closed_by,
            "closed_at": format_time(case.closed_at) if case.closed_at else None,
        },
        "counts": {"members": progress.total, "accounted_for": progress.accounted}
        | {status: progress.counts[status] for status in STATUSES},
        "members": [
            {
                "instance_id": m.instance_id,
                "business_key": keys.get(m.instance_id, ""),
                "status": progress.statuses.get(m.instance_id, "missing"),
                **({"abandoned_reason": m.abandoned_reason} if m.abandoned_at else {}),
            }
            for m in members
        ],
        "who": dict(Counter(entry["who"] for entry in timeline).most_common()),
        "timeline": timeline,
        "operations_left_out": max(len(operations) - MAX_OPERATIONS, 0),
    }


def _operations(case: Case, instance_ids: list[str], until: dt.datetime) -> list[WorkflowOperation]:
    rows = []
    for chunk in _chunks(instance_ids):
        rows += WorkflowOperation.objects.filter(
            workflow_id__in=chunk, created_at__gte=case.opened_at, created_at__lte=until
        ).order_by("created_at")[: MAX_OPERATIONS + 1]
    return sorted(rows, key=lambda row: row.created_at)


def _entry(at: dt.datetime, who: str, what: str, text: str, **extra) -> dict:
    return {"at": format_time(at), "who": who, "what": what, "text": text} | {k: v for k, v in extra.items() if v}


def summary_json(summary: dict) -> str:
    return json.dumps(summary, indent=2, ensure_ascii=False) + "\n"


def summary_markdown(summary: dict) -> str:
    """The summary as a postmortem's Markdown: the case, the counts, who did what, the timeline, the members."""
    case, counts = summary["case"], summary["counts"]
    lines = [f"# {case['title']}", ""]
    lines.append(f"- State: {case['state']}; opened {case['opened_at']} by {case['opened_by']}")
    if case["closed_at"]:
        lines.append(f"- Closed {case['closed_at']} by {case['closed_by']}")
    if case["ticket_url"]:
        lines.append(f"- Ticket: {case['ticket_url']}")
    if case["signature"]:
        lines.append(f"- Failure signature: `{case['signature']['pattern']}` ({case['signature']['id']})")
    lines += ["", f"## Accounted for: {counts['accounted_for']} of {counts['members']}", ""]
    lines += [f"- {status}: {counts[status]}" for status in STATUSES if counts[status]]
    lines += ["", "## Who did what", ""]
    lines += [f"- {who}: {count}" for who, count in summary["who"].items()]
    lines += ["", "## Timeline", "", "| when | who | what | instance | note |", "| --- | --- | --- | --- | --- |"]
    for entry in summary["timeline"]:
        text = " ".join(entry["text"].split()).replace("|", "\\|")
        evidence = f" (evidence: {entry['evidence']})" if entry.get("evidence") else ""
        lines.append(
            f"| {entry['at']} | {entry['who']} | {entry['what']} | {entry.get('instance', '')} | {text}{evidence} |"
        )
    if summary["operations_left_out"]:
        lines.append(f"\n{summary['operations_left_out']} later operations are left out of this timeline.")
    lines += ["", "## Instances", "", "| instance | business key | outcome |", "| --- | --- | --- |"]
    for member in summary["members"]:
        outcome = member["status"] + (f": {member['abandoned_reason']}" if "abandoned_reason" in member else "")
        lines.append(f"| {member['instance_id']} | {member['business_key']} | {outcome.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def note_add(*, case: Case, username: str, text: str, evidence_ref: str) -> CaseNote:
    if not text.strip():
        raise CaseRefused("text: write the note")
    return CaseNote.objects.create(
        case=case, author=username, text=text.strip()[:4000], evidence_ref=evidence_ref[:512]
    )
