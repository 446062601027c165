"""Authentication, scopes, syntactic checks and their order on every read endpoint."""

import re

import pytest

from core import clock
from history.models import Credential, Scope
from tests.conftest import DETAILS, ENDPOINTS, LISTS, STEPS, bearer, error_of
from tests.factories import (
    NamespaceFactory,
    SignalOperationFactory,
    WorkflowInstanceFactory,
    WorkflowOperationFactory,
    activate,
    poll_round,
    step_of,
)

OTHER_SCOPE = {Scope.READ: Scope.AUDIT_READ, Scope.AUDIT_READ: Scope.READ}
BAD_IDS = ["A" * 32, "a" * 31, "a" * 33, "12345678-1234-1234-1234-123456789abc", "g" * 32]


@pytest.mark.parametrize("name", ENDPOINTS)
def test_every_endpoint_refuses_a_missing_or_revoked_token(history_rows, call, token_for, name):
    path, scope, _ = history_rows.paths[name]
    assert error_of(call(path, None)) == (401, "UNAUTHENTICATED", None)
    token = token_for(scope)
    Credential.objects.update(revoked_at=clock.now())
    assert error_of(call(path, token))[:2] == (401, "UNAUTHENTICATED")


@pytest.mark.parametrize("name", ENDPOINTS)
def test_every_endpoint_needs_its_own_scope_and_no_scope_implies_another(history_rows, call, token_for, name):
    path, scope, _ = history_rows.paths[name]
    assert error_of(call(path, token_for(OTHER_SCOPE[scope])))[:2] == (403, "PERMISSION_DENIED")
    assert call(path, token_for(scope))[0] == 200


@pytest.mark.parametrize("name", ENDPOINTS)
def test_unauthenticated_comes_before_forbidden_before_a_malformed_id(history_rows, call, token_for, name):
    path, scope, _ = history_rows.paths[name]
    broken = path.replace(history_rows.workflow.id, "NOT-AN-ID")
    assert call(broken, None)[0] == 401
    assert call(broken, token_for(OTHER_SCOPE[scope]))[0] == 403
    assert error_of(call(broken, token_for(scope))) == (400, "INVALID_ARGUMENT", "id")


def _id_positions(history_rows, name):
    """(field, id in the path) for every id segment of an endpoint's path."""
    path = history_rows.paths[name][0]
    fields = {
        history_rows.workflow.id: "id",
        history_rows.charge.id: "activation",
        history_rows.poll.id: "activation",
        history_rows.signal.id: "signal",
        history_rows.operation.id: "operation",
        history_rows.charge.task_id: "task",
    }
    return [(fields[value], value) for value in re.findall(r"[0-9a-f]{32}", path)]


@pytest.mark.parametrize("name", ENDPOINTS)
def test_each_malformed_path_id_is_a_400_naming_it(history_rows, call, token_for, name):
    path, scope, _ = history_rows.paths[name]
    token = token_for(scope)
    for field, value in _id_positions(history_rows, name):
        for bad in BAD_IDS:
            assert error_of(call(path.replace(value, bad), token)) == (400, "INVALID_ARGUMENT", field), (field, bad)


@pytest.mark.parametrize("key", ["$root", "%24root", "-charge", "_x", "k" * 65, "caf%C3%A9", "a%20b", "a:b"])
def test_a_malformed_step_key_or_root_is_a_400_naming_the_key(history_rows, call, reader, key):
    for name in ("activations", "activation", "rounds"):
        path = history_rows.paths[name][0].replace("/charge/", f"/{key}/").replace("/settle/", f"/{key}/")
        assert error_of(call(path, reader)) == (400, "INVALID_ARGUMENT", "key"), (name, key)


def test_a_well_formed_step_key_absent_from_the_definition_is_404(history_rows, call, reader):
    for name in ("activations", "activation", "rounds"):
        path = history_rows.paths[name][0].replace("/charge/", "/refund/").replace("/settle/", "/refund/")
        assert error_of(call(path, reader))[:2] == (404, "NOT_FOUND")


BAD_QUERIES = [
    ("page=1", "page"),
    ("Limit=1", "Limit"),
    ("limit=1&limit=2", "limit"),
    ("limit=0", "limit"),
    ("limit=01", "limit"),
    ("limit=101", "limit"),
    ("limit=-1", "limit"),
    ("limit=1.5", "limit"),
    ("limit=%201", "limit"),
    ("limit=abc", "limit"),
    ("limit=", "limit"),
    ("limit=" + "9" * 5000, "limit"),
    ("cursor=", "cursor"),
    ("cursor=" + "x" * 1025, "cursor"),
    ("cursor=not-a-cursor", "cursor"),
    ("cursor=a&cursor=b", "cursor"),
]


@pytest.mark.parametrize("name", LISTS)
def test_list_query_parameters_are_checked_and_the_bad_one_named(history_rows, api, token_for, name):
    path, scope, _ = history_rows.paths[name]
    token = token_for(scope)
    for query, field in BAD_QUERIES:
        response = api.get(f"{path}?{query}", **bearer(token))
        assert response.status_code == 400, query
        assert (response.json()["error"]["code"], response.json()["error"]["field"]) == ("INVALID_ARGUMENT", field)


@pytest.mark.parametrize("name", LISTS)
def test_limit_one_hundred_is_accepted(history_rows, call, token_for, name):
    path, scope, _ = history_rows.paths[name]
    assert call(path, token_for(scope), limit="100")[0] == 200


