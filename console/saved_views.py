"""Saved views: a filtered review queue or instance list kept by name, for its owner and a group."""

from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.db.models import Q
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse

from console.models import VIEW_TARGETS, SavedView

# Query parameters a view never keeps: the admin's error flag and the page number.
UNKEPT = {"e", "p", "csrfmiddlewaretoken"}


class SavedViewForm(forms.Form):
    name = forms.CharField(max_length=80)
    target = forms.ChoiceField(choices=[(t, t) for t in VIEW_TARGETS])
    query = forms.CharField(max_length=1024, required=False)
    group = forms.ChoiceField(required=False)

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["group"].choices = [("", "only me"), *((str(g.id), g.name) for g in user.groups.order_by("name"))]

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        if SavedView.objects.filter(owner=self.user, name=name).exists():
            raise forms.ValidationError(f"you already have a view named {name!r}: choose another name")
        return name


def views_of(user) -> list[SavedView]:
    """The user's own views and those shared with a group of theirs, by name."""
    shared = Q(owner=user) | Q(group__in=user.groups.all())
    return list(SavedView.objects.filter(shared).select_related("owner", "group").order_by("name", "id"))


def view_url(view: SavedView) -> str:
    return reverse(VIEW_TARGETS[view.target]) + (f"?{view.query}" if view.query else "")


def kept_query(params) -> str:
    return urlencode([(k, v) for k in params for v in params.getlist(k) if k not in UNKEPT])


def save_view(request):
    """Save the list the operator is looking at; a bad field is said by name and nothing is stored."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    form = SavedViewForm(request.POST, user=request.user)
    back = reverse(VIEW_TARGETS.get(request.POST.get("target"), "admin:index"))
    if not form.is_valid():
        for field, errors in form.errors.items():
            messages.error(request, f"View not saved — {field}: {' '.join(errors)}")
        return HttpResponseRedirect(back + (f"?{request.POST.get('query')}" if request.POST.get("query") else ""))
    data = form.cleaned_data
    view = SavedView.objects.create(
        owner=request.user,
        name=data["name"],
        target=data["target"],
        query=data["query"],
        group_id=int(data["group"]) if data["group"] else None,
    )
    shared = f", shared with {view.group.name}" if view.group else ""
    messages.success(request, f"View {view.name!r} saved{shared}.")
    return HttpResponseRedirect(view_url(view))


def delete_view(request, pk: int):
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    view = get_object_or_404(SavedView, pk=pk, owner=request.user)
    view.delete()
    messages.success(request, f"View {view.name!r} deleted.")
    return HttpResponseRedirect(reverse("admin:index"))
