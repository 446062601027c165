"""Repair campaigns: one decision (``recovery.decisions``) for every instance of a selection frozen when the
campaign is made, run by the background item by item, with a ledger of what became of each.

Made (``campaign_make``) from any selection of instances the operator may see: each item keeps the instance's
revision then (``campaign_create``, the API's door, makes it once per Idempotency-Key). Before it starts,
``campaign_preview`` counts by what would happen, set-based (one grouped read of the items beside their instances,
whatever their number) with a sample judged by the recovery rules per group.

Started, it runs in the runner (``pass_campaigns``): one executor at a time holds a campaign by a lease and makes
each item's decision through ``decision_make`` — the instance at the item's revision, so an instance that moved since
is SKIPPED, never repaired blind — with the idempotency key ``campaign-<id>-<instance>``. An executor killed between
a decision's commit and its ledger entry leaves the item pending; the next one replays the key and records the
same decision: no item is decided twice. A database error leaves the item pending too (the runner backs off).

Under a four-eyes policy that covers the decision for any instance of the selection, the campaign is made PROPOSED:
a second person approves it as a whole, with its preview, and widens it past its canary; its items' decisions then
run unheld, each carrying that approval.

The first ``canary_size`` items run first; then the campaign waits (CANARY_DONE) until every repair of its canary
is judged (``recovery.repairs``): all worked, it widens itself; one did not, it halts. A person may widen it at any
time (under four eyes, the second person). It halts itself once more than ``halt_percent`` of the items run were
refused, failed or repaired ineffectively, saying why, and takes at most ``rate_per_second`` items a second.
Paused, halted and cancelled campaigns take nothing; "again" makes a campaign of a finished one's failed, refused
and skipped items at their revisions now.
"""

import datetime as dt
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from django.db import Error as DatabaseError
from django.db import connection, transaction
from django.db.models import Case, Count, F, Q, QuerySet, Value, When

from core import clock, exactjson
from core import fields as field_rules
from core.errors import Aborted, FailedPrecondition, InvalidArgument, NotFound, PermissionDenied, WeaveError
from core.identity import Identity, identity_of_stored, identity_stored
from core.times import format_time
from history import idempotency
from history.idempotency import Receipt
from history.locking import atomic_with_retry, lease_take
from history.models import (
    CAMPAIGN_OPEN,
    Campaign,
    CampaignItem,
    CampaignState,
    DecisionState,
    InstanceState,
    ItemOutcome,
    RepairCheck,
    RepairVerdict,
    Scope,
    WorkflowDefinition,
    WorkflowInstance,
)
from history.proposals import approvals_required
from history.selectors.access import visible_rows
from recovery.decisions import KINDS, Kind, decision_command_parse, decision_make
from recovery.eligibility import instance_eligibility
from recovery.repairs import repair_verdicts

# Items frozen per insert, and taken per executor and pass.
CHUNK = 2_000
# The idempotency receipts' operation of a campaign made through the API.
MAKE = "campaign.make"
# Pasted ids and business keys looked up per query.
NAMED_CHUNK = 1_000
BATCH = 50
# An executor's hold, renewed with every item: one killed mid-run holds its campaign this long at most.
LEASE = dt.timedelta(seconds=10)
# A campaign judges its refusals only once this many items have run (or its canary, if smaller).
HALT_AFTER = 5
SAMPLES = 3
DEFAULTS = {"canary_size": 10, "halt_percent": 10, "rate_per_second": 20}
LIMITS = {"canary_size": 100_000, "halt_percent": 100, "rate_per_second": 1_000}
# The campaign's own fields; the rest of the command is the decision's (without expected_revision: each item's own).
_FIELDS = ("title", "canary_size", "halt_percent", "rate_per_second")
DECISION_FIELDS = ("kind", "step_key", "reason", "evidence_ref", "declared", "conclusion", "result")
CAMPAIGN_FIELDS = (*_FIELDS, *DECISION_FIELDS)


