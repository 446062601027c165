"""Start a parallel job through the SDK, send its two signals, and check every wait's winner.

    python examples/parallel_job.py --url http://127.0.0.1:8000 --token <token printed by make run>

Needs a running server with the background (``make run``) and the ``demo-parallel-job``
definition that ``weave_demo`` loads. When the job has SUCCEEDED, each completed SIGNAL wait's
historical ``winner_signal_id`` must name a CONSUMED signal whose ``consumed_wait_id`` is that wait.
"""

import argparse
import time
import uuid
from collections.abc import Callable

from weave_sdk import WeaveClient

SIGNALS = {"left": "left-done", "right": "right-done"}


def parallel_job(
    client: WeaveClient, *, settle: Callable[[], None] = lambda: time.sleep(0.5), timeout: float = 60
) -> dict:
    """Run the job to its end and return ``{step_key: (wait_id, winner_signal_id)}``, cross-checked."""
    business_key = f"job-{uuid.uuid4().hex[:8]}"
    started = client.start_workflow(
        idempotency_key=f"start-{business_key}",
        command={"definition": "demo-parallel-job", "input": {"job": business_key}, "business_key": business_key},
    )
    workflow_id = started.data["id"]
    for step_key, name in SIGNALS.items():
        client.send_signal(
            workflow_id,
            idempotency_key=f"signal-{business_key}-{step_key}",
            command={
                "name": name,
                "payload_version": "v1",
                "payload": {"rows": 10},
                "correlation_key": business_key,
                "target_step_key": step_key,
                "reason": "the partner system reported completion",
                "evidence_ref": f"job:{business_key}",
            },
        )
    deadline = time.monotonic() + timeout
    while (workflow := client.get_workflow(workflow_id)).state != "SUCCEEDED":
        if time.monotonic() > deadline or workflow.state in ("FAILED", "CANCELLED", "NEEDS_REVIEW"):
            raise SystemExit(f"the job did not succeed: {workflow.state}")
        settle()
    winners = {}
    for step_key in SIGNALS:
        for item in client.iter_items(client.list_workflow_activations, workflow_id, step_key):
            wait = client.get_workflow_activation(workflow_id, step_key, item.id).wait
            if wait is None or wait.state != "SATISFIED":
                continue
            signal = client.get_workflow_signal(workflow_id, wait.winner_signal_id)
            if signal.state != "CONSUMED" or signal.consumed_wait_id != wait.id:
                raise SystemExit(f"wait {wait.id} names winner {signal.id}, which was consumed by another wait")
            winners[step_key] = (wait.id, signal.id)
    if set(winners) != set(SIGNALS):
        raise SystemExit(f"not every signal step completed through a wait: {sorted(winners)}")
    return winners


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--token", required=True)
    args = parser.parse_args()
    with WeaveClient(args.url, args.token) as client:
        for step_key, (wait_id, signal_id) in parallel_job(client).items():
            print(f"{step_key}: wait {wait_id} won by signal {signal_id} (CONSUMED by that wait)")


if __name__ == "__main__":
    main()
