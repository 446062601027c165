"""The load of the reliability tests: the engine's background and an API server as real processes, API clients as
threads, all on the pytest MariaDB test database; and the checks of what the load left behind.

Clients only speak HTTP. Every write carries a unique mark (business key, payload token or audit reason) so the
database can be asked afterwards how often each request took effect.
"""

import contextlib
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
from django.conf import settings

from engine.check import invariants_check
from engine.definitions import definition_create
from engine.runner import runner_pass
from history.credentials import credential_issue
from history.models import (
    Activation,
    ActivationState,
    Attempt,
    AttemptState,
    Continuation,
    ContinuationState,
    InstanceState,
    Scope,
    Signal,
    Task,
    TaskState,
    Wait,
    WaitState,
    WorkflowInstance,
    WorkflowOperation,
)
from history.tenancy import namespace_ensure

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE, APPLICATION, QUEUES = "rel", "rel-app", ("rel-a", "rel-b")
LEASE_SECONDS = 3  # a killed worker's or a hung handler's lease expires within the run
HANG_LIMIT = 3  # each demo.hang task holds a worker thread until the worker stops
MAX_STARTS = 400
RETRY_SECONDS = 15  # how long a client retries a keyed request through a server outage
RESULT = {"status": "done", "approved": True}  # fits every contract and POLL mapping used below
MAPPING = {"field": "status", "values": {"done": "SUCCEEDED", "pending": "PENDING", "failed": "FAILED"}}
STEP_DECISIONS = {
    "resolve-step": {"execution_settled": True, "conclusion": "SUCCEEDED", "result": RESULT},
    "retry-step": {"safe_to_retry": True},
    "continue-poll": {"pending_confirmed": True},
    "rearm-wait": {"wait_verified": True},
}
OPERATIONS = ("review-task", *STEP_DECISIONS, "continue")
FINISHED = (InstanceState.SUCCEEDED, InstanceState.FAILED, InstanceState.CANCELLED)


def _task(key: str, handler: str, queue: str, **extra) -> dict:
    return {"key": key, "kind": "TASK", "handler": handler, "queue": queue, **extra}


# The steps that lead to review run first (priority 5), so operators meet them while the load runs.
DEFINITIONS = {
    # Two queues and a signal wait in between: starts, signals, contract violations (RearmWait).
    "flow": [
        _task("a", "demo.echo", QUEUES[0]),
        {
            "key": "approve",
            "kind": "SIGNAL",
            "after": ["a"],
            "name": "approval",
            "payload_version": "v1",
            "correlation": "business_key",
            "deadline_seconds": 3600,
            "contract": {"type": "object", "required": ["approved"], "properties": {"approved": {"type": "boolean"}}},
        },
        _task("b", "demo.echo", QUEUES[1], after=["approve"]),
    ],
    # PENDING answers for pending_rounds rounds: two or more exhaust it (NEEDS_REVIEW, ResolveStep).
    "poll": [
        {
            "key": "settle",
            "kind": "POLL",
            "handler": "demo.poll_pending",
            "queue": QUEUES[1],
            "priority": 5,
            "max_rounds": 2,
            "interval_seconds": 1,
            "poll_deadline_seconds": 3600,
            "mapping": MAPPING,
        }
    ],
    # Fails (engine retries when retryable): NEEDS_REVIEW, then RetryStep or ResolveStep, then Continue.
    "fail": [_task("charge", "demo.fail", QUEUES[0], max_attempts=2, priority=5)],
    # Never answers: the lease expires (UNKNOWN), then ReviewTask.
    "hang": [_task("charge", "demo.hang", QUEUES[1], priority=5)],
}


def workload_define() -> str:
    """The namespace, its definitions and a token holding every scope; returns the token."""
    namespace, application, _ = namespace_ensure(name=NAMESPACE, application=APPLICATION, queues=list(QUEUES))
    for name, steps in DEFINITIONS.items():
        document = {"name": name, "application": APPLICATION, "steps": steps}
        definition_create(namespace_id=namespace.id, document=document)
    issued = credential_issue(
        namespace_id=namespace.id,
        application_id=application.id,
        actor_id="c" * 32,
        label="reliability",
        scopes=list(Scope.values),
        queue_access="*",
    )
    return issued.token


