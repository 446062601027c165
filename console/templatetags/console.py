import datetime as dt

from django import template
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html

from console.links import instance_name

register = template.Library()


@register.filter
def when(value):
    """A time in the viewer's zone, to the second with the zone's abbreviation; UTC on hover."""
    if value is None:
        return "—"
    utc = value.astimezone(dt.UTC)
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        utc.isoformat(),
        utc.strftime("%Y-%m-%d %H:%M:%S UTC"),
        date_format(timezone.localtime(value), "DATETIME_FORMAT"),
    )


@register.filter
def named(instance):
    """An instance as the console names it in text (business key and definition)."""
    return instance_name(instance)


@register.filter
def sparkline(counts):
    """Counts as a small line drawing (oldest first), its numbers spelled out for screen readers and on hover."""
    top = max(counts, default=0) or 1
    points = " ".join(f"{3 * i},{15 - 13 * n / top:.1f}" for i, n in enumerate(counts))
    words = f"arrivals per hour, oldest first: {', '.join(str(n) for n in counts)}"
    return format_html(
        '<svg class="weave-spark" width="{}" height="16" role="img" aria-label="{}"><title>{}</title>'
        '<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="{}"/></svg>',
        3 * max(len(counts) - 1, 1),
        words,
        words,
        points,
    )