@dataclass(frozen=True)
class CampaignCommand:
    title: str
    canary_size: int
    halt_percent: int
    rate_per_second: int
    # The decision's command every item makes, without its revision, and its kind.
    decision: dict
    kind: Kind


def campaign_create(
    *,
    identity: Identity,
    command: dict,
    selection: object,
    select: Callable[[object], tuple[QuerySet, str]],
    idempotency_key: object,
) -> tuple[Campaign, Receipt]:
    """``campaign_make`` once per Idempotency-Key, the API's door: the command checked first, then the selection
    (``select`` gives its instances and how they were chosen); the same key with the same command and selection
    answers the campaign made first, now, and with another is ALREADY_EXISTS."""
    identity.require_scope(Scope.RECOVER)
    parsed = campaign_command_parse(command)
    instances, source = select(selection)
    key = idempotency.key_check(idempotency_key)

    def work(_locks) -> dict:
        made = _frozen(identity=identity, instances=instances, source=source, parsed=parsed, owner=identity.actor_id)
        return {"campaign_id": made.id}

    receipt = idempotency.receipt_run(
        namespace_id=identity.namespace_id,
        key=key,
        operation=MAKE,
        target=identity.namespace_id,
        command={**command, "selection": selection},
        work=work,
        status=201,
    )
    return Campaign.objects.get(pk=receipt.data["campaign_id"]), receipt


def campaign_command_parse(raw: object) -> CampaignCommand:
    """The campaign's fields and the decision's, each checked by the decision's own rules; the first wrong one is
    named (INVALID_ARGUMENT)."""
    command = field_rules.command_object(raw, allowed=(*CAMPAIGN_FIELDS, "expected_revision"))
    title = field_rules.text("title", field_rules.required(command, "title"), max_length=200)
    numbers = {
        name: field_rules.integer(name, command.get(name, DEFAULTS[name]), low=1, high=high)
        for name, high in LIMITS.items()
    }
    decision = {name: value for name, value in command.items() if name not in _FIELDS}
    if "expected_revision" in decision:
        raise InvalidArgument(
            "expected_revision: each item carries the revision it was frozen at", field="expected_revision"
        )
    kind = decision_command_parse({**decision, "expected_revision": "1"}).kind
    return CampaignCommand(title=title, decision=decision, kind=kind, **numbers)


def instances_named(identity: Identity, entries: list[str]) -> tuple[list[str], list[tuple[int, str]]]:
    """The instances the entries name (an id, else a business key, among those the identity may see), and the
    entries that name none as (their index, the text). Read in chunks: a few queries whatever their number."""
    visible = visible_rows(WorkflowInstance.objects.filter(namespace_id=identity.namespace_id), identity)
    found, unknown = set(), []
    numbered = [(number, entry.strip()) for number, entry in enumerate(entries) if entry.strip()]
    for start in range(0, len(numbered), NAMED_CHUNK):
        chunk = numbered[start : start + NAMED_CHUNK]
        texts = {text for _, text in chunk}
        by_id = set(visible.filter(pk__in=texts).values_list("id", flat=True))
        by_key: dict[str, set[str]] = {}
        for pk, key in visible.filter(business_key__in=texts - by_id).values_list("id", "business_key"):
            by_key.setdefault(key, set()).add(pk)
        for number, text in chunk:
            ids = {text} if text in by_id else by_key.get(text)
            if ids:
                found |= ids
            else:
                unknown.append((number, text[:80]))
    return sorted(found), unknown


def campaign_make(*, identity: Identity, instances: QuerySet, source: str, command: object, owner: str) -> Campaign:
    """A READY campaign (PROPOSED under four eyes) of the instances of ``instances`` the identity may see, each
    frozen at its revision now, in id order (the canary is the first ``canary_size``). Made in one transaction, in
    chunks: constant memory."""
    identity.require_scope(Scope.RECOVER)
    parsed = campaign_command_parse(command)
    return _frozen(identity=identity, instances=instances, source=source, parsed=parsed, owner=owner)