def database_url() -> str:
    """The test database as a URL for the processes started here."""
    database = settings.DATABASES["default"]
    password = f":{database['PASSWORD']}" if database["PASSWORD"] else ""
    return f"mysql://{database['USER']}{password}@{database['HOST']}:{database['PORT']}/{database['NAME']}"


class Background:
    """Two runners, a worker per queue and a gunicorn server, each its own process group.

    The server's listening socket belongs to this process and is handed down by descriptor, so a restarted server
    answers on the same port and requests sent while it is down wait in the backlog.
    """

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.env = {**os.environ, "WEAVE_DATABASE_URL": database_url(), "PYTHONUNBUFFERED": "1"}
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.listener.set_inheritable(True)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        manage = [sys.executable, "manage.py"]
        worker = ["weave_worker", "--namespace", NAMESPACE, "--lease", str(LEASE_SECONDS), "--interval", "0.2"]
        self.commands = {
            "runner-1": [*manage, "weave_runner", "--interval", "0.2"],
            "runner-2": [*manage, "weave_runner", "--interval", "0.2"],
            "worker-a": [*manage, *worker, "--queue", QUEUES[0], "--concurrency", "3"],
            "worker-b": [*manage, *worker, "--queue", QUEUES[1], "--concurrency", str(3 + HANG_LIMIT)],
            "server": [
                *[sys.executable, "-m", "gunicorn", "weave_site.wsgi:application"],
                *["--bind", f"fd://{self.listener.fileno()}", "--workers", "2", "--worker-class", "gthread"],
                *["--threads", "4", "--timeout", "60", "--graceful-timeout", "3"],
            ],
        }
        self.processes: dict[str, subprocess.Popen] = {}
        self.kills = 0

    @classmethod
    def started(cls, log_dir: Path, token: str, finalizer) -> "Background":
        """Every role started and the server answering; ``finalizer`` stops them whatever the test's end."""
        background = cls(log_dir)
        finalizer(background.stop)
        background.start()
        background.wait_ready(token)
        return background

    def start(self, *roles: str) -> None:
        for role in roles or self.commands:
            # On a cluster each role's connections go to a node of its own first (the roles in turn).
            node = str(list(self.commands).index(role))
            with open(self.log_dir / f"{role}.log", "ab") as log:
                self.processes[role] = subprocess.Popen(
                    self.commands[role],
                    cwd=ROOT,
                    env=self.env | {"WEAVE_DATABASE_NODE": node},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=(self.listener.fileno(),) if role == "server" else (),
                )

    def kill(self, role: str) -> None:
        """kill -9 the role's whole process group (a server's workers die with their master)."""
        process = self.processes[role]
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
        self.kills += 1

    def exited(self) -> dict[str, int]:
        """Roles whose process ended by itself, with its exit code."""
        return {role: p.returncode for role, p in self.processes.items() if p.poll() is not None}

    def stop(self) -> None:
        """SIGTERM every group, SIGKILL what is left after a grace period (a worker blocked in demo.hang)."""
        for process in self.processes.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 4
        for process in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        self.listener.close()

    def wait_ready(self, token: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                response = httpx.get(f"{self.url}/v1/credentials/self", headers=_auth(token), timeout=2)
                if response.status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"server not ready in {timeout} s:\n{self.log_tail('server')}")

    def log_tail(self, role: str, size: int = 3000) -> str:
        return (self.log_dir / f"{role}.log").read_text(errors="replace")[-size:]


def _auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@dataclass(frozen=True)
class Effect:
    """A write a client sent: its kind, its mark in the database, and whether the client saw it acknowledged."""

    kind: str  # start, signal, control, recovery
    mark: str
    acknowledged: bool


