"""Workflow definitions: validation of a step graph and its immutable storage.

A definition document (JSON) is::

    {"name": "payments", "version": 1, "application": "billing", "deadline_seconds": 86400,
     "steps": [{"key": "charge", "kind": "TASK", "after": [], "handler": "demo.echo",
                "queue": "payments", ...}, ...]}

``version`` is optional (next free version); ``deadline_seconds`` (the instance deadline) is
optional, as is ``review_sla_seconds`` (how long an instance may wait in review before the console's
queue flags it; the engine ignores it). ``application`` names the application whose quota the instance's tasks charge.
Every error names the offending field (``steps[2].after[0]``). The stored ``spec`` is the
normalised document: every step with its key, kind, after and all kind-specific fields with
their defaults filled in, and ``contract`` (the result contract, a JSON Schema; ``{}`` allows
any result). ``queues`` is the sorted list of queue names the steps reference.

Contracts judge numbers exactly: the value and the contract's own numbers are ints and Decimals
(``exactjson.to_python``; the stored spec keeps Decimals too), ``multipleOf`` is exact arithmetic
(``exactnumber.is_multiple``) and ``1.0`` is an integer wherever the contract's draft says so. Every
check of a contract (a TASK result, a signal payload, an operator's ResolveStep or ReviewTask, their
previews) goes through ``contract_violation``, with each contract's validator built once.
"""

import decimal
import functools
from typing import Any

import attrs
import jsonschema
from django.db import IntegrityError, transaction

from core import exactjson, exactnumber
from core.errors import AlreadyExists, InvalidArgument
from core.ids import ROOT_STEP_KEY, is_step_key
from history.models import Application, Queue, StepKind, WorkflowDefinition
from history.selectors.access import definitions_kept
from history.tenancy import is_name

KINDS = (StepKind.TASK, StepKind.POLL, StepKind.SIGNAL, StepKind.TIMER)
CLASSIFICATIONS = ("SUCCEEDED", "FAILED", "PENDING")
MAX_SECONDS = 366 * 24 * 3600
DEFAULT_TASK_DEADLINE = 24 * 3600
DEFAULT_SIGNAL_TTL = 7 * 24 * 3600
DEFAULT_TIMER_GRACE = 3600
DEFAULT_MAX_LATENESS = 300

_COMMON = ("key", "kind", "after", "contract")
# A SIGNAL step's own fields, and a POLL step's final signal's.
_SIGNAL_FIELDS = (
    "name",
    "payload_version",
    "correlation",
    "deadline_seconds",
    "expected_seconds",
    "signal_ttl_seconds",
)
_FIELDS = {
    StepKind.TASK: (
        *_COMMON,
        "handler",
        "queue",
        "priority",
        "max_attempts",
        "deadline_seconds",
        "latest_start_seconds",
    ),
    StepKind.POLL: (
        *_COMMON,
        "handler",
        "queue",
        "priority",
        "max_rounds",
        "attempts_per_round",
        "interval_seconds",
        "poll_deadline_seconds",
        "round_deadline_seconds",
        "mapping",
        "final_signal",
    ),
    StepKind.SIGNAL: (*_COMMON, *_SIGNAL_FIELDS),
    StepKind.TIMER: (*_COMMON, "duration_seconds", "deadline_seconds", "max_lateness_seconds"),
}


def _fail(field: str, message: str) -> InvalidArgument:
    return InvalidArgument(f"{field}: {message}", field=field)


def _integer(doc: dict, key: str, path: str, *, low: int, high: int, default: Any = ...) -> int | None:
    if key not in doc:
        if default is ...:
            raise _fail(f"{path}.{key}" if path else key, "is required")
        return default
    value = doc[key]
    field = f"{path}.{key}" if path else key
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(field, "must be an integer")
    if not low <= value <= high:
        raise _fail(field, f"must be between {low} and {high}")
    return value


