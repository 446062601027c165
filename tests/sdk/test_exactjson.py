"""The SDK's JSON scanner refuses an answer nested deeper than its limit, and reads every true answer."""

import pytest
from weave_sdk import RawJSON, WeaveResponseError
from weave_sdk.exactjson import MAX_DEPTH, loads

from tests.sdk.mock import Server, client_for

W, S, A = "1" * 32, "2" * 32, "3" * 32
# The server refuses a client JSON value nested deeper than this.
SERVER_MAX_DEPTH = 64


def _nested(depth: int, inner: str = "1.10") -> str:
    return "[" * depth + inner + "]" * depth


def test_a_value_nested_to_the_limit_is_read_and_one_level_more_is_refused():
    assert loads(_nested(MAX_DEPTH - 1, '{"a":1.10}')) is not None
    for text in (
        _nested(MAX_DEPTH + 1),
        _nested(MAX_DEPTH, "{}"),
        '{"a":' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1),
    ):
        with pytest.raises(WeaveResponseError) as refused:
            loads(text)
        assert refused.value.code == "BAD_RESPONSE" and f"deeper than {MAX_DEPTH}" in refused.value.message


def test_an_answer_nested_far_past_the_recursion_limit_is_a_response_error_not_a_recursion_error():
    body = '{"request_id":"' + "a" * 32 + '","data":' + _nested(100_000) + "}"
    with pytest.raises(WeaveResponseError) as refused:
        client_for(Server((200, body))).get_workflow(W)
    assert (refused.value.code, refused.value.status, refused.value.request_id) == ("BAD_RESPONSE", 200, "a" * 32)


def test_client_json_as_deep_as_the_server_stores_reads_exactly_inside_its_answer():
    deepest = _nested(SERVER_MAX_DEPTH - 1, '{"amount":1.10}')
    step = '{"id":"' + S + '","key":"charge","kind":"TASK","state":"ACTIVE","revision":"2"}'
    activation = (
        '{"id":"' + A + '","step_id":"' + S + '","sequence":1,"state":"ACTIVE","revision":"1",'
        '"created_at":"2026-09-18T08:00:00Z","updated_at":"2026-09-18T08:00:00Z"}'
    )
    body = (
        '{"request_id":"' + "a" * 32 + '","data":{"instance_id":"' + W + '","revision":"3","step":' + step
        + ',"activation":' + activation + ',"input":' + deepest + ',"output":' + deepest + "}}"
    )  # fmt: skip
    detail = client_for(Server((200, body))).get_workflow_activation(W, "charge", A)
    assert detail.input == RawJSON(deepest) and detail.output == RawJSON(deepest)
