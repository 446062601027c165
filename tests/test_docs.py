"""The documentation says what the code does: its recovery bodies are accepted, its paths and links exist.

``mkdocs build --strict`` (the lint step of the test command) checks the links between the pages;
these tests check what it cannot: the bodies against the commands, the paths against the tree,
and the README, which is read on its own.
"""

import re
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

from core import exactjson
from recovery.operations import OPERATIONS

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
# A recovery call's curl, then at once the body it sends.
CALL_AND_BODY = re.compile(r"```sh\ncurl [^`]*?/recovery/([a-z-]+) [^`]*?```\n\n```json\n(.*?)```", re.S)
# A path inside the repository, as the pages name one: a top-level package or folder, then the rest.
TOP = "api|bench|console|core|docs|engine|examples|history|recovery|scripts|sdk|templates|testkit|tests|weave_site"
PATH = re.compile(rf"(?<![\w/.-])((?:{TOP})/[\w./*<>-]*)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _bodies() -> dict[str, str]:
    text = (ROOT / "docs" / "api.md").read_text()
    return {name: body for name, body in CALL_AND_BODY.findall(text)}


def test_the_api_guide_has_a_body_for_every_recovery_operation():
    assert set(_bodies()) == set(OPERATIONS)


def test_the_concepts_table_lists_every_recovery_operation_in_order_with_its_declaration():
    text = (ROOT / "docs" / "concepts.md").read_text()
    table = text.split("## The recovery operations", 1)[1].split("\n\n", 2)[1]
    rows = re.findall(r"^\| \w+ \| `([a-z-]+)` \| [^|]+ \| `(\w+)`", table, re.M)
    assert rows == [(op.name, op.declaration) for op in OPERATIONS.values()]


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_each_recovery_body_of_the_api_guide_is_a_command_its_operation_accepts(name):
    body = _bodies().get(name)
    assert body is not None, f"docs/api.md has no body for {name}"
    command = OPERATIONS[name].command_class.parse(exactjson.loads(body))
    assert getattr(command, OPERATIONS[name].declaration) is True


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_page_names_exists(page):
    named = {match.rstrip(".") for match in PATH.findall(page.read_text())}
    missing = sorted(path for path in named if "<" not in path and not list(ROOT.glob(path.rstrip("/"))))
    assert missing == [], f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


def _anchors(page: Path) -> set[str]:
    """The heading ids the docs build gives a Markdown page (fenced code left out)."""
    anchors, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            anchors.add(slugify(line.lstrip("#").strip().replace("`", ""), "-"))
    return anchors


def test_every_relative_link_of_the_readme_resolves():
    broken = []
    for target in LINK.findall((ROOT / "README.md").read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = ROOT / path
        if not file.is_file() or (anchor and anchor not in _anchors(file)):
            broken.append(target)
    assert broken == []
