import datetime as dt

from django import template
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html

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
