"""A workflow's signals and the signal resource audit (SignalOperation)."""

from dataclasses import dataclass

from django.db.models import QuerySet

from core.errors import NotFound, Unavailable
from core.identity import Identity
from history.models import Signal, SignalOperation, Wait, WorkflowInstance
from history.selectors.access import instance_get_readable
from history.selectors.pagination import ListKind, Page, keyset_page, prepared_page

SIGNALS = ListKind("signals", Signal, ("accepted_at", "id"))
SIGNAL_OPERATIONS = ListKind("signal_operations", SignalOperation, ("created_at", "id"))


@dataclass(frozen=True)
class SignalPage:
    instance: WorkflowInstance
    page: Page[Signal]


@dataclass(frozen=True)
class SignalDetail:
    instance: WorkflowInstance
    signal: Signal


def signal_list(*, identity: Identity, instance_id: str, after: tuple | None, limit: int) -> SignalPage:
    """Signals of the workflow, newest accepted first (accepted_at, id)."""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    values = (instance.namespace_id, instance.id)
    return SignalPage(
        instance=instance, page=prepared_page(_signals_of, values, kind=SIGNALS, after=after, limit=limit)
    )


def _signals_of(namespace_id: str, workflow_id: str) -> QuerySet[Signal]:
    return Signal.objects.filter(namespace_id=namespace_id, workflow_id=workflow_id)


def _signal_of(*, instance: WorkflowInstance, signal_id: str) -> Signal:
    signal = Signal.objects.filter(id=signal_id, workflow_id=instance.id).first()
    if signal is None:
        raise NotFound("signal not found under this workflow")
    return signal


def _check_signal(*, instance: WorkflowInstance, signal: Signal) -> None:
    """Run after every NOT_FOUND check: corruption is reported only for what was found."""
    if signal.namespace_id != instance.namespace_id:
        raise Unavailable(f"signal {signal.id} and its workflow disagree on the namespace")


def signal_get(*, identity: Identity, instance_id: str, signal_id: str) -> SignalDetail:
    """The full signal; the wait it was consumed by must belong to the same workflow."""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    signal = _signal_of(instance=instance, signal_id=signal_id)
    _check_signal(instance=instance, signal=signal)
    if signal.consumed_wait_id is not None:
        wait = Wait.objects.filter(id=signal.consumed_wait_id).values_list("instance_id", flat=True).first()
        if wait != instance.id:
            raise Unavailable(f"the wait that consumed signal {signal.id} is missing or belongs elsewhere")
    return SignalDetail(instance=instance, signal=signal)


def signal_operation_list(
    *, identity: Identity, instance_id: str, signal_id: str, after: tuple | None, limit: int
) -> Page[SignalOperation]:
    """The signal's resource audit, newest first (created_at, id)."""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    signal = _signal_of(instance=instance, signal_id=signal_id)
    _check_signal(instance=instance, signal=signal)
    queryset = SignalOperation.objects.filter(
        namespace_id=instance.namespace_id, workflow_id=instance.id, signal_id=signal.id
    )
    return keyset_page(queryset, kind=SIGNAL_OPERATIONS, after=after, limit=limit)


def signal_operation_get(*, identity: Identity, instance_id: str, signal_id: str, operation: str) -> SignalOperation:
    """One audit record by its own id (never its operation_id) under (workflow, signal)."""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    signal = _signal_of(instance=instance, signal_id=signal_id)
    record = SignalOperation.objects.filter(id=operation, signal_id=signal.id).first()
    if record is None:
        raise NotFound("signal operation not found under this signal")
    _check_signal(instance=instance, signal=signal)
    if record.workflow_id != instance.id or record.namespace_id != instance.namespace_id:
        raise Unavailable(f"signal operation {record.id} and its signal disagree on the workflow")
    return record
