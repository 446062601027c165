"""The Weave API client."""

import datetime as dt
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, Unpack

import httpx

from weave_sdk import types as t
from weave_sdk.errors import ERROR_CLASSES, InvalidArgument, WeaveError, WeaveNetworkError, WeaveResponseError
from weave_sdk.exactjson import dumps, loads
from weave_sdk.retry import Retry

P = TypeVar("P")
F = TypeVar("F", bound=Callable[..., Any])
ID = re.compile(r"[0-9a-f]{32}")
STEP_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
QUEUE = re.compile(r"[a-z0-9][a-z0-9_.\-]{0,63}")
IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,128}")
MAX_LIMIT = 100
MAX_CURSOR_BYTES = 1024
MAX_SEQUENCE = 2**63 - 1
EVENT_ORDERS = ("asc", "desc")
NAME = re.compile(r"[a-z0-9][a-z0-9_.\-]{0,63}")
MAX_UINT32 = 2**32 - 1
INSTANCE_STATES = ("RUNNING", "NEEDS_REVIEW", "CANCELLING", "SUCCEEDED", "FAILED", "CANCELLED")
STOP_KINDS = ("CANCEL", "FAIL")
ORDERS = ("updated_at", "created_at", "review_since")
# A recovery operation's name; which names exist is the server's list (an unknown one is NOT_FOUND).
OPERATION_NAME = re.compile(r"[a-z]+(-[a-z]+)*")
CAMPAIGN_OUTCOMES = ("PENDING", "APPLIED", "SKIPPED", "REFUSED", "FAILED")
MAX_REVISION = 2**64 - 1
MAX_REASON = 1024
MAX_NOTE_TEXT = 4000
MAX_EVIDENCE_REF = 512
# Operations of the served OpenAPI document this client deliberately has no method for, each with
# its reason. The document describes neither itself (/v1/openapi.json) nor its Swagger page.
WITHOUT_METHOD: Mapping[str, str] = {
    "get_liveness": "a load balancer's probe at the site root, answered without a token: nothing for a client",
    "get_readiness": "a load balancer's probe at the site root, answered without a token; get_background tells a "
    "client how the background runs",
}


def operation(operation_id: str) -> Callable[[F], F]:
    """Mark a client method as the call of one ``operationId`` of the served OpenAPI document."""

    def mark(method: F) -> F:
        method.operation_id = operation_id
        return method

    return mark


def _check_id(value: object, field: str) -> str:
    if not isinstance(value, str) or ID.fullmatch(value) is None:
        raise InvalidArgument("INVALID_ARGUMENT", f"{field} must be 32 lowercase hexadecimal characters", field=field)
    return value


def _check_step_key(value: object, field: str = "key", *, root: bool = False) -> str:
    if root and value == "$root":
        return value
    if not isinstance(value, str) or not value.isascii() or STEP_KEY.fullmatch(value) is None:
        refused = "$root included" if root else "$root excluded"
        raise InvalidArgument(
            "INVALID_ARGUMENT", f"{field} must be a step key of the definition ({refused})", field=field
        )
    return value


def _event_params(filters: Mapping[str, Any]) -> dict[str, str | list[str]]:
    unknown = sorted(set(filters) - set(t.EventFilters.__annotations__))
    if unknown:
        raise InvalidArgument("INVALID_ARGUMENT", f"{unknown[0]} is not an event filter", field=unknown[0])
    kind, step_key, after_sequence, order = (
        filters.get(name) for name in ("kind", "step_key", "after_sequence", "order")
    )
    params: dict[str, str | list[str]] = {}
    if kind is not None:
        kinds = [kind] if isinstance(kind, str) else list(kind)
        if not kinds or not all(isinstance(k, str) and k for k in kinds):
            raise InvalidArgument("INVALID_ARGUMENT", "kind must be an event kind or a list of them", field="kind")
        params["kind"] = kinds
    if step_key is not None:
        params["step_key"] = _check_step_key(step_key, "step_key", root=True)
    if after_sequence is not None:
        if type(after_sequence) is not int or not 0 <= after_sequence <= MAX_SEQUENCE:
            raise InvalidArgument(
                "INVALID_ARGUMENT",
                f"after_sequence must be an integer from 0 to {MAX_SEQUENCE}",
                field="after_sequence",
            )
        params["after_sequence"] = str(after_sequence)
    if order is not None:
        if order not in EVENT_ORDERS:
            raise InvalidArgument("INVALID_ARGUMENT", "order must be asc or desc", field="order")
        params["order"] = order
    return params


def _page_params(limit: int | None, cursor: str | None) -> dict[str, str]:
    params = {}
    if limit is not None:
        if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
            raise InvalidArgument("INVALID_ARGUMENT", f"limit must be an integer from 1 to {MAX_LIMIT}", field="limit")
        params["limit"] = str(limit)
    if cursor is not None and not isinstance(cursor, str):
        raise InvalidArgument("INVALID_ARGUMENT", "cursor must be the text of a next_cursor", field="cursor")
    if cursor:
        if len(cursor.encode("utf-8")) > MAX_CURSOR_BYTES:
            raise InvalidArgument("INVALID_ARGUMENT", f"cursor is longer than {MAX_CURSOR_BYTES} bytes", field="cursor")
        params["cursor"] = cursor
    return params


