"""Static files as a deployment serves them: collected by the product's manifest storage, answered by WhiteNoise.

The test settings keep the plain storage (no collectstatic before every run); here the product's STORAGES collect
once for the module into a temporary STATIC_ROOT, and every request goes through the whole WSGI application with
DEBUG off, as under gunicorn.
"""

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.apps import apps
from django.contrib.staticfiles.storage import staticfiles_storage
from django.core.management import call_command
from django.test import Client, override_settings

from weave_site import settings as product

ADMIN_CSS = "admin/css/base.css"
SWAGGER_BUNDLE = "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"
YEAR = 365 * 24 * 3600


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """A client of the WSGI application serving what collectstatic wrote with the product's storage."""
    root = tmp_path_factory.mktemp("static")
    with override_settings(STORAGES=product.STORAGES, STATIC_ROOT=root, DEBUG=False):
        call_command("collectstatic", interactive=False, verbosity=0)
        yield Client()


class _Assets(HTMLParser):
    """The src and href of a page's scripts, stylesheets, icons and images."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "link", "img"):
            self.urls += [value for name, value in attrs if name in ("src", "href") and value]


def static_assets(page: bytes) -> list[str]:
    parser = _Assets()
    parser.feed(page.decode())
    return [url for url in parser.urls if url.startswith("/static/")]


def _max_age(response) -> int:
    return int(re.search(r"max-age=(\d+)", response["Cache-Control"]).group(1))


def assert_served_for_good(client, url: str):
    """``url`` answers 200 under a hashed name, cached for at least a year as immutable."""
    assert re.search(r"\.[0-9a-f]{12}\.", url), f"{url} is not a hashed name"
    response = client.get(url)
    assert response.status_code == 200, url
    assert "immutable" in response["Cache-Control"] and _max_age(response) >= YEAR, url
    return response


def test_the_admin_stylesheet_is_served_by_its_hashed_name_as_css_cached_for_good(client):
    response = assert_served_for_good(client, staticfiles_storage.url(ADMIN_CSS))
    assert response["Content-Type"].startswith("text/css")


def test_a_client_that_takes_gzip_gets_the_compressed_copy(client):
    response = client.get(staticfiles_storage.url(ADMIN_CSS), HTTP_ACCEPT_ENCODING="gzip")
    assert response.status_code == 200
    assert response["Content-Encoding"] == "gzip" and "Accept-Encoding" in response["Vary"]


@pytest.mark.parametrize("name", [ADMIN_CSS, "admin/css/nowhere.css"], ids=["plain name", "missing file"])
def test_only_the_hashed_names_are_served(client, name):
    assert client.get(f"/static/{name}").status_code == 404


def test_the_swagger_ui_bundle_is_served_as_javascript(client):
    response = assert_served_for_good(client, staticfiles_storage.url(SWAGGER_BUNDLE))
    assert response["Content-Type"].startswith("text/javascript")


def test_every_asset_the_api_docs_page_names_is_served(client):
    page = client.get("/v1/docs/")
    assert page.status_code == 200
    assets = static_assets(page.content)
    assert staticfiles_storage.url(SWAGGER_BUNDLE) in assets
    for url in assets:
        assert_served_for_good(client, url)


def test_every_static_file_of_the_console_is_served_by_its_hashed_name(client):
    folder = Path(apps.get_app_config("console").path) / "static"
    names = [path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file()]
    assert "console/console.css" in names
    for name in names:
        assert_served_for_good(client, staticfiles_storage.url(name))


@pytest.mark.django_db
def test_every_asset_the_console_home_page_names_is_served(client, console_user):
    client.force_login(console_user("olga", "operators"))
    try:
        page = client.get("/admin/")
    finally:
        client.logout()
    assert page.status_code == 200
    assets = static_assets(page.content)
    assert {staticfiles_storage.url(ADMIN_CSS), staticfiles_storage.url("console/console.css")} <= set(assets)
    for url in assets:
        assert_served_for_good(client, url)
