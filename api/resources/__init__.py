"""One module per resource of the API: its bodies described for OpenAPI (serializers that only document) beside
the presenters that write them, field by field, and the errors and parameters of its endpoints.

Absent, never null: an optional field is left out when it has no value. Revisions are
decimal strings, times go through ``format_time``, and client JSON is embedded byte-exact
as ``Raw`` (a NULL column is an absent output; the text ``null`` an explicit one). A page holds its
parents as read, the instance revision read for it, the items and the cursor.
"""

from core.exactjson import Raw
from core.times import format_time


def optional(data: dict, key: str, value: object) -> None:
    if value is not None and value != "":
        data[key] = value


def optional_time(data: dict, key: str, value) -> None:
    if value is not None:
        data[key] = format_time(value)


def optional_raw(data: dict, key: str, text: str | None) -> None:
    if text is not None:
        data[key] = Raw(text)


def paged(data: dict, *, items: list, next_cursor: str | None) -> dict:
    data["items"] = items
    optional(data, "next_cursor", next_cursor)
    return data