def _text(doc: dict, key: str, path: str, *, max_length: int, default: Any = ...) -> str:
    field = f"{path}.{key}"
    if key not in doc:
        if default is ...:
            raise _fail(field, "is required")
        return default
    value = doc[key]
    if not isinstance(value, str) or not value.strip() or len(value) > max_length or "\x00" in value:
        raise _fail(field, f"must be a non-blank string of at most {max_length} characters")
    return value


def _only(doc: dict, allowed: tuple[str, ...], path: str) -> None:
    for key in doc:
        if key not in allowed:
            raise _fail(f"{path}.{key}" if path else key, "is not a known field")


def _correlation(doc: dict, path: str) -> str:
    value = _text(doc, "correlation", path, max_length=128, default="business_key")
    if value == "business_key" or (value.startswith("input.") and len(value) > len("input.")):
        return value
    raise _fail(f"{path}.correlation", "must be 'business_key' or 'input.<field>'")


def _multiple_of(validator, divisor, instance, schema):
    if validator.is_type(instance, "number") and not exactnumber.is_multiple(instance, divisor):
        yield jsonschema.ValidationError(f"{instance!r} is not a multiple of {divisor!r}")


def _evolve(self, **changes):
    """jsonschema's own ``evolve`` (the validator of a subschema), except that a subschema naming its draft in
    ``$schema`` (as each part of the 2019-09 and 2020-12 meta-schemas does) gets that draft's exact validator,
    not the stock one: numbers stay exact all the way down."""
    schema = changes.setdefault("schema", self.schema)
    named = jsonschema.validators.validator_for(schema, default=None)
    for field in attrs.fields(type(self)):
        if field.init and field.alias not in changes:
            changes[field.alias] = getattr(self, field.name)
    return (type(self) if named is None else _exact_draft(named))(**changes)


@functools.cache
def _exact_draft(draft: type) -> type:
    """``draft``'s validator judging numbers exactly: ``multipleOf`` (draft 3: ``divisibleBy``) by exact arithmetic,
    and an integral Decimal counted as an integer wherever the draft counts ``1.0`` as one (draft 6 on)."""
    keywords = {name: _multiple_of for name in ("multipleOf", "divisibleBy") if name in draft.VALIDATORS}
    types = draft.TYPE_CHECKER
    if types.is_type(1.0, "integer"):
        types = types.redefine(
            "integer",
            lambda _, instance: (
                exactnumber.is_integral(instance)
                if isinstance(instance, decimal.Decimal)
                else draft.TYPE_CHECKER.is_type(instance, "integer")
            ),
        )
    exact = jsonschema.validators.extend(draft, validators=keywords, type_checker=types)
    exact.evolve = _evolve
    return exact


def _exact_validator_class(schema: dict) -> type:
    return _exact_draft(jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator))


@functools.lru_cache(maxsize=1024)
def _compiled(schema_text: str):
    schema = exactjson.to_python(exactjson.loads(schema_text))
    return _exact_validator_class(schema)(schema)


def contract_validator(*, schema: dict):
    """The exact validator of a result contract, built once per contract (keyed by its exact text)."""
    return _compiled(exactjson.dumps(schema))


def _contract(doc: dict, path: str) -> dict:
    schema = doc.get("contract", {})
    field = f"{path}.contract"
    if not isinstance(schema, dict):
        raise _fail(field, "must be a JSON Schema object")
    draft = _exact_validator_class(schema)
    # The draft's own meta-schema, read with exact numbers (``"minItems": 2.0`` is an integer from draft 6 on).
    meta = _exact_draft(jsonschema.validators.validator_for(draft.META_SCHEMA, default=draft))
    error = next(meta(draft.META_SCHEMA, format_checker=meta.FORMAT_CHECKER).iter_errors(schema), None)
    if error is not None:
        raise _fail(field, f"is not a valid JSON Schema: {error.message}")
    return schema


