"""Input limits and text rules, in one place: every endpoint, form and schema reads them from here.

Each limit is checked before anything is written, and a refusal names the field or the limit.
The sizes come from settings (``WEAVE_MAX_*`` environment variables) so an installation can
tighten them; the stored-JSON limit must stay well under the database's packet size
(MariaDB's ``max_allowed_packet`` is 16 MiB by default), since a row that cannot be written
would turn a client error into an outage.
"""

import re

from django.conf import settings

# JSON arrays/objects nested deeper than this are refused; parsing and fingerprints recurse.
MAX_JSON_DEPTH = 64
# A JSON number literal longer than this is refused: arithmetic never converts unbounded text
# (Python's int() refuses more than 4 300 digits, and big conversions are quadratic).
MAX_NUMBER_CHARS = 256


def max_body_bytes() -> int:
    """A request body larger than this is refused with 413 before it is read."""
    return settings.WEAVE_MAX_BODY_BYTES


def max_json_bytes() -> int:
    """The UTF-8 size of one client JSON value as stored (input, result, payload, output)."""
    return settings.WEAVE_MAX_JSON_BYTES


# Characters that are invisible, reorder text or are not Unicode at all: C0/C1 controls, DEL,
# no-break and other non-ASCII spaces, soft hyphen, zero-width characters and joiners, bidi
# marks, embeddings, overrides and isolates, line/paragraph separators, BOM, interlinear
# annotation controls and lone surrogates. Audit text with them could be disguised.
_HIDDEN = (
    "\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\xa0\\xad"
    "\\u061c\\u1680\\u180e\\u2000-\\u200f\\u2028-\\u202f\\u205f-\\u206f\\u3000\\ufeff\\ufff9-\\ufffb"
    "\\ud800-\\udfff"
)

# Free text (reasons): ordinary spaces, tabs and newlines allowed; hidden characters not.
TEXT_PATTERN = f"^[^{_HIDDEN}]*$"
# Tokens (evidence_ref): no whitespace at all, no hidden characters.
TOKEN_PATTERN = f"^[^{_HIDDEN}\\t\\n\\r ]+$"
# Idempotency-Key: printable ASCII without space, so it survives every HTTP stack unchanged.
IDEMPOTENCY_KEY_PATTERN = "^[\\x21-\\x7e]+$"

TEXT_RE = re.compile(TEXT_PATTERN)
TOKEN_RE = re.compile(TOKEN_PATTERN)
IDEMPOTENCY_KEY_RE = re.compile(IDEMPOTENCY_KEY_PATTERN)

MAX_REASON = 1024
# An operator's note on an instance: room for a paragraph of findings, not a document.
MAX_NOTE_TEXT = 4000
MAX_EVIDENCE_REF = 512
MAX_IDEMPOTENCY_KEY = 128
