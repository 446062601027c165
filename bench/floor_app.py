"""The raw floor of the read API: the same first pages as ours, from a bare WSGI callable with raw SQL and ``json``.

No Django, no DRF: a bearer token's row by its key id, then the page's rows from the same indexes ours
reads, one query per table, serialised with ``json.dumps``. It is what a read costs when nothing but the
database and the wire remain; ``bench/api_floor.py`` serves it on the same gunicorn beside ours. A timeline
item is ours exactly, its links included (the parents they name read with the rows, as ours reads them); an
instance or activation item carries the columns its list is read for.

    gunicorn bench.floor_app:application   (WEAVE_DATABASE_URL names the database)
"""

import datetime as dt
import hashlib
import hmac
import json
import os
from urllib.parse import parse_qs, unquote, urlsplit

import MySQLdb

_url = urlsplit(os.environ["WEAVE_DATABASE_URL"])
_db = MySQLdb.connect(
    host=_url.hostname,
    port=_url.port or 3306,
    user=unquote(_url.username or "root"),
    password=unquote(_url.password or ""),
    database=_url.path.lstrip("/"),
    charset="utf8mb4",
    autocommit=True,
)


def _rows(sql: str, params: list) -> list[dict]:
    cursor = _db.cursor(MySQLdb.cursors.DictCursor)
    cursor.execute(sql, params)
    return list(cursor.fetchall())


def _time(value):
    return value.replace(tzinfo=dt.UTC).isoformat().replace("+00:00", "Z") if value else None


def _namespace(environ) -> str | None:
    """The namespace of the bearer token's live credential: its row by the key id, its digest compared."""
    token = environ.get("HTTP_AUTHORIZATION", "").removeprefix("Bearer ")
    parts = token.split("_")
    found = _rows(
        "SELECT namespace_id, token_digest FROM history_credential WHERE key_id = %s AND revoked_at IS NULL",
        [parts[1] if len(parts) > 2 else ""],
    )
    digest = hashlib.sha256(token.encode()).hexdigest()
    return found[0]["namespace_id"] if found and hmac.compare_digest(found[0]["token_digest"], digest) else None


def _instances(namespace: str, query: dict, limit: int) -> dict:
    state = query.get("state", [None])[0]
    where, params = (
        ("namespace_id = %s AND state = %s", [namespace, state]) if state else ("namespace_id = %s", [namespace])
    )
    items = _rows(
        "SELECT id, definition_id, business_key, state, paused, revision, created_at, updated_at"
        f" FROM history_workflowinstance WHERE {where} ORDER BY updated_at DESC, id DESC LIMIT %s",
        [*params, limit + 1],
    )
    ids = {row["definition_id"] for row in items}
    marks = ", ".join(["%s"] * len(ids))
    names = (
        _rows(f"SELECT id, name, version FROM history_workflowdefinition WHERE id IN ({marks})", list(ids))
        if ids
        else []
    )
    definitions = {row["id"]: {"name": row["name"], "version": row["version"]} for row in names}
    page = [
        {
            "id": row["id"],
            "definition": definitions[row["definition_id"]],
            "state": row["state"],
            "paused": bool(row["paused"]),
            "business_key": row["business_key"],
            "revision": str(row["revision"]),
            "created_at": _time(row["created_at"]),
            "updated_at": _time(row["updated_at"]),
        }
        for row in items[:limit]
    ]
    return {"items": page, "next": items[limit]["id"] if len(items) > limit else None}


def _instance(namespace: str, instance_id: str) -> dict | None:
    found = _rows(
        "SELECT id, revision FROM history_workflowinstance WHERE id = %s AND namespace_id = %s",
        [instance_id, namespace],
    )
    return found[0] if found else None


# What an event's links need and its row does not hold, read with its row as ours reads it: the task, activation or
# signal its subject belongs to, and which audit an audit subject is.
_PARENTS = (
    "CASE e.subject_type"
    " WHEN 'attempt' THEN (SELECT task_id FROM history_attempt WHERE id = e.subject_id)"
    " WHEN 'result' THEN (SELECT task_id FROM history_resultevent WHERE id = e.subject_id)"
    " WHEN 'inbox' THEN (SELECT task_id FROM history_inboxrecord WHERE id = e.subject_id)"
    " WHEN 'audit' THEN (SELECT task_id FROM history_executionaudit WHERE id = e.subject_id) END AS task_id,"
    " CASE WHEN e.subject_type = 'wait' THEN (SELECT activation_id FROM history_wait WHERE id = e.subject_id)"
    " END AS activation_id,"
    " CASE e.subject_type"
    " WHEN 'inbox' THEN (SELECT signal_id FROM history_inboxrecord WHERE id = e.subject_id)"
    " WHEN 'audit' THEN (SELECT signal_id FROM history_signaloperation WHERE id = e.subject_id) END AS signal_id,"
    " CASE WHEN e.subject_type <> 'audit' THEN ''"
    " WHEN EXISTS (SELECT 1 FROM history_workflowoperation WHERE id = e.subject_id) THEN 'workflow_operation'"
    " WHEN EXISTS (SELECT 1 FROM history_signaloperation WHERE id = e.subject_id) THEN 'signal_operation'"
    " ELSE '' END AS audit_record"
)