def _frozen(*, identity: Identity, instances: QuerySet, source: str, parsed: CampaignCommand, owner: str) -> Campaign:
    rows = visible_rows(instances.order_by(), identity).filter(namespace_id=identity.namespace_id)
    now = clock.now()
    definitions = WorkflowDefinition.objects.filter(pk__in=rows.values("definition_id").distinct())
    definitions = list(definitions.values_list("name", "queues"))
    four_eyes = any(
        approvals_required(namespace_id=identity.namespace_id, definition_name=name, operation=operation)
        for name, _ in definitions
        for operation in parsed.kind.operations
    )
    with transaction.atomic():
        campaign = Campaign.objects.create(
            namespace_id=identity.namespace_id,
            title=parsed.title,
            source=source[:1024],
            kind=parsed.kind.name,
            step_key=parsed.decision["step_key"],
            command=exactjson.dumps(parsed.decision),
            reason=parsed.decision["reason"],
            evidence_ref=parsed.decision["evidence_ref"],
            owner=owner,
            **identity_stored(identity),
            queues=sorted({queue for _, queues in definitions for queue in queues}),
            canary_size=parsed.canary_size,
            halt_percent=parsed.halt_percent,
            rate_per_second=parsed.rate_per_second,
            four_eyes=four_eyes,
            state=CampaignState.PROPOSED if four_eyes else CampaignState.READY,
            log=[_entry(now, owner, "made", source)],
            created_at=now,
            updated_at=now,
        )
        total, last = 0, ""
        while chunk := list(rows.filter(id__gt=last).order_by("id").values_list("id", "revision")[:CHUNK]):
            CampaignItem.objects.bulk_create(
                CampaignItem(campaign=campaign, position=total + n, instance_id=instance_id, revision=revision)
                for n, (instance_id, revision) in enumerate(chunk)
            )
            total += len(chunk)
            last = chunk[-1][0]
        if not total:
            raise NotFound("selection: no instance you may see is selected", field="selection")
        campaign.total = total
        campaign.save(update_fields=["total"])
    return campaign


def campaign_get(*, identity: Identity, campaign_id: str) -> Campaign:
    """The campaign if the identity may see it: its namespace's, of instances on queues it may see."""
    campaign = Campaign.objects.filter(pk=campaign_id, namespace_id=identity.namespace_id).first()
    if campaign is None or not campaign_visible(campaign, identity):
        raise NotFound(f"campaign {campaign_id} not found", field="campaign_id")
    return campaign


def campaigns_visible(identity: Identity) -> QuerySet:
    """The campaigns of the identity's namespace it may see (``campaign_visible``); a namespace holds few."""
    campaigns = Campaign.objects.filter(namespace_id=identity.namespace_id)
    if identity.queues is None:
        return campaigns
    shown = [c.pk for c in campaigns.only("id", "queues") if campaign_visible(c, identity)]
    return campaigns.filter(pk__in=shown)


def campaign_visible(campaign: Campaign, identity: Identity) -> bool:
    """Whether the identity may see every queue of the campaign's instances (its namespace aside)."""
    return identity.queues is None or set(campaign.queues) <= identity.queues


# ---- preview ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreviewGroup:
    verdict: str
    count: int
    # A few of its items, each with what the recovery rules say of it now (the decision's first operation).
    samples: list[tuple[str, str]]


def campaign_preview(campaign: Campaign) -> list[PreviewGroup]:
    """The pending items counted by what would happen to them now, the largest group first: one grouped read of
    the items beside their instances; then a few of each group judged by the recovery rules."""
    pending = CampaignItem.objects.filter(campaign=campaign, outcome=ItemOutcome.PENDING)
    verdicts = pending.annotate(
        verdict=Case(
            When(~Q(instance__revision=F("revision")), then=Value("skipped: the instance moved since it was frozen")),
            When(
                ~Q(instance__state=InstanceState.NEEDS_REVIEW),
                then=Value("refused: the instance is not in review"),
            ),
            When(
                ~Q(instance__review_step_key__in=[campaign.step_key, ""]),
                then=Value(f"refused: the instance is in review for another step than {campaign.step_key}"),
            ),
            default=Value("would be decided"),
        )
    )
    counts = verdicts.values_list("verdict").annotate(n=Count("id")).order_by("-n", "verdict")
    identity = identity_of_stored(campaign)
    first_operation = KINDS[campaign.kind].operations[0]
    groups = []
    for verdict, n in counts:
        sample = verdicts.filter(verdict=verdict).order_by("position").values_list("instance_id", flat=True)[:SAMPLES]
        groups.append(
            PreviewGroup(
                verdict=verdict,
                count=n,
                samples=[(i, _judged(identity, i, campaign.step_key, first_operation)) for i in sample],
            )
        )
    return groups


