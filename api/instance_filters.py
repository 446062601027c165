"""The query parameters of ``GET /v1/workflows``: a django-filter FilterSet that parses and validates them.

The FilterSet's form turns the query string into typed values (its first error is a 400 naming
the parameter); ``history.selectors.instance_list`` applies them, along the indexes, so the
FilterSet never builds a queryset itself.
"""

import datetime as dt
import re
from functools import cache

import django_filters
from django import forms
from django.core.exceptions import ValidationError

from api.params import PAGE_PARAMS, query_check
from core import fields
from core.errors import InvalidArgument
from core.ids import MAX_UINT32, is_id
from history.models import InstanceState, ReviewCause, StallReason, StopKind, WorkflowInstance
from history.selectors.instance_list import DEFAULT_ORDER, ORDERS, InstanceQuery
from history.tenancy import is_name

MAX_BUSINESS_KEY = 256
DECIMAL = re.compile(r"0|[1-9][0-9]{0,9}")
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})")
NAME_RULE = "a name: [a-z0-9][a-z0-9_.-]{0,63}"


class _Field(forms.Field):
    """A form field whose ``parse`` turns the text into the value or says what it must be."""

    rule = ""

    def to_python(self, value):
        if value in (None, ""):
            return None
        parsed = self.parse(value)
        if parsed is None:
            raise ValidationError(f"must be {self.rule}")
        return parsed

    def parse(self, value: str):
        raise NotImplementedError


class NameField(_Field):
    rule = NAME_RULE

    def parse(self, value):
        return value if is_name(value) else None


class IdField(_Field):
    rule = "32 lowercase hexadecimal characters"

    def parse(self, value):
        return value if is_id(value) else None


class IntegerField(_Field):
    def __init__(self, *, low: int, high: int = MAX_UINT32, **kwargs):
        self.low, self.high = low, high
        self.rule = f"a decimal integer from {low} to {high}"
        super().__init__(**kwargs)

    def parse(self, value):
        if DECIMAL.fullmatch(value) is None or not self.low <= int(value) <= self.high:
            return None
        return int(value)


class TimeField(_Field):
    rule = "an RFC 3339 time with its offset, e.g. 2026-01-31T08:00:00Z"

    def parse(self, value):
        if RFC3339.fullmatch(value) is None:
            return None
        try:
            moment = dt.datetime.fromisoformat(value)
        except ValueError:
            return None
        try:
            return moment.astimezone(dt.UTC)
        except OverflowError:
            # Within a day of year 1 or 9999: as far as a stored time can be.
            return (dt.datetime.min if moment.year == 1 else dt.datetime.max).replace(tzinfo=dt.UTC)


class TextField(_Field):
    rule = f"1-{MAX_BUSINESS_KEY} characters without control, invisible or bidi characters"

    def parse(self, value):
        try:
            return fields.text("value", value, max_length=MAX_BUSINESS_KEY, blank=True)
        except InvalidArgument:
            return None


class BooleanField(_Field):
    rule = "true or false"

    def parse(self, value):
        return {"true": True, "false": False}.get(value)


def _filter(field_class, **field_kwargs) -> django_filters.Filter:
    kind = type(f"{field_class.__name__}Filter", (django_filters.Filter,), {"field_class": field_class})
    return kind(**field_kwargs)


class InstanceFilter(django_filters.FilterSet):
    """Every filter of the instance query, in the order their errors are reported."""

    state = django_filters.MultipleChoiceFilter(choices=InstanceState.choices)
    review_cause = django_filters.MultipleChoiceFilter(choices=ReviewCause.choices)
    definition = _filter(NameField)
    version = _filter(IntegerField, low=1)
    business_key = _filter(TextField)
    business_key_prefix = _filter(TextField)
    paused = _filter(BooleanField)
    stop_kind = django_filters.ChoiceFilter(choices=StopKind.choices)
    queue = _filter(NameField)
    created_after = _filter(TimeField)
    created_before = _filter(TimeField)
    updated_after = _filter(TimeField)
    updated_before = _filter(TimeField)
    in_review_longer_than = _filter(IntegerField, low=0)
    signature = _filter(IdField)
    stall_reason = django_filters.MultipleChoiceFilter(choices=StallReason.choices)
    order = django_filters.ChoiceFilter(choices=[(name, name) for name in ORDERS])

    class Meta:
        model = WorkflowInstance
        fields: list[str] = []


NAMES = tuple(InstanceFilter.base_filters)


class _SharedFields(dict):
    """A form's fields that its instances share: Django deep-copies ``base_fields`` into every form so that one
    form may change its own, and these forms only validate (nothing changes a field), so the copy is shallow."""

    def __deepcopy__(self, memo: dict) -> dict:
        return dict(self)


@cache
def _form_class() -> type:
    """The filters' form class: django-filter builds one per FilterSet, from deep copies of every filter;
    built once, with fields shared by its forms (a deep copy of seventeen fields was a tenth of a request)."""
    form_class = InstanceFilter(queryset=WorkflowInstance.objects.none()).get_form_class()
    form_class.base_fields = _SharedFields(form_class.base_fields)
    return form_class


REPEATABLE = ("state", "review_cause", "stall_reason")


def instance_query(params) -> InstanceQuery:
    """The validated InstanceQuery of a query string; INVALID_ARGUMENT naming the first bad parameter."""
    query_check(params, allowed=(*PAGE_PARAMS, *NAMES), repeatable=REPEATABLE)
    for name in NAMES:
        if name in params and "" in params.getlist(name):
            raise InvalidArgument(f"{name} is empty: leave it out to filter nothing", field=name)
    form = _form_class()(params)
    if not form.is_valid():
        name, problems = next(iter(form.errors.items()))
        raise InvalidArgument(f"{name} {_wording(problems[0])}", field=name)
    data = form.cleaned_data
    values = {name: data.get(name) for name in NAMES if name not in (*REPEATABLE, "order")}
    # An absent choice cleans to "" and means no filter.
    values = {name: None if value == "" else value for name, value in values.items()}
    return InstanceQuery(
        states=tuple(sorted(set(data["state"]))),
        review_causes=tuple(sorted(set(data["review_cause"]))),
        stall_reasons=tuple(sorted(set(data["stall_reason"]))),
        order=data["order"] or DEFAULT_ORDER,
        **values,
    )


def _wording(problem: str) -> str:
    # Django's choice messages name the choice but not the field.
    if problem.startswith("Select a valid choice"):
        return "is not one of the allowed values"
    return problem
