"""axe-core, run in the browser on the console's pages: no critical or serious violation, wide and at 390 px.

Each page's violation counts by impact are printed; a failure lists every blocking rule with the elements it
found, for all the pages at once.
"""

from collections import Counter

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.contrib.auth.models import Group, User
from django.urls import reverse

from recovery.operations import OPERATIONS
from tests.browser.conftest import admin_login

pytestmark = pytest.mark.django_db(transaction=True)

BLOCKING = ("critical", "serious")
PHONE = {"width": 390, "height": 844}


def blocking_violations(page, name: str) -> list[str]:
    """axe's violations on the page as it is now: the counts printed, the critical and serious ones returned."""
    violations = Axe().run(page).response["violations"]
    counts = Counter(violation["impact"] for violation in violations)
    rules = ", ".join(f"{violation['id']} ({violation['impact']})" for violation in violations)
    print(f"\naxe {name}: {dict(counts) or 'no violations'}{f' — {rules}' if rules else ''}")
    return [
        f"{name}: {violation['id']} ({violation['impact']}) at {[node['target'] for node in violation['nodes']]}"
        for violation in violations
        if violation["impact"] in BLOCKING
    ]


@pytest.fixture
def olga_audits(demo):
    """The demo's operator, who may also read the audit."""
    User.objects.get(username="olga").groups.add(Group.objects.get(name="auditors"))
    return demo


def _instance_page(live_server, demo, scenario: str) -> str:
    return f"{live_server.url}/admin/history/workflowinstance/{demo[scenario]['instance_id']}/change/"


def _form_links(page) -> dict[str, str]:
    """The forms the instance page offers: each operation's (its first link), each control's and the signal's."""
    links: dict[str, str] = {}
    for selector, attribute in (("a[data-operation]", "data-operation"), ("a[data-control]", "data-control")):
        for link in page.locator(selector).all():
            links.setdefault(link.get_attribute(attribute), link.get_attribute("href"))
    for link in page.locator("#instance-actions a[href$='/signal/']").all():
        links.setdefault("signal", link.get_attribute("href"))
    return links


def test_the_login_page_has_no_serious_violation(live_server, page):
    page.goto(f"{live_server.url}/admin/login/")
    assert blocking_violations(page, "login") == []


def test_the_console_pages_have_no_serious_violation(live_server, page, olga_audits):
    demo = olga_audits
    admin_login(page, live_server, "olga")
    found = blocking_violations(page, "home")
    forms: dict[str, str] = {}
    for scenario in demo:
        page.goto(_instance_page(live_server, demo, scenario))
        if scenario == "task_unknown":
            found += blocking_violations(page, f"instance page ({scenario})")
        for name, href in _form_links(page).items():
            forms.setdefault(name, href)
    # The controls and the signal as the demo's instances offer them; every operation, through its link where one
    # is offered, else its form on task_unknown (a form opens whether or not the operation is possible now).
    assert {"pause", "resume", "cancel", "signal"} <= set(forms)
    for name in OPERATIONS:
        forms.setdefault(
            name, reverse("admin:history_workflowinstance_recovery", args=[demo["task_unknown"]["instance_id"], name])
        )
    for name, href in sorted(forms.items()):
        page.goto(f"{live_server.url}{href}")
        found += blocking_violations(page, f"form {name}")
    # The decision form and its preview of the whole chain.
    page.goto(_instance_page(live_server, demo, "task_unknown"))
    page.click("a[data-decide]")
    found += blocking_violations(page, "decision form")
    page.fill("#id_result", '{"paid": true}')
    page.fill("#id_reason", "checked the ledger")
    page.fill("#id_evidence_ref", "ticket:OPS-7")
    page.check("#id_declaration")
    page.click("input[name=_preview]")
    page.wait_for_selector("#chain")
    found += blocking_violations(page, "decision preview")
    page.goto(f"{live_server.url}/admin/history/workflowoperation/")
    found += blocking_violations(page, "audit list")
    page.goto(f"{live_server.url}/admin/preferences/")
    found += blocking_violations(page, "preferences")
    assert found == [], "\n".join(found)


def test_home_and_instance_page_have_no_serious_violation_at_390_px(live_server, page, demo):
    page.set_viewport_size(PHONE)
    admin_login(page, live_server, "olga")
    found = blocking_violations(page, "home at 390 px")
    page.goto(_instance_page(live_server, demo, "task_unknown"))
    found += blocking_violations(page, "instance page at 390 px")
    page.click("a[data-decide]")
    found += blocking_violations(page, "decision form at 390 px")
    assert found == [], "\n".join(found)