def _judged(identity: Identity, instance_id: str, step_key: str, operation: str) -> str:
    try:
        eligibility = instance_eligibility(identity=identity, instance_id=instance_id)
    except WeaveError as error:
        return error.message
    entry = eligibility["steps"].get(step_key, {}).get(operation)
    if entry is None:
        return f"the instance has no step {step_key!r}"
    return f"{operation} possible" if entry["possible"] else f"{operation}: {entry['reason']}"


# ---- the operator's moves ----------------------------------------------------------------------------------------

_MOVES = {
    # action: (states it may come from, state it goes to)
    "approved": ((CampaignState.PROPOSED,), CampaignState.READY),
    "started": ((CampaignState.READY,), CampaignState.RUNNING),
    "paused": ((CampaignState.RUNNING, CampaignState.CANARY_DONE), CampaignState.PAUSED),
    "resumed": ((CampaignState.PAUSED, CampaignState.HALTED), CampaignState.RUNNING),
    "widened": ((CampaignState.CANARY_DONE,), CampaignState.RUNNING),
    "cancelled": (CAMPAIGN_OPEN, CampaignState.CANCELLED),
}


def campaign_move(*, identity: Identity, campaign_id: str, action: str, by: str, note: str = "") -> Campaign:
    """Approve, start, pause, resume, widen or cancel a campaign (its row locked); a move its state does not allow
    is FAILED_PRECONDITION naming the state. Cancelling skips every pending item. Under four eyes, approving and
    widening are a second person's (not its maker's)."""
    identity.require_scope(Scope.RECOVER)
    if action not in _MOVES:
        raise InvalidArgument(f"action: one of {', '.join(_MOVES)}", field="action")
    campaign_get(identity=identity, campaign_id=campaign_id)
    allowed, state = _MOVES[action]

    def move() -> Campaign:
        campaign = Campaign.objects.select_for_update().get(pk=campaign_id)
        if campaign.state not in allowed:
            raise FailedPrecondition(f"a {campaign.state} campaign cannot be {action}")
        now = clock.now()
        if action in ("approved", "widened") and campaign.four_eyes:
            if identity.actor_id == campaign.actor_id:
                raise PermissionDenied(f"a campaign under four eyes is {action} by a second person, not its maker")
            if action == "approved":
                campaign.approval = {"by": identity.actor_id, "name": by, "at": format_time(now), "note": note}
        campaign.state = state
        campaign.log = [*campaign.log, _entry(now, by, action, note)]
        if action == "widened":
            campaign.widened = True
        if state == CampaignState.RUNNING:
            campaign.paced_since, campaign.paced_items, campaign.halted_reason = now, 0, ""
        if state == CampaignState.CANCELLED:
            CampaignItem.objects.filter(campaign=campaign, outcome=ItemOutcome.PENDING).update(
                outcome=ItemOutcome.SKIPPED, code="CANCELLED", detail=f"the campaign was cancelled by {by}", done_at=now
            )
            campaign.finished_at = now
        campaign.updated_at = now
        campaign.save()
        return campaign

    return atomic_with_retry(move)


