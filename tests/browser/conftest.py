"""Real-browser tests: Python Playwright driving Debian's Chromium against a live server."""

import os
import shutil
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User

from engine.demo import demo_run
from history.models import Namespace, Operator

CHROMIUM = os.environ.get("WEAVE_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
# The documentation's pictures: taken only when WEAVE_DOCS_SCREENSHOTS=1, at one viewport size.
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "img"
DOCS_VIEWPORT = {"width": 1280, "height": 800}


@pytest.fixture(scope="session")
def browser():
    if shutil.which(CHROMIUM) is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is required for the browser tests under CI=true")
        pytest.skip(f"no Chromium at {CHROMIUM}: run the test command as root to install it")
    # Playwright's sync API runs an event loop in this thread; the ORM calls of the test
    # fixtures around it are still synchronous and safe.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture(scope="session")
def screenshots():
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {SCREENSHOTS}")
    return SCREENSHOTS


@pytest.fixture
def demo(live_server):
    """The demo scenarios and an operator login ``olga`` (password ``pw``) that can recover them."""
    scenarios = demo_run(namespace="demo")
    user = User.objects.create_user("olga", password="pw", is_staff=True)
    user.groups.set([Group.objects.get(name="operators")])
    namespace = Namespace.objects.get(name=scenarios["namespace"])
    Operator.objects.create(user=user, namespace=namespace, actor_id="f" * 32, queue_access="*")
    return scenarios["scenarios"]


def admin_login(page, live_server, username, password="pw"):
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")


def docs_screenshot(page, name: str, *, at: str | None = None) -> None:
    """With WEAVE_DOCS_SCREENSHOTS=1, save what the page shows as ``docs/img/<name>.png`` for the documentation:
    the docs' viewport, scrolled to the element ``at`` when given; then the page is as it was. Otherwise nothing."""
    if os.environ.get("WEAVE_DOCS_SCREENSHOTS") != "1":
        return
    viewport, scrolled = page.viewport_size, page.evaluate("window.scrollY")
    page.set_viewport_size(DOCS_VIEWPORT)
    if at:
        page.eval_on_selector(at, "e => e.scrollIntoView({block: 'start'})")
    page.screenshot(path=str(DOCS_IMAGES / f"{name}.png"))
    page.set_viewport_size(viewport)
    page.evaluate(f"window.scrollTo(0, {scrolled})")


def confirm(page, *, declare=True, screenshot=None, docs=None):
    """On an operation's form: tick the declaration when asked, preview, then confirm (two submits).
    ``docs`` names the documentation's picture of the preview (``docs_screenshot``)."""
    if declare:
        page.check("#id_declaration")
    page.click("input[name=_preview]")
    page.wait_for_selector("#preview")
    if screenshot:
        page.screenshot(path=str(screenshot), full_page=True)
    if docs:
        docs_screenshot(page, docs)
    page.click("input[name=_confirm]")
    page.wait_for_selector("ul.messagelist li.success")
