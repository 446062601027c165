"""The Preferences page in a browser whose zone is Europe/Berlin: an operator who has not chosen a zone finds the
browser's filled in, and one who has keeps theirs."""

import pytest

from history.models import Operator
from tests.browser.conftest import admin_login

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def berlin(browser):
    context = browser.new_context(timezone_id="Europe/Berlin", viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


def test_an_operator_without_a_zone_finds_the_browsers_filled_in_and_saves_it(live_server, berlin, demo):
    admin_login(berlin, live_server, "olga")
    berlin.click("#preferences-link")
    berlin.wait_for_selector("#browser-zone")  # shown once the page's script has filled the zone in
    assert berlin.input_value("#id_time_zone") == "Europe/Berlin"
    assert Operator.objects.get(user__username="olga").time_zone == "UTC"  # offered, not saved
    berlin.click("input[type=submit]")
    berlin.wait_for_selector("ul.messagelist li.success")
    assert Operator.objects.get(user__username="olga").time_zone == "Europe/Berlin"
    assert berlin.text_content("#preferences-link") == "Times in Europe/Berlin"


def test_a_zone_the_operator_chose_is_kept(live_server, berlin, demo):
    Operator.objects.filter(user__username="olga").update(time_zone="Asia/Tokyo")
    admin_login(berlin, live_server, "olga")
    berlin.click("#preferences-link")
    berlin.wait_for_load_state("load")  # the page's deferred script has run
    assert berlin.input_value("#id_time_zone") == "Asia/Tokyo"
    assert not berlin.is_visible("#browser-zone")