def campaign_again(*, identity: Identity, campaign_id: str, owner: str) -> Campaign:
    """A READY campaign of the same decision for a campaign's items that were refused, failed or skipped, each at
    its instance's revision now; the first is named ``parent``."""
    parent = campaign_get(identity=identity, campaign_id=campaign_id)
    if parent.state in (CampaignState.READY, CampaignState.RUNNING):
        raise FailedPrecondition(f"a {parent.state} campaign has items still to run: pause or cancel it first")
    again = (ItemOutcome.REFUSED, ItemOutcome.FAILED, ItemOutcome.SKIPPED)
    items = CampaignItem.objects.filter(campaign=parent, outcome__in=again).values("instance_id")
    command = {
        "title": f"again: {parent.title}"[:200],
        "canary_size": parent.canary_size,
        "halt_percent": parent.halt_percent,
        "rate_per_second": parent.rate_per_second,
        **exactjson.loads(parent.command),
    }
    campaign = campaign_make(
        identity=identity,
        instances=WorkflowInstance.objects.filter(pk__in=items),
        source=f"the refused, failed and skipped items of campaign {parent.id}",
        command=command,
        owner=owner,
    )
    Campaign.objects.filter(pk=campaign.pk).update(parent=parent)
    campaign.parent = parent
    return campaign


@dataclass(frozen=True)
class CampaignTally:
    counts: dict[str, int]  # its items by outcome, every outcome (zero included)
    verification: dict[str, int]  # the verdicts on the repairs of its applied items since it was made


def campaign_tallies(campaigns: list[Campaign]) -> dict[str, CampaignTally]:
    """Each campaign's tally by id: two grouped reads however many campaigns (a page of them) — the items by
    (campaign, outcome) index, and the repairs of their applied items joined on the instance."""
    ids = [campaign.id for campaign in campaigns]
    counts = {campaign_id: dict.fromkeys(ItemOutcome.values, 0) for campaign_id in ids}
    verification = {campaign_id: dict.fromkeys(RepairVerdict.values, 0) for campaign_id in ids}
    if not ids:
        return {}
    items = CampaignItem.objects.filter(campaign_id__in=ids).values_list("campaign_id", "outcome")
    for campaign_id, outcome, n in items.annotate(n=Count("id")).order_by():
        counts[campaign_id][outcome] = n
    quote = connection.ops.quote_name
    item, made, check = (quote(model._meta.db_table) for model in (CampaignItem, Campaign, RepairCheck))
    placeholders = ", ".join(["%s"] * len(ids))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT i.campaign_id, r.verdict, COUNT(*) FROM {item} i JOIN {made} c ON c.id = i.campaign_id "
            f"JOIN {check} r ON r.instance_id = i.instance_id AND r.made_at >= c.created_at "
            f"WHERE i.campaign_id IN ({placeholders}) AND i.outcome = %s GROUP BY i.campaign_id, r.verdict",
            [*ids, ItemOutcome.APPLIED],
        )
        for campaign_id, verdict, n in cursor.fetchall():
            verification[campaign_id][verdict] = n
    return {campaign_id: CampaignTally(counts[campaign_id], verification[campaign_id]) for campaign_id in ids}


def campaign_tally(campaign: Campaign) -> CampaignTally:
    return campaign_tallies([campaign])[campaign.id]


def _entry(at: dt.datetime, by: str, action: str, note: str) -> dict:
    return {"at": at.isoformat(), "by": by, "action": action, "note": note[:1024]}


# ---- the executor ------------------------------------------------------------------------------------------------


def campaigns_due(now: dt.datetime) -> tuple[QuerySet, QuerySet]:
    """What ``pass_campaigns`` handles: the RUNNING campaigns no executor holds, the canaries it may judge (under
    four eyes the widening is a second person's: they read the canary's verdicts on its page)."""
    return (
        Campaign.objects.filter(state=CampaignState.RUNNING).exclude(lease_until__gt=now),
        Campaign.objects.filter(state=CampaignState.CANARY_DONE, four_eyes=False),
    )


def pass_campaigns() -> int:
    """A runner pass: each running campaign no executor holds takes its next items, and each canary whose repairs
    are all judged widens its campaign or halts it; how many items ran and campaigns moved."""
    unheld, judged = campaigns_due(clock.now())
    ids = unheld.order_by("updated_at").values_list("id", flat=True)[:BATCH]
    ran = sum(campaign_run(campaign_id) for campaign_id in list(ids))
    canaries = judged.values_list("id", flat=True)
    return ran + sum(_canary_judged(campaign_id) for campaign_id in list(canaries[:BATCH]))


