"""Times in the viewer's zone: each operator picks one on the Preferences page; UTC for everyone else."""

from zoneinfo import ZoneInfo, available_timezones

from django import forms
from django.utils import timezone

from history.models import Operator

ZONES = sorted(available_timezones())
# An operator still on this zone has not chosen one: the Preferences page offers the browser's (console/zone.js).
DEFAULT_ZONE = Operator._meta.get_field("time_zone").default


def viewer_zone(user) -> str:
    operator = getattr(user, "weave_operator", None) if user.is_authenticated else None
    return operator.time_zone if operator is not None else "UTC"


class ViewerZoneMiddleware:
    """Activates the signed-in operator's zone for the request (after the authentication middleware).

    Decided once the view is known: a view marked ``sessionless`` (the health probes) keeps UTC without reading
    the session, so a probe that brings a signed-in browser's cookie still answers while the database is down.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()

    def process_view(self, request, view_func, view_args, view_kwargs):
        if not getattr(getattr(view_func, "view_class", None), "sessionless", False):
            timezone.activate(ZoneInfo(viewer_zone(request.user)))


class PreferencesForm(forms.Form):
    """The zone typed with the known zones as suggestions (a ``<datalist>``: "Berl" finds Europe/Berlin), still
    checked against them on the server."""

    time_zone = forms.ChoiceField(
        choices=[(zone, zone) for zone in ZONES],
        widget=forms.TextInput(attrs={"list": "time-zones", "autocomplete": "off", "spellcheck": "false"}),
        help_text="Type part of a zone's name (Berlin, New_York, Tokyo) and pick it from the list. Times in the "
        "console are shown in this zone, with its abbreviation; hover a time for UTC.",
        error_messages={
            "invalid_choice": "Select a valid choice: %(value)s is not a time zone. Type part of a city's name "
            "and pick the zone from the list."
        },
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.is_bound and self.initial.get("time_zone") == DEFAULT_ZONE:
            self.fields["time_zone"].widget.attrs["data-offer-browser-zone"] = ""