def _refuse(field: str, rule: str) -> InvalidArgument:
    return InvalidArgument("INVALID_ARGUMENT", f"{field} must be {rule}", field=field)


def _choices(field: str, value: str | Sequence[str], allowed: tuple[str, ...] | None) -> list[str]:
    values = [value] if isinstance(value, str) else list(value)
    if not values or not all(isinstance(v, str) and v and (allowed is None or v in allowed) for v in values):
        raise _refuse(field, f"one or more of {allowed}" if allowed else "one or more non-empty codes")
    return values


def _time_param(field: str, value: dt.datetime) -> str:
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise _refuse(field, "an aware datetime")
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _integer_param(field: str, value: int, low: int) -> str:
    if type(value) is not int or not low <= value <= MAX_UINT32:
        raise _refuse(field, f"an integer from {low} to {MAX_UINT32}")
    return str(value)


def _name_param(field: str, value: str) -> str:
    if not isinstance(value, str) or NAME.fullmatch(value) is None:
        raise _refuse(field, "a name: [a-z0-9][a-z0-9_.-]{0,63}")
    return value


def _text_param(field: str, value: str) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= 256:
        raise _refuse(field, "text of 1 to 256 characters")
    return value


def _text(field: str, value: object, *, max_length: int) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > max_length:
        raise _refuse(field, f"non-blank text of at most {max_length} characters")
    return value


def _evidence_ref(value: object) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_EVIDENCE_REF or any(c.isspace() for c in value):
        raise _refuse("evidence_ref", f"1 to {MAX_EVIDENCE_REF} characters without whitespace")
    return value


def _expect(field: str, got: object, want: str) -> None:
    if got != want:
        raise WeaveResponseError("RESPONSE_MISMATCH", f"the answer's {field} is {got!r}, not {want!r}", field=field)


