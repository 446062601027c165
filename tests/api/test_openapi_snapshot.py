"""The API contract is reviewed as a diff: the served OpenAPI description must equal the committed snapshot.

A change to a command, an answer, a parameter or an error shows in the snapshot's diff, so it is reviewed with the
code that makes it. The snapshot is written by drf-spectacular's own command (REWRITE), which gives the served
document: the second test holds it to that.
"""

import difflib
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings

pytestmark = pytest.mark.django_db

SNAPSHOT = Path(__file__).resolve().parents[2] / "api" / "openapi.snapshot.json"
REWRITE = (
    "DJANGO_SETTINGS_MODULE=weave_site.settings_test .venv/bin/python manage.py spectacular "
    "--format openapi-json --validate --fail-on-warn --file api/openapi.snapshot.json"
)
# The document states the body limit: compared at its default, which the rewrite command sees too.
DEFAULTS = override_settings(WEAVE_MAX_BODY_BYTES=1024 * 1024)


def _lines(document: dict) -> list[str]:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False).splitlines(keepends=True)


def _changed(committed, served, pointer: str = "") -> list[str]:
    """The JSON pointers where the two documents differ (the innermost object or array that holds each change)."""
    if isinstance(committed, dict) and isinstance(served, dict):
        keys = sorted(committed.keys() | served.keys())
        inner = [(key, committed.get(key), served.get(key)) for key in keys if committed.get(key) != served.get(key)]
        if any(key not in committed or key not in served for key, _, _ in inner):
            return [pointer or "/"]
        escaped = [(key.replace("~", "~0").replace("/", "~1"), old, new) for key, old, new in inner]
        return [found for key, old, new in escaped for found in _changed(old, new, f"{pointer}/{key}")]
    return [pointer or "/"] if committed != served else []


@DEFAULTS
def test_the_served_description_is_the_committed_snapshot(api):
    served = api.get("/v1/openapi.json").json()
    committed = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    if served != committed:
        diff = difflib.unified_diff(
            _lines(committed), _lines(served), "api/openapi.snapshot.json (committed)", "/v1/openapi.json (served)"
        )
        pytest.fail(
            "The served OpenAPI description is not the committed snapshot. Review the contract change below; if it "
            f"is intended, rewrite the snapshot and commit it with the change:\n    {REWRITE}\n\nChanged at:\n    "
            + "\n    ".join(_changed(committed, served))
            + "\n\n"
            + "".join(diff),
            pytrace=False,
        )


@DEFAULTS
def test_the_rewrite_command_writes_the_served_description(api, tmp_path):
    written = tmp_path / "openapi.json"
    call_command("spectacular", format="openapi-json", validate=True, fail_on_warn=True, file=str(written))
    assert json.loads(written.read_text(encoding="utf-8")) == api.get("/v1/openapi.json").json()
