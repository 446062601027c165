"""GET /v1/: the index of the API, answered to anyone, naming paths that answer."""

import pytest

from history.models import Scope
from tests.conftest import error_of

pytestmark = pytest.mark.django_db

LINKS = {
    "docs": "/v1/docs/",
    "schema": "/v1/openapi.json",
    "workflows": "/v1/workflows",
    "review_summary": "/v1/workflows/review-summary",
    "credential_self": "/v1/credentials/self",
}


def test_the_index_names_the_api_its_version_and_its_links_without_a_token(call):
    status, body = call("/v1/", None)
    assert status == 200
    assert body["data"] == {"name": "Weave API", "version": "1", "links": LINKS}


def test_the_index_reads_no_credential_so_a_bad_token_changes_nothing(call):
    unknown = "weave_" + "0" * 16 + "_" + "x" * 43
    assert call("/v1/", unknown)[1]["data"] == call("/v1/", None)[1]["data"]


def test_the_index_takes_no_query_parameter_and_names_the_one_sent(call):
    assert error_of(call("/v1/", None, limit="1")) == (400, "INVALID_ARGUMENT", "limit")


def test_every_link_of_the_index_answers(api, call, issue_token):
    token = issue_token(scopes=[Scope.READ]).token
    for name, path in call("/v1/", None)[1]["data"]["links"].items():
        response = api.get(path, HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 200, (name, response.content)