def _canary_judged(campaign_id: str) -> int:
    """Widen a campaign whose canary's repairs all worked, halt one where any did not; 1 when it moved. A canary
    with no repair (every item skipped or refused) waits for a person."""

    def judge() -> int:
        campaign = Campaign.objects.select_for_update().filter(pk=campaign_id, state=CampaignState.CANARY_DONE).first()
        if campaign is None:
            return 0
        canary = CampaignItem.objects.filter(
            campaign=campaign, position__lt=campaign.canary_size, outcome=ItemOutcome.APPLIED
        )
        applied = canary.count()
        verdicts = repair_verdicts(canary.values("instance_id"), since=campaign.created_at)
        failed = verdicts[RepairVerdict.INEFFECTIVE] + verdicts[RepairVerdict.REGRESSED]
        now = clock.now()
        if failed:
            campaign.state, campaign.halted_at = CampaignState.HALTED, now
            campaign.halted_reason = (
                f"the canary's repairs did not all work: {verdicts[RepairVerdict.INEFFECTIVE]} ineffective, "
                f"{verdicts[RepairVerdict.REGRESSED]} regressed"
            )
            campaign.log = [*campaign.log, _entry(now, "the campaign", "halted", campaign.halted_reason)]
        elif applied and verdicts[RepairVerdict.EFFECTIVE] >= applied:
            campaign.state, campaign.widened = CampaignState.RUNNING, True
            campaign.paced_since, campaign.paced_items = now, 0
            note = f"every repair of the canary's {applied} worked"
            campaign.log = [*campaign.log, _entry(now, "the campaign", "widened", note)]
        else:
            return 0
        campaign.updated_at = now
        campaign.save()
        return 1

    return atomic_with_retry(judge)


def campaign_run(campaign_id: str) -> int:
    """Take the campaign's next items (the canary's until it is widened, within its rate), then settle its state;
    how many items ran (0 when another executor holds it or it is not running)."""
    campaign = lease_take(Campaign, campaign_id, state=CampaignState.RUNNING, lease=LEASE)
    if campaign is None:
        return 0
    ran = 0
    try:
        identity = identity_of_stored(campaign)
        decision = exactjson.loads(campaign.command)
        pending = CampaignItem.objects.filter(campaign=campaign, outcome=ItemOutcome.PENDING)
        if not campaign.widened:
            pending = pending.filter(position__lt=campaign.canary_size)
        tally = campaign_tally(campaign)
        counts, verified = Counter(tally.counts), tally.verification
        ineffective = verified[RepairVerdict.INEFFECTIVE] + verified[RepairVerdict.REGRESSED]
        for item in pending.order_by("position")[: _allowance(campaign)]:
            Campaign.objects.filter(pk=campaign.pk).update(lease_until=clock.now() + LEASE)
            outcome = _run_item(campaign, identity, decision, item)
            counts[outcome] += 1
            counts[ItemOutcome.PENDING] -= 1
            ran += 1
            if halted := _halting(campaign, counts, ineffective):
                campaign.state, campaign.halted_reason, campaign.halted_at = CampaignState.HALTED, halted, clock.now()
                campaign.log = [*campaign.log, _entry(clock.now(), "the campaign", "halted", halted)]
                break
        campaign.paced_items += ran
        if campaign.state == CampaignState.RUNNING and not pending.exists():
            done = campaign.widened or not counts[ItemOutcome.PENDING]
            campaign.state = CampaignState.DONE if done else CampaignState.CANARY_DONE
            campaign.finished_at = clock.now() if done else None
            campaign.log = [*campaign.log, _entry(clock.now(), "the campaign", campaign.state.lower(), "")]
    finally:
        _release(campaign)
    return ran


