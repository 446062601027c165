"""A scripted server for the SDK's unit tests, and a Retry that records its waits instead of sleeping."""

import datetime as dt
import json

import httpx
from weave_sdk import WeaveClient
from weave_sdk.retry import Retry

T0 = dt.datetime(2026, 9, 18, 8, 0, 0, tzinfo=dt.UTC)
W = "1" * 32
# The answer of GET /v1/workflows/{W}: a RUNNING instance with no steps.
WORKFLOW = {
    "id": W,
    "namespace": "acme",
    "definition": {"name": "order", "version": 1},
    "state": "RUNNING",
    "paused": False,
    "revision": "4",
    "control_revision": "1",
    "created_at": "2026-09-18T08:00:00Z",
    "updated_at": "2026-09-18T08:00:01Z",
    "steps": [],
    "eligibility": {},
}


class Server:
    """Answers from a list of (status, body text or exception), the last one again and again; records every
    request. A body that is not text is wrapped in the envelope as its ``data``."""

    def __init__(self, *answers, headers=None):
        self.answers = list(answers)
        self.requests = []
        self.headers = headers or {}

    def __call__(self, request):
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        status, body = answer[:2]
        headers = answer[2] if len(answer) > 2 else {}
        if isinstance(body, Exception):
            raise body
        text = body if isinstance(body, str) else json.dumps({"request_id": "a" * 32, "data": body})
        return httpx.Response(status, text=text, headers={"X-Request-Id": "a" * 32} | self.headers | headers)


class Waits:
    """The sleep, clock and random of a Retry: each wait is recorded and moves the clock, nothing sleeps."""

    def __init__(self, share: float = 0.0):
        self.share = share
        self.now = T0
        self.waited: list[float] = []

    def retry(self, **policy) -> Retry:
        return Retry(sleep=self.sleep, now=lambda: self.now, random=lambda: self.share, **policy)

    def sleep(self, seconds: float) -> None:
        self.waited.append(seconds)
        self.now += dt.timedelta(seconds=seconds)


def client_for(server, waits: Waits | None = None, **policy) -> WeaveClient:
    """A client of ``server`` whose retries wait on ``waits`` (a fresh one by default), never on the real clock."""
    retry = (waits or Waits()).retry(**policy)
    return WeaveClient("http://weave.test", "weave_token", transport=httpx.MockTransport(server), retry=retry)
