"""Times in the viewer's zone: each operator picks one on the Preferences page; UTC for everyone else."""

from zoneinfo import ZoneInfo, available_timezones

from django import forms
from django.utils import timezone

ZONES = sorted(available_timezones())


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
    time_zone = forms.ChoiceField(
        choices=[(zone, zone) for zone in ZONES],
        help_text="Times in the console are shown in this zone, with its abbreviation; hover a time for UTC.",
    )