class Clients:
    """API clients in threads: starters, signallers, a controller, operators running recovery, readers."""

    def __init__(self, url: str, token: str, seed: int):
        self.url, self.token, self.seed = url, token, seed
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.sequence = itertools.count(1)  # the marks of signals, controls and recoveries
        self.starts = itertools.count(1)
        self.instances: list[dict] = []  # acknowledged starts: {id, definition, business_key}
        self.in_review: dict[str, dict] = {}  # instances whose last read said NEEDS_REVIEW
        self.finished: set[str] = set()  # instances a read found finished: no client picks them again
        self.effects: list[Effect] = []
        self.counts: Counter = Counter()
        self.server_errors: list[str] = []
        self.failures: list[str] = []  # a client thread that raised

    def run(self, seconds: float) -> None:
        roles = [self._starter, self._signaller, self._signaller] + [self._controller] + [self._operator] * 2
        roles += [self._reader] * 2
        threads = [
            threading.Thread(target=self._loop, args=(role, random.Random(self.seed * 100 + i)), daemon=True)
            for i, role in enumerate(roles)
        ]
        for thread in threads:
            thread.start()
        time.sleep(seconds)
        self.stopping.set()
        for thread in threads:
            thread.join(RETRY_SECONDS + 15)
        assert not any(t.is_alive() for t in threads), "a client thread did not stop"

    def _loop(self, role, rng: random.Random) -> None:
        with httpx.Client(base_url=self.url, headers=_auth(self.token), timeout=20) as http:
            while not self.stopping.is_set():
                try:
                    role(http, rng)
                except Exception as exc:  # reported by the test, with the others
                    with self.lock:
                        self.failures.append(f"{role.__name__}: {exc!r}")
                time.sleep(rng.uniform(0.01, 0.06))

    def _send(self, http: httpx.Client, method: str, path: str, body=None, key: str | None = None):
        """The response, or None when no answer came: a keyed write is retried with its key through an outage."""
        headers = {"Idempotency-Key": key} if key else {}
        deadline = time.monotonic() + RETRY_SECONDS
        while True:
            try:
                response = http.request(method, path, json=body, headers=headers)
            except httpx.TransportError:
                with self.lock:
                    self.counts["no answer"] += 1
                if key is None or time.monotonic() > deadline:
                    return None
                time.sleep(0.3)
                continue
            with self.lock:
                self.counts["reads"] += method == "GET"
                self.counts["replayed"] += response.headers.get("Idempotent-Replayed") == "true"
                if response.status_code >= 500:
                    self.server_errors.append(f"{method} {path} {response.status_code} {response.text[:300]}")
            # UNAVAILABLE (a database node lost under the request) says: send it again, with its key.
            if response.status_code == 503 and key is not None and time.monotonic() < deadline:
                time.sleep(0.3)
                continue
            return response

    def _record(self, kind: str, mark: str, response) -> bool:
        acknowledged = response is not None and response.status_code < 300
        with self.lock:
            self.effects.append(Effect(kind, mark, acknowledged))
            if acknowledged:
                self.counts[kind] += 1
        return acknowledged

    def _pick(self, rng: random.Random, definition: str | None = None) -> dict | None:
        with self.lock:
            candidates = [
                i for i in self.instances if definition in (None, i["definition"]) and i["id"] not in self.finished
            ]
        return rng.choice(candidates) if candidates else None

    def _detail(self, http: httpx.Client, instance: dict) -> dict | None:
        response = self._send(http, "GET", f"/v1/workflows/{instance['id']}")
        if response is None or response.status_code != 200:
            return None
        detail = response.json()["data"]
        with self.lock:
            if detail["state"] == InstanceState.NEEDS_REVIEW:
                self.in_review[instance["id"]] = instance
            else:
                self.in_review.pop(instance["id"], None)
            if detail["state"] in FINISHED:
                self.finished.add(instance["id"])
        return detail

    def _starter(self, http: httpx.Client, rng: random.Random) -> None:
        n = next(self.starts)
        if n > MAX_STARTS:
            self.stopping.wait(0.5)
            return
        with self.lock:
            hanging = sum(i["definition"] == "hang" for i in self.instances)
        choices = ["flow"] * 6 + ["poll"] * 2 + ["fail"] * 2 + (["hang"] if hanging < HANG_LIMIT else [])
        definition = rng.choice(choices)
        data = {"pending_rounds": rng.randint(0, 3)} if definition == "poll" else {"retryable": rng.random() < 0.5}
        business_key = f"bk-{self.seed}-{n}"
        body = {"definition": definition, "input": data, "business_key": business_key}
        response = self._send(http, "POST", "/v1/workflows", body, key=f"start-{business_key}")
        if self._record("start", business_key, response):
            with self.lock:
                self.instances.append(
                    {"id": response.json()["data"]["id"], "definition": definition, "business_key": business_key}
                )

    def _signaller(self, http: httpx.Client, rng: random.Random) -> None:
        instance = self._pick(rng, "flow")
        if instance is None:
            return
        token = f"sig-{self.seed}-{next(self.sequence)}"
        approved = True if rng.random() < 0.9 else "later"  # "later" breaks the contract: the wait goes to review
        body = {
            "name": "approval",
            "payload_version": "v1",
            "payload": {"approved": approved, "token": token},
            "correlation_key": instance["business_key"],
            "reason": "approved by the reliability client",
        }
        response = self._send(http, "POST", f"/v1/workflows/{instance['id']}/signals", body, key=token)
        self._record("signal", token, response)

    def _controller(self, http: httpx.Client, rng: random.Random) -> None:
        instance = self._pick(rng)
        detail = instance and self._detail(http, instance)
        if not detail or detail["state"] in FINISHED:
            return
        action = "resume" if detail["paused"] else "cancel" if rng.random() < 0.15 else "pause"
        reason = f"control {self.seed}-{next(self.sequence)}"
        body = {"expected_control_revision": detail["control_revision"], "reason": reason}
        self._record("control", reason, self._send(http, "POST", f"/v1/workflows/{instance['id']}/{action}", body))

    def _operator(self, http: httpx.Client, rng: random.Random) -> None:
        """Takes an instance in review through as many operations as its reads offer (a few at most)."""
        with self.lock:
            in_review = list(self.in_review.values())
        if in_review and rng.random() < 0.8:
            instance = rng.choice(in_review)
        else:
            instance = self._pick(rng, rng.choice(list(DEFINITIONS)))
        for _ in range(4):
            detail = instance and self._detail(http, instance)
            chosen = recovery_command(detail, rng) if detail and detail["state"] == InstanceState.NEEDS_REVIEW else None
            if chosen is None:
                return
            operation, command = chosen
            key = f"rec-{self.seed}-{next(self.sequence)}"
            command["reason"] = f"recovery {key}"
            path = f"/v1/workflows/{instance['id']}/recovery/{operation}"
            if not self._record("recovery", command["reason"], self._send(http, "POST", path, command, key=key)):
                return
            with self.lock:
                self.counts[operation] += 1
            time.sleep(0.3)  # the runner consumes what the operation queued before the next read

    def _reader(self, http: httpx.Client, rng: random.Random) -> None:
        instance = self._pick(rng)
        detail = instance and self._detail(http, instance)
        if not detail:
            return
        base = f"/v1/workflows/{instance['id']}"
        step = rng.choice(detail["steps"])["key"]
        for path in (f"{base}/signals", f"{base}/operations", f"{base}/steps/{step}/activations"):
            self._send(http, "GET", f"{path}?limit={rng.randint(1, 20)}")


