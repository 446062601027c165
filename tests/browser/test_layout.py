"""The console on a phone, 390 px wide: the page itself never scrolls sideways (a wide table scrolls inside its
own box) and the Next buttons keep their words on one line, inside the screen."""

import pytest

from tests.browser.conftest import admin_login

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}
# The page's width beyond the window, and the elements that stick out past its right edge (to say which).
OVERFLOW = """() => ({
  extra: document.documentElement.scrollWidth - window.innerWidth,
  culprits: [...document.querySelectorAll('body *')]
    .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
    .filter(e => !e.parentElement.closest('.weave-scroll'))
    .slice(0, 8).map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + '.' + [...e.classList].join('.')),
})"""
# How many lines a link's words take, and whether all of it is on the screen.
BUTTON = """e => {
  const range = document.createRange();
  range.selectNodeContents(e);
  const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
  const box = e.getBoundingClientRect();
  const inside = box.left >= 0 && box.right <= window.innerWidth;
  return {lines: tops.size, inside: inside, clipped: e.scrollWidth > e.clientWidth};
}"""


@pytest.fixture
def phone(page):
    page.set_viewport_size(PHONE)
    return page


def assert_no_sideways_scroll(page, name: str, screenshots) -> None:
    page.screenshot(path=str(screenshots / f"phone-{name.replace(' ', '-')}.png"), full_page=True)
    overflow = page.evaluate(OVERFLOW)
    print(f"\n{name} at 390 px: {overflow['extra']} px wider than the window")
    assert overflow["extra"] <= 0, f"{name} scrolls sideways by {overflow['extra']} px: {overflow['culprits']}"


def assert_one_line_on_screen(page, selector: str) -> None:
    for button in page.locator(selector).all():
        button.scroll_into_view_if_needed()  # in the queue's table, which scrolls sideways
        assert button.evaluate(BUTTON) == {"lines": 1, "inside": True, "clipped": False}, button.inner_text()


def test_the_queue_fits_a_phone_and_its_next_buttons_stay_whole(live_server, phone, demo, screenshots):
    admin_login(phone, live_server, "olga")
    assert_no_sideways_scroll(phone, "queue", screenshots)
    assert phone.locator("#queue-rows a[data-operation]").count() > 0
    assert_one_line_on_screen(phone, "#queue-rows a[data-operation]")
    assert_one_line_on_screen(phone, "#queue-rows a[data-decide]")


def test_the_instance_page_fits_a_phone_and_its_next_button_stays_whole(live_server, phone, demo, screenshots):
    admin_login(phone, live_server, "olga")
    phone.goto(f"{live_server.url}/admin/history/workflowinstance/{demo['task_unknown']['instance_id']}/change/")
    assert_no_sideways_scroll(phone, "instance page", screenshots)
    phone.wait_for_selector("#next-operation a")
    assert_one_line_on_screen(phone, "#next-operation a")
    assert_one_line_on_screen(phone, "#decide a")
    assert_one_line_on_screen(phone, "#instance-actions a.button")


def test_the_operation_and_control_forms_fit_a_phone(live_server, phone, demo, screenshots):
    admin_login(phone, live_server, "olga")
    phone.goto(f"{live_server.url}/admin/history/workflowinstance/{demo['task_unknown']['instance_id']}/change/")
    forms = {
        "review-task": "a[data-operation=review-task]",
        "pause": "a[data-control=pause]",
        "decide": "a[data-decide]",
    }
    forms["signal"] = "#instance-actions a[href$='/signal/']"
    hrefs = {name: live_server.url + phone.get_attribute(selector, "href") for name, selector in forms.items()}
    for name, href in hrefs.items():
        phone.goto(href)
        assert_no_sideways_scroll(phone, f"{name} form", screenshots)
    # The preview, with its tables of before and after.
    phone.goto(hrefs["review-task"])
    phone.fill("#id_reason", "checked the ledger")
    phone.fill("#id_evidence_ref", "ticket:OPS-7")
    phone.check("#id_declaration")
    phone.select_option("#id_conclusion", "SUCCEEDED")
    phone.fill("#id_result", '{"paid": true}')
    phone.click("input[name=_preview]")
    phone.wait_for_selector("#preview")
    assert_no_sideways_scroll(phone, "review-task preview", screenshots)
    # The decision's preview: each operation of the chain with its table.
    phone.goto(hrefs["decide"])
    phone.fill("#id_result", '{"paid": true}')
    phone.fill("#id_reason", "checked the ledger")
    phone.fill("#id_evidence_ref", "ticket:OPS-7")
    phone.check("#id_declaration")
    phone.click("input[name=_preview]")
    phone.wait_for_selector("#chain")
    assert_no_sideways_scroll(phone, "decision preview", screenshots)
