"""The step graph of an instance as a server-side SVG picture, each step coloured by state."""

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

STATE_COLOURS = {
    "PENDING": ("#eceff1", "#90a4ae"),
    "ACTIVE": ("#e3f2fd", "#1e88e5"),
    "WAITING": ("#ede7f6", "#7e57c2"),
    "NEEDS_REVIEW": ("#fff3e0", "#ef6c00"),
    "SUCCEEDED": ("#e8f5e9", "#43a047"),
    "FAILED": ("#ffebee", "#e53935"),
    "CANCELLED": ("#f5f5f5", "#616161"),
}
BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 150, 46, 60, 22, 12


def _depths(steps: list[dict]) -> dict[str, int]:
    """Column of each step: the length of the longest `after` chain leading to it."""
    after = {s["key"]: list(s.get("after", [])) for s in steps}
    depth: dict[str, int] = {}

    def visit(key: str, seen: frozenset[str]) -> int:
        if key in depth:
            return depth[key]
        parents = [p for p in after.get(key, []) if p in after and p not in seen]
        depth[key] = 1 + max((visit(p, seen | {key}) for p in parents), default=-1)
        return depth[key]

    for key in after:
        visit(key, frozenset())
    return depth


def step_graph_svg(steps: list[dict], states: dict[str, str]) -> SafeString:
    """``steps`` are the definition's step specs (key, kind, after); ``states`` maps key → state."""
    depth = _depths(steps)
    columns: dict[int, list[str]] = {}
    for step in steps:
        columns.setdefault(depth[step["key"]], []).append(step["key"])
    position = {}
    for column, keys in columns.items():
        for row, key in enumerate(keys):
            position[key] = (PAD + column * (BOX_W + GAP_X), PAD + row * (BOX_H + GAP_Y))
    width = PAD * 2 + (max(columns, default=0) + 1) * (BOX_W + GAP_X) - GAP_X
    height = PAD * 2 + max((len(k) for k in columns.values()), default=1) * (BOX_H + GAP_Y) - GAP_Y
    kinds = {s["key"]: s.get("kind", "") for s in steps}

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="weave-graph" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="step graph">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#78909c"/></marker></defs>',
    ]
    for step in steps:
        x2, y2 = position[step["key"]]
        for parent in step.get("after", []):
            if parent in position:
                x1, y1 = position[parent]
                parts.append(
                    f'<line x1="{x1 + BOX_W}" y1="{y1 + BOX_H / 2}" x2="{x2}" y2="{y2 + BOX_H / 2}" '
                    'stroke="#78909c" stroke-width="1.5" marker-end="url(#arrow)"/>'
                )
    for key, (x, y) in position.items():
        state = states.get(key, "PENDING")
        fill, stroke = STATE_COLOURS.get(state, STATE_COLOURS["PENDING"])
        review = state == "NEEDS_REVIEW"
        outline = 'stroke-width="3" stroke-dasharray="6 3"' if review else 'stroke-width="1.5"'
        parts.append(
            f'<g class="step state-{escape(state)}" data-step="{escape(key)}">'
            f"<title>{escape(key)}: {escape(kinds[key])} {escape(state)}</title>"
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="8" fill="{fill}" stroke="{stroke}" {outline}/>'
            f'<text x="{x + 10}" y="{y + 19}" font-size="13" font-weight="bold" fill="#263238">{escape(key)}</text>'
            f'<text x="{x + 10}" y="{y + 36}" font-size="11" fill="{stroke}">{escape(kinds[key])} · {escape(state)}'
            "</text></g>"
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))
