"""Every demo scenario carried to its end from the review queue, following the console's Next button.

The operator types the reason and evidence once, on the first form; every later form of the same review
comes filled in with them (and ResolveStep with the reviewed result). The background runs between the
decisions as the runner would; the page follows it by itself.
"""

import pytest

from engine.runner import runner_settle
from tests.browser.conftest import admin_login, confirm, docs_screenshot

pytestmark = pytest.mark.django_db(transaction=True)

PAID, DONE, PENDING = '{"paid": true}', '{"status": "done"}', '{"status": "pending"}'
# Per scenario: each operation the console offers next, with what the operator fills in on its form (beyond the
# declaration), and the instance's state at the end.
FLOWS = {
    "task_unknown": ([("review-task", PAID), ("resolve-step", None), ("continue", None)], "SUCCEEDED"),
    "cancel_unknown": ([("review-task", PAID), ("resolve-step", None), ("continue", None)], "CANCELLED"),
    "task_failed_budget_left": ([("retry-step", None), ("continue", None)], "RUNNING"),
    "poll_request_failed": ([("retry-step", None), ("continue", None)], "RUNNING"),
    "poll_exhausted": ([("resolve-step", DONE), ("continue", None)], "SUCCEEDED"),
    "poll_pending_review": ([("review-task", PENDING), ("continue-poll", None), ("continue", None)], "RUNNING"),
    "signal_rearm": ([("rearm-wait", None), ("continue", None)], "RUNNING"),
    "expired_in_review": ([("resolve-step", '{"error": "declined"}'), ("continue", None)], "FAILED"),
}


@pytest.mark.parametrize("scenario", FLOWS)
def test_a_scenario_is_carried_to_its_end_from_the_queue(live_server, page, demo, screenshots, scenario):
    steps, end = FLOWS[scenario]
    instance_id = demo[scenario]["instance_id"]
    admin_login(page, live_server, "olga")
    submits = 0
    for number, (operation, result) in enumerate(steps):
        if number == 0:
            page.click(f"#queue-rows tr[data-instance='{instance_id}'] a[data-operation={operation}]")
            page.fill("#id_reason", f"{scenario}: checked with the provider")
            page.fill("#id_evidence_ref", "ticket:OPS-7")
        else:
            page.wait_for_selector("#next-operation a")
            assert page.get_attribute("#next-operation a", "data-next") == operation
            page.click("#next-operation a")
            assert page.input_value("#id_reason") == f"{scenario}: checked with the provider"  # not retyped
        if result is not None:
            page.select_option("#id_conclusion", "FAILED" if "error" in result else "SUCCEEDED")
            page.fill("#id_result", result)
        confirm(page, screenshot=screenshots / f"{scenario}-{number + 1}-{operation}.png")
        submits += 2
        runner_settle()
    page.wait_for_selector(f"#instance-state:text('{end}')")
    page.screenshot(path=str(screenshots / f"{scenario}-end.png"), full_page=True)
    print(f"\n{scenario}: {len(steps)} forms, {submits} submits, no reload, reason typed once")


# Per scenario: the decision the operator makes (its kind, and the outcome they type where it has one), and the
# instance's state at the end.
DECISIONS = {
    "task_unknown": ("conclude", "SUCCEEDED", PAID, "SUCCEEDED"),
    "cancel_unknown": ("conclude", "SUCCEEDED", PAID, "CANCELLED"),
    "task_failed_budget_left": ("retry", None, None, "RUNNING"),
    "poll_request_failed": ("retry", None, None, "RUNNING"),
    "poll_exhausted": ("conclude", "SUCCEEDED", DONE, "SUCCEEDED"),
    "poll_pending_review": ("keep-polling", None, PENDING, "RUNNING"),
    "signal_rearm": ("rearm", None, None, "RUNNING"),
    "expired_in_review": ("conclude", "FAILED", '{"error": "declined"}', "FAILED"),
}


@pytest.mark.parametrize("scenario", DECISIONS)
def test_a_scenario_is_decided_once_from_the_queue_and_followed_to_its_end(
    live_server, page, demo, screenshots, scenario
):
    """One form, two submits (preview, confirm); typed: the result where the decision has one, reason and
    evidence; then the instance page follows the chain by itself while the background takes in each step."""
    kind, conclusion, result, end = DECISIONS[scenario]
    instance_id = demo[scenario]["instance_id"]
    admin_login(page, live_server, "olga")
    loads = []
    page.on("framenavigated", lambda frame: loads.append(frame.url) if frame == page.main_frame else None)
    clicks = submits = typed = 0
    page.click(f"#queue-rows tr[data-instance='{instance_id}'] a[data-decide]")
    clicks += 1
    page.wait_for_selector("#decide-form")
    if not page.is_checked(f"#id_kind_{kind}"):
        page.check(f"#id_kind_{kind}")
        clicks += 1
    if conclusion is not None and page.input_value("#id_conclusion") != conclusion:
        page.select_option("#id_conclusion", conclusion)
        clicks += 1
    if result is not None:
        page.fill("#id_result", result)
        typed += 1
    page.fill("#id_reason", f"{scenario}: checked with the provider")
    page.fill("#id_evidence_ref", "ticket:OPS-7")
    page.check("#id_declaration")
    typed, clicks = typed + 2, clicks + 1
    if scenario == "task_unknown":
        docs_screenshot(page, "decision-form", at="#kinds")
    page.click("input[name=_preview]")
    page.wait_for_selector("#chain")
    page.screenshot(path=str(screenshots / f"{scenario}-decision-preview.png"), full_page=True)
    if scenario == "task_unknown":
        docs_screenshot(page, "decision-preview", at="#chain")
    assert page.locator("#chain-refusal").count() == 0
    page.click("input[name=_confirm]")
    page.wait_for_selector("#decisions")
    clicks, submits = clicks + 2, submits + 2
    runner_settle()
    page.wait_for_selector(f"#instance-state:text('{end}')")
    page.wait_for_selector("#decisions [data-decision-state=SUCCEEDED]")
    page.screenshot(path=str(screenshots / f"{scenario}-decided.png"), full_page=True)
    forms = {url for url in loads if "/decide/" in url}  # the preview posts back to its form's address
    assert (len(forms), submits, len(loads)) == (1, 2, 3)  # the form, its preview, the instance page: no reload
    print(f"\n{scenario}: 1 form, {submits} submits, {clicks} clicks, {typed} fields typed, {len(loads)} page loads")