def _release(campaign: Campaign) -> None:
    """Write what the run changed, unless someone moved the campaign meanwhile (paused, cancelled): theirs stands."""
    now = clock.now()
    fields = {"paced_items": campaign.paced_items, "lease_until": None, "updated_at": now}
    moved = Campaign.objects.filter(pk=campaign.pk, state=CampaignState.RUNNING).update(
        **fields,
        state=campaign.state,
        halted_reason=campaign.halted_reason,
        halted_at=campaign.halted_at,
        finished_at=campaign.finished_at,
        log=campaign.log,
    )
    if not moved:
        Campaign.objects.filter(pk=campaign.pk).update(**fields)


def _allowance(campaign: Campaign) -> int:
    """Items it may take now: ``rate_per_second`` for every second since it (re)started, less those taken."""
    elapsed = (clock.now() - (campaign.paced_since or clock.now())).total_seconds()
    earned = campaign.rate_per_second * (elapsed + 1)
    return max(0, min(BATCH, int(earned) - campaign.paced_items))


def _halting(campaign: Campaign, counts: Counter, ineffective: int) -> str:
    """Why the campaign must halt now (blank: it goes on): more of its run items refused, failed or repaired
    ineffectively than it allows."""
    refused = counts[ItemOutcome.REFUSED] + counts[ItemOutcome.FAILED]
    bad = refused + ineffective
    run = campaign.total - counts[ItemOutcome.PENDING]
    if run < min(HALT_AFTER, campaign.canary_size) or bad * 100 <= campaign.halt_percent * run:
        return ""
    common = (
        CampaignItem.objects.filter(campaign=campaign, outcome__in=(ItemOutcome.REFUSED, ItemOutcome.FAILED))
        .values_list("code", "detail")
        .annotate(n=Count("id"))
        .order_by("-n")
        .first()
    )
    why = f"; most often {common[0]}: {common[1]}" if common else ""
    repairs = f" and {ineffective} of their repairs did not work" if ineffective else ""
    return f"{refused} of {run} items run were refused or failed{repairs}, more than {campaign.halt_percent} %{why}"[
        :1024
    ]


def _run_item(campaign: Campaign, identity: Identity, decision: dict, item: CampaignItem) -> str:
    """Make the item's decision (or replay it, by its key) and write its ledger entry; its outcome."""
    command = {**decision, "expected_revision": str(item.revision)}
    key = f"campaign-{campaign.id}-{item.instance_id}"
    made = None
    approval = None
    if campaign.four_eyes:
        approval = {**campaign.approval, "outcome": "APPROVED", "note": f"campaign {campaign.id}"}
    try:
        made, _ = decision_make(
            identity=identity, instance_id=item.instance_id, idempotency_key=key, command=command, approval=approval
        )
    except Aborted as error:  # the instance moved since the selection was frozen
        state = WorkflowInstance.objects.filter(pk=item.instance_id).values_list("state", "revision").first()
        now = f"; now {state[0]} at revision {state[1]}" if state else ""
        outcome, code, detail = ItemOutcome.SKIPPED, error.code, f"{error.message}{now}"
    except WeaveError as error:
        outcome, code, detail = ItemOutcome.REFUSED, error.code, error.message
    except DatabaseError:
        raise  # the item stays pending: the runner backs off and a later run takes it again
    except Exception as error:  # noqa: BLE001 — the ledger names what the rules do not
        outcome, code, detail = ItemOutcome.FAILED, type(error).__name__, str(error) or type(error).__name__
    else:
        outcome, code, detail = _decided(made)
    CampaignItem.objects.filter(pk=item.pk, outcome=ItemOutcome.PENDING).update(
        outcome=outcome, code=code[:64], detail=detail[:1024], decision=made, done_at=clock.now()
    )
    return outcome


def _decided(decision) -> tuple[str, str, str]:
    if decision.state == DecisionState.REFUSED:
        refusal = decision.refusal or {}
        return ItemOutcome.REFUSED, refusal["code"], f"{refusal['operation']}: {refusal['message']}"
    return ItemOutcome.APPLIED, "", ""