@pytest.mark.parametrize("name", DETAILS)
@pytest.mark.parametrize("query", [{"limit": "1"}, {"cursor": "x"}, {"fields": "id"}])
def test_detail_endpoints_accept_no_query_parameter(history_rows, call, token_for, name, query):
    path, scope, _ = history_rows.paths[name]
    assert error_of(call(path, token_for(scope), **query)) == (400, "INVALID_ARGUMENT", next(iter(query)))


def _second_page_cursor(call, path, token):
    status, body = call(path, token, limit="1")
    assert status == 200
    return body["data"]["next_cursor"]


@pytest.fixture
def two_of_each(history_rows):
    workflow = history_rows.workflow
    activate(step_of(workflow, "charge"))
    poll_round(history_rows.poll, 2)
    other_signal = SignalOperationFactory(signal__workflow=workflow).signal
    SignalOperationFactory(signal=other_signal)
    SignalOperationFactory(signal=history_rows.signal)
    WorkflowOperationFactory(workflow=workflow)
    history_rows.other_signal = other_signal
    return history_rows


def test_a_cursor_only_works_for_its_own_list_kind(two_of_each, call, token_for):
    h = two_of_each
    cursors = {name: _second_page_cursor(call, h.paths[name][0], token_for(h.paths[name][1])) for name in LISTS}
    for name in LISTS:
        path, scope, _ = h.paths[name]
        for other in LISTS:
            status = call(path, token_for(scope), cursor=cursors[other])[0]
            assert status == (200 if other == name else 400), (name, other)


def test_a_cursor_is_bound_to_its_parents(two_of_each, call, reader, auditor):
    h = two_of_each
    charge_cursor = _second_page_cursor(call, h.paths["activations"][0], reader)
    settle = h.paths["activations"][0].replace("/charge/", "/settle/")
    assert error_of(call(settle, reader, cursor=charge_cursor)) == (400, "INVALID_ARGUMENT", "cursor")
    other_workflow = WorkflowInstanceFactory(namespace=h.workflow.namespace, definition=h.workflow.definition)
    moved = h.paths["activations"][0].replace(h.workflow.id, other_workflow.id)
    assert error_of(call(moved, reader, cursor=charge_cursor))[2] == "cursor"
    ops_cursor = _second_page_cursor(call, h.paths["signal_operations"][0], auditor)
    elsewhere = h.paths["signal_operations"][0].replace(h.signal.id, h.other_signal.id)
    assert error_of(call(elsewhere, auditor, cursor=ops_cursor))[2] == "cursor"


def test_a_tampered_cursor_is_refused(two_of_each, call, reader):
    path = two_of_each.paths["activations"][0]
    cursor = _second_page_cursor(call, path, reader)
    value, _, signature = cursor.rpartition(":")
    forged = value[:-2] + ("AA" if not value.endswith("AA") else "BB") + ":" + signature
    assert error_of(call(path, reader, cursor=forged)) == (400, "INVALID_ARGUMENT", "cursor")
    assert error_of(call(path, reader, cursor=cursor[:-1]))[2] == "cursor"


def test_a_malformed_cursor_is_refused_before_the_instance_is_looked_up(history_rows, call, reader):
    path = history_rows.paths["signals"][0].replace(history_rows.workflow.id, "e" * 32)
    assert error_of(call(path, reader, cursor="forged")) == (400, "INVALID_ARGUMENT", "cursor")
    assert error_of(call(path, reader))[0] == 404


def test_every_page_re_authorises(two_of_each, call, issue_token):
    path = two_of_each.paths["activations"][0]
    issued = issue_token(scopes=[Scope.READ], queues=["payments"])
    cursor = _second_page_cursor(call, path, issued.token)
    Credential.objects.filter(id=issued.credential.id).update(queue_access=["ledger"])
    assert error_of(call(path, issued.token, cursor=cursor))[:2] == (404, "NOT_FOUND")
    Credential.objects.filter(id=issued.credential.id).update(revoked_at=clock.now())
    assert call(path, issued.token, cursor=cursor)[0] == 401


@pytest.mark.parametrize("name", ENDPOINTS)
def test_an_instance_of_another_namespace_or_behind_an_inaccessible_queue_is_not_found(
    history_rows, call, token_for, issue_token, name
):
    path, scope, _ = history_rows.paths[name]
    other = WorkflowInstanceFactory(namespace=NamespaceFactory(name="rival"), definition__spec={"steps": STEPS})
    expected = error_of(call(path.replace(history_rows.workflow.id, "e" * 32), token_for(scope)))
    assert expected[:2] == (404, "NOT_FOUND")
    assert error_of(call(path.replace(history_rows.workflow.id, other.id), token_for(scope))) == expected
    restricted = issue_token(scopes=[scope], queues=["ledger"]).token
    assert error_of(call(path, restricted)) == expected
    assert call(path, issue_token(scopes=[scope], queues=["payments"]).token)[0] == 200


@pytest.mark.parametrize("name", ["activation", "rounds", "signal", "signal_operations", "signal_operation", "task"])
def test_a_child_id_that_is_not_under_this_parent_is_not_found(history_rows, call, token_for, name):
    path, scope, _ = history_rows.paths[name]
    child = path.split("/")[-2 if name in ("rounds", "signal_operations") else -1]
    assert error_of(call(path.replace(child, "e" * 32), token_for(scope)))[:2] == (404, "NOT_FOUND")


def test_methods_other_than_get_are_refused(history_rows, api, reader):
    response = api.post(history_rows.paths["activations"][0], {}, format="json", **bearer(reader))
    assert response.status_code == 405
