"""List every instance in review by cause, each with its last ten timeline events.

    python examples/review_queue.py --url http://127.0.0.1:8000 --token <token printed by make run>

Needs a running server (``make run``) and a token with ``workflows:read``. The review summary
gives the causes; for each cause the instance query lists its instances, newest in review
first, following the cursors; each instance's timeline is read newest first.
"""

import argparse
from collections.abc import Iterator
from dataclasses import dataclass

from weave_sdk import WeaveClient
from weave_sdk.types import WorkflowEvent, WorkflowItem

EVENTS_SHOWN = 10


@dataclass(frozen=True)
class InReview:
    instance: WorkflowItem
    events: list[WorkflowEvent]  # newest first


def review_queue(client: WeaveClient) -> dict[str, list[InReview]]:
    """``{cause: [instance with its last events, …]}`` for every instance the token may see in review."""
    queue: dict[str, list[InReview]] = {}
    for count in client.review_summary().causes:
        cause = count.review_cause
        found = client.iter_workflows(state="NEEDS_REVIEW", review_cause=cause, order="review_since")
        queue[cause] = [InReview(instance, _last_events(client, instance.id)) for instance in found]
    return queue


def _last_events(client: WeaveClient, workflow_id: str) -> list[WorkflowEvent]:
    return client.list_workflow_events(workflow_id, order="desc", limit=EVENTS_SHOWN).items


def report(queue: dict[str, list[InReview]]) -> Iterator[str]:
    for cause, entries in queue.items():
        yield f"{cause}: {len(entries)}"
        for entry in entries:
            item = entry.instance
            yield (
                f"  {item.id} {item.definition.name} v{item.definition.version} step {item.review_step_key or '-'}"
                f" in review since {item.review_since:%Y-%m-%d %H:%M:%S}"
            )
            for event in entry.events:
                change = f"{event.before or ''} → {event.after}" if event.after else (event.detail or "")
                who = f"{event.actor.kind} {event.actor.id or ''}".strip()
                yield f"    #{event.sequence} {event.kind} {event.subject.step_key or ''} {change} ({who})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--token", required=True)
    args = parser.parse_args()
    with WeaveClient(args.url, args.token) as client:
        for line in report(review_queue(client)):
            print(line)


if __name__ == "__main__":
    main()
