"""What the pause, resume, cancel and signal forms show beside their fields: the signal's target as the waiting step
and the definition already know it, its contract, and in words what the background does after the submit."""

from dataclasses import dataclass

from core import exactjson
from core.errors import InvalidArgument
from engine.activation import correlation_key_of
from engine.signaling import signal_spec_of
from history.models import Disposition, InstanceState, Wait, WaitKind, WaitState, WorkflowInstance


@dataclass
class SignalTarget:
    """A step a signal of the instance can be for: its open wait's expectations, else its definition's."""

    step_key: str
    name: str
    payload_version: str
    correlation_key: str
    wait: Wait | None = None

    @property
    def choice(self) -> str:
        """The form's query that picks this target."""
        return f"wait={self.wait.id}" if self.wait else f"step={self.step_key}"

    def initial(self) -> dict:
        return {
            "target_step_key": self.step_key,
            "name": self.name,
            "payload_version": self.payload_version,
            "correlation_key": self.correlation_key,
        }


def signal_targets(instance: WorkflowInstance) -> list[SignalTarget]:
    """The steps whose wait for a signal is open, by step key; without one, every step of the definition that
    takes a signal (a signal for it is buffered until a wait of the step takes it)."""
    definition = instance.definition
    waits = Wait.objects.filter(
        instance_id=instance.id, state=WaitState.WAITING, kind__in=[WaitKind.SIGNAL, WaitKind.POLL_FINAL_SIGNAL]
    ).select_related("step")
    targets = [
        SignalTarget(
            step_key=wait.step.key,
            name=wait.signal_name,
            payload_version=wait.payload_version,
            correlation_key=wait.correlation_key,
            wait=wait,
        )
        for wait in waits
    ]
    if targets:
        return sorted(targets, key=lambda target: target.step_key)
    for step in definition.spec["steps"]:
        spec = signal_spec_of(step)
        if spec is not None:
            targets.append(
                SignalTarget(
                    step_key=step["key"],
                    name=spec["name"],
                    payload_version=spec["payload_version"],
                    correlation_key=_correlation(instance, spec),
                )
            )
    return targets


def _correlation(instance: WorkflowInstance, spec: dict) -> str:
    """The key a wait of the step will expect; blank when the input lacks its field (the operator types it)."""
    try:
        return correlation_key_of(instance=instance, source=spec["correlation"])
    except InvalidArgument:
        return ""


def signal_target_chosen(targets: list[SignalTarget], query) -> SignalTarget | None:
    """The target the form's query picks (``wait`` or ``step``), or the only one; None while several are open."""
    for target in targets:
        if (target.wait and target.wait.id == query.get("wait")) or target.step_key == query.get("step"):
            return target
    return targets[0] if len(targets) == 1 else None


def step_contract(instance: WorkflowInstance, step_key: str) -> str | None:
    """The payload schema the step's definition holds a signal to, exactly as defined; None without one."""
    spec = instance.definition.step_spec(step_key) or {}
    return exactjson.dumps(spec["contract"], sort_keys=True, indent=2) if spec.get("contract") else None


def signal_outcome(disposition: str, instance: WorkflowInstance, step_key: str) -> str:
    """What the background does with a signal for ``step_key``, in words, from the disposition its preview took."""
    if disposition == Disposition.APPLIED:
        return (
            f"The signal matches the open wait of step {step_key}: the step succeeds with this payload and the "
            "instance goes on."
        )
    if disposition == Disposition.CONTRACT_VIOLATION:
        return (
            f"The signal matches the open wait of step {step_key}, but its payload breaks the step's contract: the "
            "wait, the step and the instance go to review."
        )
    if disposition == Disposition.BUFFERED:
        ttl = signal_spec_of(instance.definition.step_spec(step_key))["signal_ttl_seconds"]
        return (
            f"No open wait of step {step_key} takes it now: it is buffered for {ttl} s, and the first wait of the "
            "step that matches it in that time takes it."
        )
    if disposition == Disposition.REJECTED:
        return f"Its name or payload version is not the one step {step_key} declares: the background rejects it."
    if disposition:
        return f"The background records it as {disposition}."
    return "The background takes it in after the records ahead of it in the inbox."


def control_effect(action: str, instance: WorkflowInstance) -> str:
    """What the background does after a pause, resume or cancel of the instance as it is now."""
    if action == "pause":
        return (
            "Workers claim no task of the instance until it is resumed: new tasks wait QUEUED; work already running "
            "finishes and its results are still taken in."
        )
    if action == "resume":
        if instance.state == InstanceState.RUNNING:
            return "The gate opens: workers claim the instance's queued tasks again."
        return f"The gate stays closed while the instance is {instance.state}; it opens when the instance runs again."
    if instance.state == InstanceState.RUNNING:
        return (
            "The instance stops: the background cancels its queued tasks, waits for running attempts to settle, "
            "then ends it CANCELLED."
        )
    return (
        f"The instance stays {instance.state} with the stop intent CANCEL; once Continue hands it on, the background "
        "stops it."
    )