def _signal_fields(doc: dict, path: str) -> dict:
    deadline = _integer(doc, "deadline_seconds", path, low=1, high=MAX_SECONDS)
    # When the signal is expected, well before its deadline: later, the watchdog marks the instance (the engine
    # still waits until the deadline).
    expected = _integer(doc, "expected_seconds", path, low=1, high=deadline, default=None)
    return {
        "name": _text(doc, "name", path, max_length=128),
        "payload_version": _text(doc, "payload_version", path, max_length=64),
        "correlation": _correlation(doc, path),
        "deadline_seconds": deadline,
        **({"expected_seconds": expected} if expected else {}),
        "signal_ttl_seconds": _integer(
            doc, "signal_ttl_seconds", path, low=1, high=MAX_SECONDS, default=DEFAULT_SIGNAL_TTL
        ),
    }


def _mapping(doc: dict, path: str) -> dict:
    field = f"{path}.mapping"
    if "mapping" not in doc:
        raise _fail(field, "is required for a POLL step (result field → SUCCEEDED / FAILED / PENDING)")
    mapping = doc["mapping"]
    if not isinstance(mapping, dict):
        raise _fail(field, "must be an object {field, values}")
    _only(mapping, ("field", "values"), field)
    result_field = _text(mapping, "field", field, max_length=128)
    values = mapping.get("values")
    if not isinstance(values, dict) or not values:
        raise _fail(f"{field}.values", "must be a non-empty object of result value → classification")
    for value, classification in values.items():
        if classification not in CLASSIFICATIONS:
            raise _fail(f"{field}.values.{value}", f"must be one of {', '.join(CLASSIFICATIONS)}")
    if "SUCCEEDED" not in values.values():
        raise _fail(f"{field}.values", "must map at least one value to SUCCEEDED")
    return {"field": result_field, "values": dict(values)}


def _step(doc: Any, index: int, queue_names: set[str]) -> dict:
    path = f"steps[{index}]"
    if not isinstance(doc, dict):
        raise _fail(path, "must be an object")
    key = doc.get("key")
    if key == ROOT_STEP_KEY:
        raise _fail(f"{path}.key", "$root is the internal root step and cannot be defined")
    if not is_step_key(key):
        raise _fail(f"{path}.key", "must be 1-64 ASCII characters: a letter or digit, then letters, digits, _ . -")
    kind = doc.get("kind")
    if kind not in KINDS:
        raise _fail(f"{path}.kind", f"must be one of {', '.join(KINDS)}")
    _only(doc, _FIELDS[kind], path)
    after = doc.get("after", [])
    if not isinstance(after, list):
        raise _fail(f"{path}.after", "must be a list of step keys")
    for position, item in enumerate(after):
        if not is_step_key(item) or item in after[:position]:
            raise _fail(f"{path}.after[{position}]", "must be a distinct, well-formed step key")
    step: dict[str, Any] = {"key": key, "kind": str(kind), "after": list(after)}
    if kind in (StepKind.TASK, StepKind.POLL):
        step["handler"] = _text(doc, "handler", path, max_length=128)
        queue = _text(doc, "queue", path, max_length=128)
        if queue not in queue_names:
            raise _fail(f"{path}.queue", f"no queue named {queue!r} in this namespace")
        step["queue"] = queue
        step["priority"] = _integer(doc, "priority", path, low=-1000, high=1000, default=0)
    if kind == StepKind.TASK:
        step["max_attempts"] = _integer(doc, "max_attempts", path, low=1, high=100, default=1)
        step["deadline_seconds"] = _integer(
            doc, "deadline_seconds", path, low=1, high=MAX_SECONDS, default=DEFAULT_TASK_DEADLINE
        )
        step["latest_start_seconds"] = _integer(
            doc, "latest_start_seconds", path, low=1, high=step["deadline_seconds"], default=None
        )
    elif kind == StepKind.POLL:
        step["max_rounds"] = _integer(doc, "max_rounds", path, low=1, high=10_000)
        step["attempts_per_round"] = _integer(doc, "attempts_per_round", path, low=1, high=100, default=1)
        step["interval_seconds"] = _integer(doc, "interval_seconds", path, low=1, high=MAX_SECONDS)
        step["poll_deadline_seconds"] = _integer(doc, "poll_deadline_seconds", path, low=1, high=MAX_SECONDS)
        step["round_deadline_seconds"] = _integer(
            doc, "round_deadline_seconds", path, low=1, high=step["poll_deadline_seconds"], default=None
        ) or min(DEFAULT_MAX_LATENESS, step["poll_deadline_seconds"])
        step["mapping"] = _mapping(doc, path)
        final = doc.get("final_signal")
        if final is not None:
            if not isinstance(final, dict):
                raise _fail(f"{path}.final_signal", "must be an object")
            _only(final, _SIGNAL_FIELDS, f"{path}.final_signal")
            final = _signal_fields(final, f"{path}.final_signal")
        step["final_signal"] = final
    elif kind == StepKind.SIGNAL:
        step.update(_signal_fields(doc, path))
    else:
        step["duration_seconds"] = _integer(doc, "duration_seconds", path, low=0, high=MAX_SECONDS)
        step["deadline_seconds"] = _integer(
            doc,
            "deadline_seconds",
            path,
            low=max(step["duration_seconds"], 1),
            high=MAX_SECONDS,
            default=step["duration_seconds"] + DEFAULT_TIMER_GRACE,
        )
        step["max_lateness_seconds"] = _integer(
            doc, "max_lateness_seconds", path, low=0, high=MAX_SECONDS, default=DEFAULT_MAX_LATENESS
        )
    step["contract"] = _contract(doc, path)
    return step