class WeaveClient:
    """``WeaveClient(base_url, token)``; use as a context manager or call ``close()``.

    ``retry`` (a ``Retry``) bounds how a request is sent again after a transport error or a 503:
    reads are re-read as they were (same path, same cursor); writes are re-sent only with their
    own Idempotency-Key, so a retry can never create a second effect or a new identity; a write
    without one is sent once.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        retry: Retry | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retry = Retry() if retry is None else retry
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "WeaveClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @classmethod
    def operations(cls) -> dict[str, str]:
        """``operationId`` → the name of its method, for every operation this client calls (an OpenAPI link
        names its target by operationId)."""
        found: dict[str, str] = {}
        for name, member in vars(cls).items():
            operation_id = getattr(member, "operation_id", None)
            if operation_id is None:
                continue
            if operation_id in found:
                raise TypeError(f"{operation_id} is the operation of both {found[operation_id]} and {name}")
            found[operation_id] = name
        return found

    # Transport

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | list[str]] | None = None,
        body: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> t.Response:
        headers = {}
        content = None
        if body is not None:
            content = dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if idempotency_key is not None:
            if not isinstance(idempotency_key, str) or IDEMPOTENCY_KEY.fullmatch(idempotency_key) is None:
                raise InvalidArgument(
                    "INVALID_ARGUMENT", "Idempotency-Key must be 1-128 printable ASCII", field="Idempotency-Key"
                )
            headers["Idempotency-Key"] = idempotency_key
        retry = self.retry
        attempts = retry.attempts if method == "GET" or idempotency_key is not None else 1
        waited = 0.0
        sent = 0
        while True:
            sent += 1
            try:
                response = self._http.request(method, path, params=params, content=content, headers=headers)
            except httpx.TransportError as exc:
                failure, retry_after = exc, None
            else:
                if response.status_code != 503:
                    return self._decode(response)
                failure, retry_after = response, response.headers.get("Retry-After")
            wait = retry.wait(sent, retry_after) if sent < attempts else None
            if wait is None or waited + wait > retry.total_wait:
                break
            retry.sleep(wait)
            waited += wait
        if isinstance(failure, httpx.Response):
            return self._decode(failure)
        times = "once" if sent == 1 else f"{sent} times"
        raise WeaveNetworkError(
            "NETWORK_ERROR", f"{method} {path} sent {times}, never answered: {failure}"
        ) from failure

    @staticmethod
    def _decode(response: httpx.Response) -> t.Response:
        request_id = response.headers.get("X-Request-Id")
        try:
            envelope = loads(response.text)
        except ValueError:
            envelope = None
        except WeaveResponseError as refused:
            raise WeaveResponseError(
                refused.code, refused.message, request_id=request_id, status=response.status_code
            ) from None
        if not isinstance(envelope, dict):
            raise WeaveError(
                "BAD_RESPONSE",
                f"HTTP {response.status_code} without a JSON envelope",
                request_id=request_id,
                status=response.status_code,
            )
        request_id = envelope.get("request_id", request_id)
        if response.status_code >= 400:
            error = envelope.get("error") if isinstance(envelope.get("error"), dict) else {}
            code = str(error.get("code", "UNKNOWN"))
            raise ERROR_CLASSES.get(code, WeaveError)(
                code,
                str(error.get("message", f"HTTP {response.status_code}")),
                field=error.get("field"),
                request_id=request_id,
                status=response.status_code,
            )
        if "data" not in envelope:
            raise WeaveResponseError("BAD_RESPONSE", "the envelope has no data", request_id=request_id)
        replayed = response.headers.get("Idempotent-Replayed", "").lower() == "true"
        return t.Response(data=envelope["data"], request_id=request_id, replayed=replayed, status=response.status_code)

    def _get(self, cls: type[P], path: str, params: Mapping[str, str | list[str]] | None = None) -> P:
        return t.decode(cls, self._send("GET", path, params=params).data)

    # Pages

    def iter_pages(
        self, list_method: Callable[..., P], *args: str, limit: int | None = None, **filters: Any
    ) -> Iterator[P]:
        """Every page of a list, from page 1: ``iter_pages(client.list_workflow_signals, workflow_id)``;
        ``filters`` go to every page (a cursor is bound to them)."""
        cursor = ""
        while True:
            page = list_method(*args, limit=limit, cursor=cursor, **filters)
            yield page
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def iter_items(
        self, list_method: Callable[..., Any], *args: str, limit: int | None = None, **filters: Any
    ) -> Iterator[Any]:
        for page in self.iter_pages(list_method, *args, limit=limit, **filters):
            yield from page.items

    # History reads

    @operation("list_workflow_activations")
    def list_workflow_activations(
        self, workflow_id: str, step_key: str, *, limit: int | None = None, cursor: str | None = None
    ) -> t.ActivationPage:
        _check_id(workflow_id, "id")
        _check_step_key(step_key)
        page = self._get(
            t.ActivationPage, f"/v1/workflows/{workflow_id}/steps/{step_key}/activations", _page_params(limit, cursor)
        )
        _expect("instance_id", page.instance_id, workflow_id)
        for item in page.items:
            _expect("items[].step_id", item.step_id, page.step_id)
        return page

    @operation("get_workflow_activation")
    def get_workflow_activation(self, workflow_id: str, step_key: str, activation_id: str) -> t.ActivationDetail:
        _check_id(workflow_id, "id")
        _check_step_key(step_key)
        _check_id(activation_id, "activation")
        detail = self._get(
            t.ActivationDetail, f"/v1/workflows/{workflow_id}/steps/{step_key}/activations/{activation_id}"
        )
        _expect("instance_id", detail.instance_id, workflow_id)
        _expect("step.key", detail.step.key, step_key)
        _expect("activation.id", detail.activation.id, activation_id)
        _expect("activation.step_id", detail.activation.step_id, detail.step.id)
        return detail

    @operation("list_workflow_poll_rounds")
    def list_workflow_poll_rounds(
        self,
        workflow_id: str,
        step_key: str,
        activation_id: str,
        *,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> t.PollRoundPage:
        _check_id(workflow_id, "id")
        _check_step_key(step_key)
        _check_id(activation_id, "activation")
        path = f"/v1/workflows/{workflow_id}/steps/{step_key}/activations/{activation_id}/rounds"
        page = self._get(t.PollRoundPage, path, _page_params(limit, cursor))
        _expect("instance_id", page.instance_id, workflow_id)
        _expect("activation_id", page.activation_id, activation_id)
        for item in page.items:
            _expect("items[].activation_id", item.activation_id, activation_id)
        return page

    @operation("list_workflow_signals")
    def list_workflow_signals(
        self, workflow_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> t.SignalPage:
        return self._workflow_page(t.SignalPage, workflow_id, "signals", limit, cursor)

    @operation("get_workflow_signal")
    def get_workflow_signal(self, workflow_id: str, signal_id: str) -> t.Signal:
        _check_id(workflow_id, "id")
        _check_id(signal_id, "signal")
        signal = self._get(t.Signal, f"/v1/workflows/{workflow_id}/signals/{signal_id}")
        _expect("workflow_id", signal.workflow_id, workflow_id)
        _expect("id", signal.id, signal_id)
        return signal

    @operation("list_workflow_signal_operations")
    def list_workflow_signal_operations(
        self, workflow_id: str, signal_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> t.SignalOperationPage:
        _check_id(workflow_id, "id")
        _check_id(signal_id, "signal")
        path = f"/v1/workflows/{workflow_id}/signals/{signal_id}/operations"
        page = self._get(t.SignalOperationPage, path, _page_params(limit, cursor))
        for item in page.items:
            _expect("items[].workflow_id", item.workflow_id, workflow_id)
            _expect("items[].signal_id", item.signal_id, signal_id)
        return page

    @operation("get_workflow_signal_operation")
    def get_workflow_signal_operation(self, workflow_id: str, signal_id: str, operation: str) -> t.SignalOperation:
        """``operation`` is the audit record's own id, never its operation_id."""
        _check_id(workflow_id, "id")
        _check_id(signal_id, "signal")
        _check_id(operation, "operation")
        record = self._get(t.SignalOperation, f"/v1/workflows/{workflow_id}/signals/{signal_id}/operations/{operation}")
        _expect("workflow_id", record.workflow_id, workflow_id)
        _expect("signal_id", record.signal_id, signal_id)
        _expect("id", record.id, operation)
        return record

    @operation("get_workflow")
    def get_workflow(self, workflow_id: str) -> t.Workflow:
        _check_id(workflow_id, "id")
        workflow = self._get(t.Workflow, f"/v1/workflows/{workflow_id}")
        _expect("id", workflow.id, workflow_id)
        return workflow

    @operation("get_workflow_task")
    def get_workflow_task(self, workflow_id: str, task_id: str) -> t.WorkflowTask:
        _check_id(workflow_id, "id")
        _check_id(task_id, "task")
        detail = self._get(t.WorkflowTask, f"/v1/workflows/{workflow_id}/tasks/{task_id}")
        _expect("instance_id", detail.instance_id, workflow_id)
        _expect("task.id", detail.task.id, task_id)
        return detail

    @operation("get_task_source")
    def get_task_source(self, task_id: str) -> t.TaskSource:
        """Instance, step, activation, poll round and queue of a task (workflows:read, or tasks:work on its queue)."""
        _check_id(task_id, "task_id")
        source = self._get(t.TaskSource, f"/v1/tasks/{task_id}/source")
        _expect("task_id", source.task_id, task_id)
        return source

    @operation("list_workflow_operations")
    def list_workflow_operations(
        self, workflow_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> t.WorkflowOperationPage:
        return self._workflow_page(t.WorkflowOperationPage, workflow_id, "operations", limit, cursor)

    def _workflow_page(
        self, page_type: type[P], workflow_id: str, kind: str, limit: int | None, cursor: str | None
    ) -> P:
        """A page of ``/v1/workflows/{id}/{kind}``: the page and each of its items must be the workflow's."""
        _check_id(workflow_id, "id")
        page = self._get(page_type, f"/v1/workflows/{workflow_id}/{kind}", _page_params(limit, cursor))
        _expect("workflow_id", page.workflow_id, workflow_id)
        for item in page.items:
            _expect("items[].workflow_id", item.workflow_id, workflow_id)
        return page

    @operation("list_workflow_events")
    def list_workflow_events(
        self,
        workflow_id: str,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        **filters: Unpack[t.EventFilters],
    ) -> t.WorkflowEventPage:
        """One page of the instance's timeline by sequence (``order`` asc by default, or desc).

        A ``cursor`` is valid only with the filters and order of the page it came from.
        """
        _check_id(workflow_id, "id")
        params = _event_params(filters) | _page_params(limit, cursor)
        page = self._get(t.WorkflowEventPage, f"/v1/workflows/{workflow_id}/events", params)
        _expect("workflow_id", page.workflow_id, workflow_id)
        sequences = [item.sequence for item in page.items]
        order = filters.get("order")
        if sequences != sorted(set(sequences), reverse=order == "desc"):
            raise WeaveResponseError(
                "RESPONSE_MISMATCH", f"the events are not in {order or 'asc'} sequence order", field="items[].sequence"
            )
        return page

    def iter_workflow_events(
        self, workflow_id: str, *, limit: int | None = None, **filters: Unpack[t.EventFilters]
    ) -> Iterator[t.WorkflowEvent]:
        """Every event of the instance's timeline matching the filters, following the cursors."""
        return self.iter_items(self.list_workflow_events, workflow_id, limit=limit, **filters)

    # Notes, acknowledgement and assignment: what operators say about an instance, never a change of its state
    # or revision. The list takes workflows:read; the writes workflows:annotate or workflows:recover.

    @operation("list_workflow_notes")
    def list_workflow_notes(
        self, workflow_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> t.NotePage:
        """One page of the instance's notes, newest first, with the current review's ``attention`` (absent when
        nobody acknowledged or was assigned to it)."""
        page = self._workflow_page(t.NotePage, workflow_id, "notes", limit, cursor)
        if page.attention is not None:
            _expect("attention.workflow_id", page.attention.workflow_id, workflow_id)
        return page

    @operation("add_workflow_note")
    def add_workflow_note(
        self,
        workflow_id: str,
        *,
        idempotency_key: str,
        text: str,
        evidence_ref: str | None = None,
        corrects: str | None = None,
    ) -> t.Response:
        """Append a note to the instance, in any state; ``corrects`` names an earlier note of it (which stays as
        written). ``data`` is the ``Note`` (status 201; a replay of the key answers the same note)."""
        _check_id(workflow_id, "id")
        command = {"text": _text("text", text, max_length=MAX_NOTE_TEXT)}
        if evidence_ref is not None:
            command["evidence_ref"] = _evidence_ref(evidence_ref)
        if corrects is not None:
            command["corrects"] = _check_id(corrects, "corrects")
        answer = self._send("POST", f"/v1/workflows/{workflow_id}/notes", body=command, idempotency_key=idempotency_key)
        typed = self._typed(t.Note, answer, workflow_id)
        _expect("corrects", typed.data.corrects, corrects)
        return typed

    @operation("acknowledge_workflow")
    def acknowledge_workflow(self, workflow_id: str) -> t.Attention:
        """Acknowledge the current review of an instance in NEEDS_REVIEW; once acknowledged it stays so (by the
        first), and the answer is the same attention."""
        _check_id(workflow_id, "id")
        return self._command(t.Attention, workflow_id, "acknowledge", {})

    @operation("assign_workflow")
    def assign_workflow(self, workflow_id: str, *, assignee: str) -> t.Attention:
        """Assign the current review of an instance in NEEDS_REVIEW to an operator of the namespace (an actor
        id); ``assignee=""`` unassigns it."""
        _check_id(workflow_id, "id")
        if assignee != "":
            _check_id(assignee, "assignee")
        return self._command(t.Attention, workflow_id, "assign", {"assignee": assignee})

    # Instance control (workflows:control). Sent once, never again: they carry no Idempotency-Key, and
    # expected_control_revision refuses a second one (ABORTED); read the instance to learn what happened.

    @operation("pause_workflow")
    def pause_workflow(
        self, workflow_id: str, *, expected_control_revision: int, reason: str | None = None
    ) -> t.InstanceSummary:
        """Pause an unfinished, unpaused instance (its gate closes); bumps revision and control_revision."""
        return self._control(workflow_id, "pause", expected_control_revision, reason)

    @operation("resume_workflow")
    def resume_workflow(
        self, workflow_id: str, *, expected_control_revision: int, reason: str | None = None
    ) -> t.InstanceSummary:
        """Clear paused (the gate opens only if the instance is RUNNING); bumps revision and control_revision."""
        return self._control(workflow_id, "resume", expected_control_revision, reason)

    @operation("cancel_workflow")
    def cancel_workflow(
        self, workflow_id: str, *, expected_control_revision: int, reason: str | None = None
    ) -> t.InstanceSummary:
        """Record the stop intent CANCEL (RUNNING becomes CANCELLING; an instance in review stays in review)."""
        return self._control(workflow_id, "cancel", expected_control_revision, reason)

    def _control(
        self, workflow_id: str, action: str, expected_control_revision: int, reason: str | None
    ) -> t.InstanceSummary:
        _check_id(workflow_id, "id")
        revision = expected_control_revision
        if type(revision) is not int or not 1 <= revision <= MAX_REVISION:
            raise _refuse("expected_control_revision", f"a control_revision, an integer from 1 to {MAX_REVISION}")
        command = {"expected_control_revision": str(revision)}
        if reason is not None:
            command["reason"] = _text("reason", reason, max_length=MAX_REASON)
        summary = self._command(t.InstanceSummary, workflow_id, action, command)
        _expect("id", summary.id, workflow_id)
        return summary

    def _command(self, answer_type: type[P], workflow_id: str, action: str, command: Mapping[str, str]) -> P:
        """POST an unkeyed command to ``/v1/workflows/{id}/{action}`` (sent once) and check whose answer it is."""
        data = t.decode(answer_type, self._send("POST", f"/v1/workflows/{workflow_id}/{action}", body=command).data)
        _expect("workflow_id", data.workflow_id, workflow_id)
        return data

    # The index

    @operation("get_api_index")
    def get_api_index(self) -> t.ApiIndex:
        """The API's name and version, and the paths of its documentation, its OpenAPI document and its main
        collections (the server reads no token for it)."""
        return self._get(t.ApiIndex, "/v1/")

    # The caller

    @operation("get_credential_self")
    def get_credential_self(self) -> t.CredentialSelf:
        """Who this client's token acts as: credential, namespace, actor, scopes and ``queues`` (``"*"``: every
        queue of the namespace)."""
        me = self._get(t.CredentialSelf, "/v1/credentials/self")
        if isinstance(me.queues, str) and me.queues != "*":
            raise WeaveResponseError("BAD_RESPONSE", f'queues is {me.queues!r}, not "*" or a list', field="data.queues")
        return me

    # The background

    @operation("get_background")
    def get_background(self) -> t.Background:
        """The runner and worker processes, the most recent beat first: every runner, and the workers of this
        token's namespace on its queues, running or stopped in the last hour; ``summary`` counts the runners and
        workers alive and the processes whose beat is stale."""
        return self._get(t.Background, "/v1/background")

    # The instance query

    @operation("list_workflows")
    def list_workflows(
        self,
        *,
        state: str | Sequence[str] | None = None,
        review_cause: str | Sequence[str] | None = None,
        definition: str | None = None,
        version: int | None = None,
        business_key: str | None = None,
        business_key_prefix: str | None = None,
        paused: bool | None = None,
        stop_kind: str | None = None,
        queue: str | None = None,
        created_after: dt.datetime | None = None,
        created_before: dt.datetime | None = None,
        updated_after: dt.datetime | None = None,
        updated_before: dt.datetime | None = None,
        in_review_longer_than: int | None = None,
        signature: str | None = None,
        stall_reason: str | Sequence[str] | None = None,
        order: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> t.WorkflowPage:
        """One page of the visible instances matching every filter given, newest first by ``order``.

        ``state``, ``review_cause`` and ``stall_reason`` take one value or several (any of them). A cursor continues
        only the query it came from: pass the same filters and order with it.
        """
        params: dict[str, str | list[str]] = {}
        if state is not None:
            params["state"] = _choices("state", state, INSTANCE_STATES)
        if review_cause is not None:
            params["review_cause"] = _choices("review_cause", review_cause, None)
        if definition is not None:
            params["definition"] = _name_param("definition", definition)
        if version is not None:
            params["version"] = _integer_param("version", version, 1)
        if business_key is not None:
            params["business_key"] = _text_param("business_key", business_key)
        if business_key_prefix is not None:
            params["business_key_prefix"] = _text_param("business_key_prefix", business_key_prefix)
        if paused is not None:
            if type(paused) is not bool:
                raise _refuse("paused", "a bool")
            params["paused"] = "true" if paused else "false"
        if stop_kind is not None:
            if stop_kind not in STOP_KINDS:
                raise _refuse("stop_kind", f"one of {STOP_KINDS}")
            params["stop_kind"] = stop_kind
        if queue is not None:
            params["queue"] = _name_param("queue", queue)
        times = {
            "created_after": created_after,
            "created_before": created_before,
            "updated_after": updated_after,
            "updated_before": updated_before,
        }
        params |= {name: _time_param(name, value) for name, value in times.items() if value is not None}
        if in_review_longer_than is not None:
            params["in_review_longer_than"] = _integer_param("in_review_longer_than", in_review_longer_than, 0)
        if signature is not None:
            params["signature"] = _check_id(signature, "signature")
        if stall_reason is not None:
            params["stall_reason"] = _choices("stall_reason", stall_reason, None)
        if order is not None:
            if order not in ORDERS:
                raise _refuse("order", f"one of {ORDERS}")
            params["order"] = order
        return self._get(t.WorkflowPage, "/v1/workflows", params | _page_params(limit, cursor))

    def iter_workflows(self, *, limit: int | None = None, **filters: Any) -> Iterator[t.WorkflowItem]:
        """Every visible instance matching ``filters`` (those of ``list_workflows``), following the cursors."""
        cursor = ""
        while True:
            page = self.list_workflows(limit=limit, cursor=cursor, **filters)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    @operation("get_review_summary")
    def review_summary(self) -> t.ReviewSummary:
        """Visible instances in review counted per cause and per definition (the busiest first)."""
        return self._get(t.ReviewSummary, "/v1/workflows/review-summary")

    @operation("list_signatures")
    def list_signatures(self, *, limit: int | None = None, cursor: str | None = None) -> t.SignaturePage:
        """One page of the namespace's failure signatures (what made instances enter review), the latest arrival
        first, each with how many visible instances are in review with it now (``list_workflows(signature=…)``)."""
        return self._get(t.SignaturePage, "/v1/signatures", _page_params(limit, cursor))

    @operation("list_campaigns")
    def list_campaigns(self, *, limit: int | None = None, cursor: str | None = None) -> t.CampaignPage:
        """One page of the namespace's repair campaigns the token may see, the newest first, with their counts."""
        return self._get(t.CampaignPage, "/v1/campaigns", _page_params(limit, cursor))

    @operation("get_campaign")
    def get_campaign(self, campaign_id: str) -> t.Campaign:
        """A repair campaign: its decision, state and counts by outcome."""
        _check_id(campaign_id, "campaign_id")
        return self._get(t.Campaign, f"/v1/campaigns/{campaign_id}")

    @operation("list_campaign_items")
    def list_campaign_items(
        self, campaign_id: str, *, outcome: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> t.CampaignLedgerPage:
        """One page of a campaign's ledger in selection order (the canary first); ``outcome`` keeps one outcome."""
        _check_id(campaign_id, "campaign_id")
        params = _page_params(limit, cursor)
        if outcome is not None:
            if outcome not in CAMPAIGN_OUTCOMES:
                raise InvalidArgument(
                    "INVALID_ARGUMENT", f"outcome must be one of {', '.join(CAMPAIGN_OUTCOMES)}", field="outcome"
                )
            params["outcome"] = outcome
        return self._get(t.CampaignLedgerPage, f"/v1/campaigns/{campaign_id}/items", params)

    # Writes

    @operation("make_campaign")
    def make_campaign(self, *, idempotency_key: str, command: Mapping[str, Any]) -> t.Response:
        """Make a repair campaign (``title``, the decision's ``kind``, ``step_key``, ``reason``, ``evidence_ref``,
        ``declared`` and outcome, optional ``canary_size``, ``halt_percent``, ``rate_per_second``, and ``selection``:
        ``{"workflows": [ids or business keys]}`` or ``{"query": {the list_workflows filters}}``). ``data`` is the
        ``Campaign``, READY (PROPOSED under four eyes); a replay of the key answers the same campaign, now."""
        answer = self._send("POST", "/v1/campaigns", body=command, idempotency_key=idempotency_key)
        data = t.decode(t.Campaign, answer.data)
        return t.Response(data=data, request_id=answer.request_id, replayed=answer.replayed, status=answer.status)

    @operation("approve_campaign")
    def approve_campaign(self, campaign_id: str, *, note: str | None = None) -> t.Campaign:
        """Approve a campaign held under four eyes (not its maker's to approve): READY, with its preview read."""
        return self._campaign_move(campaign_id, "approve", note)

    @operation("start_campaign")
    def start_campaign(self, campaign_id: str, *, note: str | None = None) -> t.Campaign:
        """Start a READY campaign: the runner decides its canary, then it waits to be widened."""
        return self._campaign_move(campaign_id, "start", note)

    @operation("pause_campaign")
    def pause_campaign(self, campaign_id: str, *, note: str | None = None) -> t.Campaign:
        return self._campaign_move(campaign_id, "pause", note)

    @operation("resume_campaign")
    def resume_campaign(self, campaign_id: str, *, note: str | None = None) -> t.Campaign:
        """Resume a paused or halted campaign."""
        return self._campaign_move(campaign_id, "resume", note)

    @operation("widen_campaign")
    def widen_campaign(self, campaign_id: str, *, note: str | None = None) -> t.Campaign:
        """Widen a campaign past its canary (under four eyes, not its maker's): every item left runs."""
        return self._campaign_move(campaign_id, "widen", note)

    @operation("cancel_campaign")
    def cancel_campaign(self, campaign_id: str, *, note: str | None = None) -> t.Campaign:
        """Cancel a campaign: every item left is skipped."""
        return self._campaign_move(campaign_id, "cancel", note)

    def _campaign_move(self, campaign_id: str, action: str, note: str | None) -> t.Campaign:
        # Not keyed: a move sent again is refused by the campaign's state, so it is never re-sent after a 503.
        _check_id(campaign_id, "campaign_id")
        body = {} if note is None else {"note": note}
        return t.decode(t.Campaign, self._send("POST", f"/v1/campaigns/{campaign_id}/{action}", body=body).data)

    def recover(
        self, workflow_id: str, operation: str, *, idempotency_key: str, command: Mapping[str, Any]
    ) -> t.Response:
        """One recovery operation by its API name (``retry-step``); ``data`` is the typed Receipt, or the
        Proposal (status 202) where an approval policy holds the operation for a second person."""
        _check_id(workflow_id, "id")
        if not isinstance(operation, str) or not OPERATION_NAME.fullmatch(operation):
            raise InvalidArgument(
                "INVALID_ARGUMENT", "operation must be an operation's API name, e.g. retry-step", field="operation"
            )
        answer = self._send(
            "POST", f"/v1/workflows/{workflow_id}/recovery/{operation}", body=command, idempotency_key=idempotency_key
        )
        return self._typed(t.Proposal if answer.status == 202 else t.Receipt, answer, workflow_id)

    @operation("make_workflow_decision")
    def make_decision(self, workflow_id: str, *, idempotency_key: str, command: Mapping[str, Any]) -> t.Response:
        """State a decision on an instance in review (``kind``, ``step_key``, ``expected_revision``, ``reason``,
        ``evidence_ref``, ``declared`` and the kind's outcome); its chain of recovery operations runs server-side.
        ``data`` is the ``Decision`` as far as it ran (201; a replay of the key answers the same decision, now)."""
        _check_id(workflow_id, "id")
        answer = self._send(
            "POST", f"/v1/workflows/{workflow_id}/decisions", body=command, idempotency_key=idempotency_key
        )
        return self._typed(t.Decision, answer, workflow_id)

    @operation("get_workflow_decision")
    def get_decision(self, workflow_id: str, decision_id: str) -> t.Decision:
        """A decision and how far its chain has run: follow it until its state is no longer RUNNING."""
        _check_id(workflow_id, "id")
        _check_id(decision_id, "decision_id")
        decision = self._get(t.Decision, f"/v1/workflows/{workflow_id}/decisions/{decision_id}")
        _expect("workflow_id", decision.workflow_id, workflow_id)
        return decision

    @operation("approve_recovery_proposal")
    def approve_proposal(
        self, workflow_id: str, proposal_id: str, *, idempotency_key: str, reason: str | None = None
    ) -> t.Response:
        """Run a proposal's stored command as its second person; ``data`` is the operation's Receipt."""
        return self._decide(workflow_id, "proposals", proposal_id, "approve", idempotency_key, reason, t.Receipt)

    @operation("reject_recovery_proposal")
    def reject_proposal(self, workflow_id: str, proposal_id: str, *, idempotency_key: str, reason: str) -> t.Response:
        """Close a pending proposal unrun; ``data`` is the closed Proposal."""
        return self._decide(workflow_id, "proposals", proposal_id, "reject", idempotency_key, reason, t.Proposal)

    @operation("approve_workflow_decision")
    def approve_decision(
        self, workflow_id: str, decision_id: str, *, idempotency_key: str, reason: str | None = None
    ) -> t.Response:
        """Approve a decision held under four eyes (PROPOSED): its chain runs now; ``data`` is the Decision."""
        return self._decide(workflow_id, "decisions", decision_id, "approve", idempotency_key, reason, t.Decision)

    @operation("reject_workflow_decision")
    def reject_decision(self, workflow_id: str, decision_id: str, *, idempotency_key: str, reason: str) -> t.Response:
        """Close a decision held under four eyes unrun (its maker may withdraw it); ``data`` is the Decision."""
        return self._decide(workflow_id, "decisions", decision_id, "reject", idempotency_key, reason, t.Decision)

    def _decide(self, workflow_id, collection, item_id, answer, idempotency_key, reason, answer_type) -> t.Response:
        _check_id(workflow_id, "id")
        _check_id(item_id, f"{collection.removesuffix('s')}_id")
        answer = self._send(
            "POST",
            f"/v1/workflows/{workflow_id}/{collection}/{item_id}/{answer}",
            body={} if reason is None else {"reason": reason},
            idempotency_key=idempotency_key,
        )
        return self._typed(answer_type, answer, workflow_id)

    @staticmethod
    def _typed(answer_type, answer: t.Response, workflow_id: str) -> t.Response:
        data = t.decode(answer_type, answer.data)
        _expect("workflow_id", data.workflow_id, workflow_id)
        return t.Response(data=data, request_id=answer.request_id, replayed=answer.replayed, status=answer.status)

    @operation("recovery_review_task")
    def review_task(self, workflow_id: str, *, idempotency_key: str, command: Mapping[str, Any]) -> t.Response:
        return self.recover(workflow_id, "review-task", idempotency_key=idempotency_key, command=command)

    @operation("recovery_resolve_step")
    def resolve_step(self, workflow_id: str, *, idempotency_key: str, command: Mapping[str, Any]) -> t.Response:
        return self.recover(workflow_id, "resolve-step", idempotency_key=idempotency_key, command=command)

    @operation("recovery_continue_poll")
    def continue_poll(self, workflow_id: str, *, idempotency_key: str, command: Mapping[str, Any]) -> t.Response:
        return self.recover(workflow_id, "continue-poll", idempotency_key=idempotency_key, command=command)

    @operation("recovery_rearm_wait")
    def rearm_wait(self, workflow_id: str, *, idempotency_key: str, command: Mapping[str, Any]) -> t.Response:
        return self.recover(workflow_id, "rearm-wait", idempotency_key=idempotency_key, command=command)

    @operation("recovery_continue")
    def continue_workflow(self, workflow_id: str, *, idempotency_key: str, command: Mapping[str, Any]) -> t.Response:
        return self.recover(workflow_id, "continue", idempotency_key=idempotency_key, command=command)

    @operation("recovery_retry_step")
    def retry_step(self, workflow_id: str, *, idempotency_key: str, command: Mapping[str, Any]) -> t.Response:
        return self.recover(workflow_id, "retry-step", idempotency_key=idempotency_key, command=command)

    # Worker protocol (tasks:work). Not re-sent after a network error: they carry no Idempotency-Key.

    @operation("claim_queue_task")
    def claim_task(self, queue: str, *, worker: str, lease_seconds: int | None = None) -> t.Claim:
        """Lease the highest-priority claimable task of ``queue``; ``claimed`` false when there is none."""
        if not isinstance(queue, str) or not queue.isascii() or QUEUE.fullmatch(queue) is None:
            raise InvalidArgument("INVALID_ARGUMENT", "queue must be a queue name", field="queue")
        body: dict[str, Any] = {"worker": worker}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        return t.decode(t.Claim, self._send("POST", f"/v1/queues/{queue}/claim", body=body).data)

    @operation("heartbeat_task")
    def heartbeat_task(self, task_id: str, *, attempt_id: str, lease_seconds: int | None = None) -> t.Heartbeat:
        """Extend the attempt's lease; ``late`` true: the lease was lost, stop the work (nothing was extended)."""
        _check_id(task_id, "task_id")
        body: dict[str, Any] = {"attempt_id": _check_id(attempt_id, "attempt_id")}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        beat = t.decode(t.Heartbeat, self._send("POST", f"/v1/tasks/{task_id}/heartbeat", body=body).data)
        _expect("task_id", beat.task_id, task_id)
        _expect("attempt_id", beat.attempt_id, attempt_id)
        return beat

    @operation("complete_task")
    def complete_task(
        self, task_id: str, *, attempt_id: str, outcome: str, result: Any, retryable: bool = False
    ) -> t.Completion:
        """Finish the attempt with SUCCEEDED or FAILED.

        ``late`` true: the lease had been lost; the result was kept as late evidence for the
        operator and changed nothing: the work is no longer wanted, which is not an error.
        """
        _check_id(task_id, "task_id")
        body = {"attempt_id": _check_id(attempt_id, "attempt_id"), "outcome": outcome, "result": result}
        if retryable:
            body["retryable"] = True
        completion = t.decode(t.Completion, self._send("POST", f"/v1/tasks/{task_id}/complete", body=body).data)
        _expect("task_id", completion.task_id, task_id)
        return completion

    @operation("start_workflow")
    def start_workflow(self, *, idempotency_key: str, command: Mapping[str, Any]) -> t.Response:
        """POST /v1/workflows; ``data`` is the answer as JSON (client bodies as RawJSON)."""
        return self._send("POST", "/v1/workflows", body=command, idempotency_key=idempotency_key)

    @operation("signal_workflow")
    def send_signal(self, workflow_id: str, *, idempotency_key: str, command: Mapping[str, Any]) -> t.Response:
        """POST /v1/workflows/{id}/signals; ``data`` is the acceptance receipt as JSON."""
        _check_id(workflow_id, "id")
        answer = self._send(
            "POST", f"/v1/workflows/{workflow_id}/signals", body=command, idempotency_key=idempotency_key
        )
        if isinstance(answer.data, dict) and "workflow_id" in answer.data:
            _expect("workflow_id", answer.data["workflow_id"], workflow_id)
        return answer