def _event_links(instance_id: str, row: dict) -> dict:
    workflow, subject, key = f"/v1/workflows/{instance_id}", row["subject_type"], row["step_key"]
    step = f"{workflow}/steps/{key}" if key and key != "$root" else None
    activation = row["subject_id"] if subject == "activation" else row["activation_id"]
    task = row["subject_id"] if subject == "task" else row["task_id"]
    signal = row["subject_id"] if subject == "signal" else row["signal_id"]
    links = {
        "workflow": workflow if subject == "instance" else None,
        "activations": f"{step}/activations" if subject == "step" and step else None,
        "activation": f"{step}/activations/{activation}" if activation and step else None,
        "task": f"{workflow}/tasks/{task}" if task else None,
        "signal": f"{workflow}/signals/{signal}" if signal else None,
        "operations": f"{workflow}/operations" if row["audit_record"] == "workflow_operation" else None,
    }
    if row["audit_record"] == "signal_operation" and signal:
        links["signal_operation"] = f"{workflow}/signals/{signal}/operations/{row['subject_id']}"
    return {name: path for name, path in links.items() if path}


def _events(namespace: str, instance_id: str, limit: int) -> dict | None:
    instance = _instance(namespace, instance_id)
    if instance is None:
        return None
    rows = _rows(
        "SELECT sequence, kind, subject_type, subject_id, step_key, `before`, `after`, detail, actor_kind, actor_id,"
        f" operation_id, audit_id, repair, reconstructed, created_at, {_PARENTS}"
        " FROM history_instanceevent AS e WHERE instance_id = %s ORDER BY sequence LIMIT %s",
        [instance_id, limit + 1],
    )
    items = [
        {
            "sequence": row["sequence"],
            "kind": row["kind"],
            "subject": {
                "type": row["subject_type"],
                "id": row["subject_id"],
                **({"step_key": row["step_key"]} if row["step_key"] else {}),
            },
            **{
                name: row[name]
                for name in ("before", "after", "detail", "operation_id", "audit_id", "repair")
                if row[name]
            },
            "actor": {"kind": row["actor_kind"], **({"id": row["actor_id"]} if row["actor_id"] else {})},
            "reconstructed": bool(row["reconstructed"]),
            "created_at": _time(row["created_at"]),
            "links": _event_links(instance_id, row),
        }
        for row in rows[:limit]
    ]
    return {"workflow_id": instance_id, "revision": str(instance["revision"]), "items": items}


def _activations(namespace: str, instance_id: str, key: str, limit: int) -> dict | None:
    if _instance(namespace, instance_id) is None:
        return None
    steps = _rows(
        "SELECT id, `key`, kind, state, revision, current_activation_id FROM history_step"
        " WHERE instance_id = %s AND `key` = %s",
        [instance_id, key],
    )
    if not steps:
        return None
    rows = _rows(
        "SELECT id, step_id, sequence, state, revision, task_id, created_at, updated_at, completed_at"
        " FROM history_activation WHERE step_id = %s ORDER BY sequence DESC LIMIT %s",
        [steps[0]["id"], limit + 1],
    )
    task_ids = [row["task_id"] for row in rows[:limit] if row["task_id"]]
    marks = ", ".join(["%s"] * len(task_ids))
    tasks = {
        task["id"]: {**task, "revision": str(task["revision"])}
        for task in (
            _rows(
                f"SELECT id, state, revision, attempt_count, max_attempts FROM history_task WHERE id IN ({marks})",
                task_ids,
            )
            if task_ids
            else []
        )
    }
    items = [
        {
            **{name: row[name] for name in ("id", "step_id", "sequence", "state")},
            "revision": str(row["revision"]),
            "task": tasks.get(row["task_id"]),
            **{name: _time(row[name]) for name in ("created_at", "updated_at", "completed_at")},
        }
        for row in rows[:limit]
    ]
    return {"step": {**steps[0], "revision": str(steps[0]["revision"])}, "items": items}


def application(environ, start_response):
    namespace = _namespace(environ)
    query = parse_qs(environ.get("QUERY_STRING", ""))
    limit = min(int(query.get("limit", ["20"])[0]), 100)
    parts = environ["PATH_INFO"].strip("/").split("/")
    data = None
    if namespace is not None:
        match parts:
            case ["floor", "workflows"]:
                data = _instances(namespace, query, limit)
            case ["floor", "workflows", instance_id, "events"]:
                data = _events(namespace, instance_id, limit)
            case ["floor", "workflows", instance_id, "steps", key, "activations"]:
                data = _activations(namespace, instance_id, key, limit)
    status = "200 OK" if data is not None else "404 Not Found"
    body = json.dumps({"data": data}).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