def _check_graph(steps: list[dict]) -> None:
    index_of: dict[str, int] = {}
    for index, step in enumerate(steps):
        if step["key"] in index_of:
            raise _fail(f"steps[{index}].key", f"duplicate step key {step['key']!r}")
        index_of[step["key"]] = index
    for index, step in enumerate(steps):
        for position, before in enumerate(step["after"]):
            if before not in index_of:
                raise _fail(f"steps[{index}].after[{position}]", f"unknown step {before!r}")
            if before == step["key"]:
                raise _fail(f"steps[{index}].after[{position}]", "a step cannot come after itself")
    # Kahn's algorithm: whatever cannot be ordered lies on or behind a cycle.
    remaining = {step["key"]: set(step["after"]) for step in steps}
    while True:
        ready = [key for key, before in remaining.items() if not before]
        if not ready:
            break
        for key in ready:
            del remaining[key]
        for before in remaining.values():
            before.difference_update(ready)
    if remaining:
        first = min(remaining, key=index_of.__getitem__)
        raise _fail(f"steps[{index_of[first]}].after", f"the graph has a cycle through {sorted(remaining)}")


def definition_validate(*, namespace_id: str, document: Any) -> dict:
    """The normalised definition (name, version?, application, deadline_seconds, review_sla_seconds?, steps, queues).

    Refuses (InvalidArgument naming the field) a bad step key, ``$root``, a duplicate key, an
    unknown ``after``, a cycle, an unknown queue or application, a POLL step without its
    classification mapping and a result contract that is not a valid JSON Schema.
    """
    if not isinstance(document, dict):
        raise _fail("definition", "must be a JSON object")
    document = exactjson.to_python(document)
    _only(
        document,
        ("name", "version", "application", "deadline_seconds", "review_sla_seconds", "repair_window_seconds", "steps"),
        "",
    )
    name = document.get("name")
    if not isinstance(name, str) or not is_name(name):
        raise _fail("name", "must match [a-z0-9][a-z0-9_.-]{0,63}")
    version = _integer(document, "version", "", low=1, high=2**31 - 1, default=None)
    application = document.get("application")
    if (
        not isinstance(application, str)
        or not Application.objects.filter(namespace_id=namespace_id, name=application).exists()
    ):
        raise _fail("application", "must name an application of this namespace")
    deadline_seconds = _integer(document, "deadline_seconds", "", low=1, high=MAX_SECONDS, default=None)
    # How long an instance may wait in review before the console's queue flags it (no engine effect).
    review_sla = _integer(document, "review_sla_seconds", "", low=1, high=MAX_SECONDS, default=None)
    # How long after a repair (a Continue) the repaired step has to move before the repair is judged ineffective
    # (``recovery.repairs``; no engine effect). Absent: a window per step kind.
    repair_window = _integer(document, "repair_window_seconds", "", low=1, high=MAX_SECONDS, default=None)
    raw_steps = document.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise _fail("steps", "must be a non-empty list")
    queue_names = set(Queue.objects.filter(namespace_id=namespace_id).values_list("name", flat=True))
    steps = [_step(doc, index, queue_names) for index, doc in enumerate(raw_steps)]
    _check_graph(steps)
    return {
        "name": name,
        "version": version,
        "spec": {
            "application": application,
            "deadline_seconds": deadline_seconds,
            **({"review_sla_seconds": review_sla} if review_sla else {}),
            **({"repair_window_seconds": repair_window} if repair_window else {}),
            "steps": steps,
        },
        "queues": sorted({step["queue"] for step in steps if "queue" in step}),
    }