def recovery_command(detail: dict, rng: random.Random) -> tuple[str, dict] | None:
    """One recovery operation the instance's eligibility offers, with its command built from the same read."""
    common = {"expected_revision": detail["revision"], "evidence_ref": "ticket:REL-1"}
    eligibility = detail["eligibility"]
    if eligibility["continue"]["possible"]:
        return "continue", common | {"review_resolved": True}
    steps = {s["key"]: s for s in detail["steps"]}
    options = [
        (key, operation)
        for key, operations in eligibility["steps"].items()
        for operation, verdict in operations.items()
        if verdict["possible"] and steps[key].get("current_activation")
    ]
    if not options:
        return None
    key, operation = rng.choice(options)
    activation = steps[key]["current_activation"]
    if operation == "review-task":
        task = activation.get("task")
        if task is None:
            return None
        return operation, common | {
            "task_id": task["id"],
            "expected_task_revision": task["revision"],
            "execution_settled": True,
            "conclusion": "SUCCEEDED",
            "result": RESULT,
        }
    decision = {"step_key": key, "activation_id": activation["id"], "expected_step_revision": steps[key]["revision"]}
    return operation, common | decision | STEP_DECISIONS[operation]


def background_settle(seconds: float = 20) -> bool:
    """Runner passes in this process until one handles nothing and no lease is still running (or time is up)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        busy = any(runner_pass().values())
        if not busy and not Attempt.objects.filter(state=AttemptState.RUNNING).exists():
            return True
        if not busy:
            time.sleep(0.5)
    return False


def effect_counts(effects: list[Effect]) -> tuple[list[Effect], list[Effect]]:
    """(lost, duplicated): acknowledged writes found no time, and writes found more than once."""
    instances = WorkflowInstance.objects.filter(namespace__name=NAMESPACE)
    found = {
        "start": Counter(instances.values_list("business_key", flat=True)),
        "signal": Counter(json.loads(p).get("token") for p in Signal.objects.values_list("payload", flat=True)),
        "control": Counter(WorkflowOperation.objects.values_list("reason", flat=True)),
    }
    found["recovery"] = found["control"]
    lost = [e for e in effects if e.acknowledged and found[e.kind][e.mark] == 0]
    duplicated = [e for e in effects if found[e.kind][e.mark] > 1]
    return lost, duplicated


def stuck_instances() -> list[tuple[str, str]]:
    """Unfinished instances nothing will move: not in review with a reason, not paused, no task, wait or round due."""
    queued = Task.objects.filter(state__in=(TaskState.QUEUED, TaskState.LEASED))
    pending = set(queued.values_list("source_instance_id", flat=True))
    pending |= set(Wait.objects.filter(state=WaitState.WAITING).values_list("instance_id", flat=True))
    rounds = Activation.objects.filter(state=ActivationState.WAITING, next_round_at__isnull=False)
    pending |= set(rounds.values_list("instance_id", flat=True))
    # A continuation the runner left pending waits for a quota permit: every pass retries it.
    pending |= set(Continuation.objects.filter(state=ContinuationState.PENDING).values_list("instance_id", flat=True))
    stuck = []
    for instance_id, state, paused, review_reason in WorkflowInstance.objects.exclude(state__in=FINISHED).values_list(
        "id", "state", "paused", "review_reason"
    ):
        if state == InstanceState.NEEDS_REVIEW:
            if not review_reason:
                stuck.append((instance_id, "NEEDS_REVIEW without a review_reason"))
        elif not paused and instance_id not in pending:
            stuck.append((instance_id, f"{state} with nothing pending"))
    return stuck


@dataclass
class Outcome:
    """What the load left: checked after the background stopped and this process's runner passes settled it."""

    exited: dict[str, int]  # roles whose process ended by itself during the load
    settled: bool
    violations: list
    lost: list[Effect]
    duplicated: list[Effect]
    stuck: list[tuple[str, str]]
    check: subprocess.CompletedProcess  # weave_check in its own process


def outcome_of(background: Background, clients: Clients) -> Outcome:
    exited = background.exited()
    background.stop()
    settled = background_settle()
    lost, duplicated = effect_counts(clients.effects)
    check = subprocess.run(
        [sys.executable, "manage.py", "weave_check"],
        cwd=ROOT,
        env=background.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Outcome(exited, settled, invariants_check(), lost, duplicated, stuck_instances(), check)
