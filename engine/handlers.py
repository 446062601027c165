"""Task handlers run by ``weave_worker``, and the demo handlers shipped with the engine.

A handler receives the task's context and returns a ``HandlerResult``. Handlers declared
with ``heartbeat=True`` get their lease extended while they run; the others must finish within
their lease (``demo.hang`` never does, so its lease expires and its outcome becomes UNKNOWN).
"""

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import OperationalError, connection

from core import exactjson
from core.identity import Identity
from engine.worker import Claim, Completion, task_complete, task_heartbeat
from history.locking import is_retryable


@dataclass(frozen=True)
class TaskContext:
    task_id: str
    attempt_number: int
    round: int | None
    input: Any  # parsed with exactjson: numbers keep their literal


@dataclass(frozen=True)
class HandlerResult:
    outcome: str  # SUCCEEDED or FAILED
    result: Any
    retryable: bool = False


@dataclass(frozen=True)
class Handler:
    run: Callable[[TaskContext], HandlerResult]
    heartbeat: bool


HANDLERS: dict[str, Handler] = {}


def register(name: str, *, heartbeat: bool = False):
    def wrap(run: Callable[[TaskContext], HandlerResult]):
        HANDLERS[name] = Handler(run=run, heartbeat=heartbeat)
        return run

    return wrap


@register("demo.echo")
def demo_echo(context: TaskContext) -> HandlerResult:
    """Succeeds with its input, exactly as given."""
    return HandlerResult("SUCCEEDED", context.input)


@register("demo.fail")
def demo_fail(context: TaskContext) -> HandlerResult:
    """Fails; retryable when the input says ``"retryable": true``."""
    retryable = isinstance(context.input, dict) and context.input.get("retryable") is True
    return HandlerResult("FAILED", {"error": "demo failure", "attempt": context.attempt_number}, retryable)


@register("demo.hang")
def demo_hang(context: TaskContext) -> HandlerResult:
    """Never finishes and never heartbeats: its lease expires and the runner records UNKNOWN."""
    threading.Event().wait()
    raise AssertionError("unreachable")


@register("demo.poll_pending")
def demo_poll_pending(context: TaskContext) -> HandlerResult:
    """A POLL query: answers ``{"status": "pending"}`` for the first ``pending_rounds`` rounds, then done."""
    pending_rounds = 0
    if isinstance(context.input, dict):
        # Compared exactly, never converted: int() of a literal such as 1e999999999 would build a huge number.
        pending_rounds = exactjson.to_python(context.input.get("pending_rounds", 0))
    if (context.round or 1) <= pending_rounds:
        return HandlerResult("SUCCEEDED", {"status": "pending", "round": context.round})
    return HandlerResult("SUCCEEDED", {"status": "done", "round": context.round})


def context_of(claim: Claim) -> TaskContext:
    return TaskContext(
        task_id=claim.task.id,
        attempt_number=claim.attempt.number,
        round=claim.task.source_round,
        input=exactjson.loads(claim.task.input),
    )


def claim_execute(*, identity: Identity, claim: Claim, lease_seconds: int = 30) -> Completion:
    """Run the claimed task's handler and complete the attempt with its answer.

    An unknown handler or a handler that raises is a retryable FAILED (the attempt budget
    decides whether it runs again). Heartbeating handlers get their lease renewed every third
    of it while they run, until an answer says ``late`` (the lease was lost: the work is no
    longer wanted). A ``late`` completion was kept as evidence only; it is no error.
    """
    handler = HANDLERS.get(claim.task.handler)
    stop = threading.Event()
    if handler is not None and handler.heartbeat:
        beat = threading.Thread(
            target=_heartbeat,
            args=(identity, claim, lease_seconds, stop),
            name=f"heartbeat-{claim.task.id}",
            daemon=True,
        )
        beat.start()
    try:
        if handler is None:
            answer = HandlerResult("FAILED", {"error": f"no handler {claim.task.handler!r} here"}, True)
        else:
            answer = handler.run(context_of(claim))
    except Exception as exc:  # a handler bug is a failed attempt, not a worker crash
        answer = HandlerResult("FAILED", {"error": type(exc).__name__, "message": str(exc)[:500]}, True)
    finally:
        stop.set()
    command = {
        "attempt_id": claim.attempt.id,
        "outcome": answer.outcome,
        "result": answer.result,
        "retryable": answer.retryable,
    }
    # The answer is not dropped for a collision (on a cluster, with the runners' writes to the instance on other
    # nodes): it is sent again until it commits or the lease is over, when the engine takes it as unknown.
    deadline = time.monotonic() + lease_seconds
    while True:
        try:
            return task_complete(identity=identity, task_id=claim.task.id, command=command, claimed=claim.task)
        except OperationalError as error:
            if not is_retryable(error) or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(0.05, 0.2))


def _heartbeat(identity: Identity, claim: Claim, lease_seconds: int, stop: threading.Event) -> None:
    try:
        while not stop.wait(lease_seconds / 3):
            beat = task_heartbeat(
                identity=identity,
                task_id=claim.task.id,
                command={"attempt_id": claim.attempt.id, "lease_seconds": lease_seconds},
            )
            if beat.late:
                return
    finally:
        connection.close()