def definition_create(*, namespace_id: str, document: Any) -> WorkflowDefinition:
    """Store a validated definition as a new immutable row; a new version is a new row.

    Without ``version`` the next free version is used; an existing (name, version) is ALREADY_EXISTS.
    """
    valid = definition_validate(namespace_id=namespace_id, document=document)
    try:
        with transaction.atomic():
            version = valid["version"]
            if version is None:
                latest = (
                    WorkflowDefinition.objects.filter(namespace_id=namespace_id, name=valid["name"])
                    .order_by("-version")
                    .values_list("version", flat=True)
                    .first()
                )
                version = (latest or 0) + 1
            return WorkflowDefinition.objects.create(
                namespace_id=namespace_id,
                name=valid["name"],
                version=version,
                spec=valid["spec"],
                queues=valid["queues"],
            )
    except IntegrityError:
        raise AlreadyExists(
            f"definition {valid['name']} version {valid['version']} already exists", field="version"
        ) from None


def definition_of(instance) -> WorkflowDefinition:
    """The definition ``instance`` runs; DoesNotExist when it has none. Read once per process: never change it."""
    definition = definitions_kept(instance.definition_id)
    if definition is None:
        raise WorkflowDefinition.DoesNotExist(f"definition {instance.definition_id} does not exist")
    return definition


def contract_violation(*, step_spec: dict, value_text: str) -> str | None:
    """Why ``value_text`` (exact JSON) breaks the step's result contract, or None when it satisfies it.

    Numbers are judged exactly (``19.99`` is a multiple of ``0.01``; ``0.30000000000000001`` is not).
    A value beyond the JSON limits (``exactjson.JSONLimitError``: a number literal too long to
    convert, nesting too deep) cannot be checked, so it breaks the contract.
    """
    schema = step_spec.get("contract") or {}
    if not schema:
        return None
    try:
        value = exactjson.to_python(exactjson.loads(value_text))
    except exactjson.JSONLimitError as exc:
        return f"the value cannot be checked: {exc}"
    error = jsonschema.exceptions.best_match(contract_validator(schema=schema).iter_errors(value))
    return None if error is None else error.message[:500]


def poll_classify(*, step_spec: dict, result_text: str) -> str | None:
    """The fixed mapping's classification (SUCCEEDED / FAILED / PENDING) of a query result, None if unmapped."""
    mapping = step_spec["mapping"]
    result = exactjson.loads(result_text)
    if not isinstance(result, dict):
        return None
    value = result.get(mapping["field"])
    if isinstance(value, exactjson.Number) or not isinstance(value, str):
        return None
    return mapping["values"].get(value)
