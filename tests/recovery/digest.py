"""One digest of every row of every history table: equal digests mean nothing was written."""

import hashlib

import pytest
from django.apps import apps

from history.errors import WeaveError


def history_digest() -> str:
    digest = hashlib.sha256()
    for model in sorted(apps.get_app_config("history").get_models(), key=lambda m: m._meta.db_table):
        digest.update(model._meta.db_table.encode())
        for row in model.objects.order_by("pk").values_list():
            digest.update(repr(row).encode())
    return digest.hexdigest()


def assert_refused(call, code: str, *, field: str | None = None):
    """``call`` raises ``code`` (naming ``field`` when given) and leaves every history table as it was."""
    before = history_digest()
    with pytest.raises(WeaveError) as info:
        call()
    assert info.value.code == code, info.value.message
    if field is not None:
        assert info.value.field == field, info.value.message
    assert history_digest() == before
    return info.value
