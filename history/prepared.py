"""Reads whose SQL is built and compiled once, then run again with other values.

Building a queryset and compiling it costs a short read more than the database does (the API's
pages and the engine's hot paths are such reads). A ``Prepared`` read is a function of its values
returning the queryset; per connection and shape (the kinds of its values) it is built and compiled
with two sets of stand-in values, and later calls send the compiled SQL with their own values in
the stand-ins' places. Its rows are what the queryset yields: models (with their ``select_related``
rows and annotations) or, for ``values_list``, tuples or single values.

The function must depend on its arguments alone. Every value must reach the SQL as it was given, as
a parameter of its own, and nothing else may change with the values: one a lookup rewrites
(``startswith`` adds a ``%``), one that never becomes a parameter, and a parameter computed from a
value or from the clock are refused when the read is compiled (the two compiles differ).
"""

import datetime as dt
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from django.db import connection, connections
from django.db.models import QuerySet
from django.db.models.query import FlatValuesListIterable, ModelIterable, ValuesListIterable, get_related_populators

T = TypeVar("T")


class Prepared:
    """``build(*values)`` compiled once per connection and shape; calling it runs the read with new values."""

    def __init__(self, build: Callable[..., QuerySet]) -> None:
        self.build = build
        self._compiled: weakref.WeakKeyDictionary[object, dict] = weakref.WeakKeyDictionary()

    def __call__(self, *values) -> list:
        """The rows of ``build(*values)``, as the queryset would yield them."""
        shapes = self._compiled.setdefault(connections[connection.alias], {})
        shape = tuple(_kind(value) for value in values)
        read = shapes.get(shape)
        if read is None:
            read = shapes[shape] = _Compiled(self.build, shape)
        return read.run(values)

    def first(self, *values):
        """The first row, None when there is none (``build`` limits the read itself)."""
        rows = self(*values)
        return rows[0] if rows else None


def _kind(value: object) -> type:
    if isinstance(value, bool) or value is None:
        raise TypeError(f"a prepared read takes text, whole numbers and times as its values, not {value!r}")
    if isinstance(value, str | int | dt.datetime):
        return type(value)
    raise TypeError(f"a prepared read takes text, whole numbers and times as its values, not {type(value).__name__}")


def _placeholder(place: int, kind: type, round_: int) -> object:
    """The stand-in for value ``place`` of a read in compile ``round_`` (0 or 1): distinct from the others, and a
    whole number within the range of every integer column (a lookup answers a number out of range without SQL)."""
    if kind is str:
        return f"\x00prepared{round_}.{place}\x00"
    if kind is int:
        return 29_101 + 100 * round_ + place
    return dt.datetime(1001 + round_, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=place)


def as_parameter(value: object) -> object:
    """``value`` as the backend sends it as a parameter (a time is adapted to the column's form)."""
    return connection.ops.adapt_datetimefield_value(value) if isinstance(value, dt.datetime) else value


@dataclass(frozen=True)
class Statement:
    """Compiled SQL and, per parameter, the index of the value it carries (None: the constant beside it)."""

    sql: str
    places: tuple[int | None, ...]
    constants: tuple

    def params(self, values) -> list:
        return [
            constant if place is None else as_parameter(values[place])
            for place, constant in zip(self.places, self.constants, strict=True)
        ]


def compile_once(
    name: str, shape: tuple[type, ...], compile_: Callable[[list], tuple[str, list, T]], *, all_used: bool = True
) -> tuple:
    """``compile_(values)`` → (sql, params, anything) run with two sets of stand-ins of the kinds ``shape`` names;
    returns its ``Statement`` and the first run's third part. Refused unless every value reaches the SQL as given
    (or, without ``all_used``, not at all) and everything else is the same both times (a value rewritten, or a
    parameter computed from a value or the clock, could not be sent again)."""
    runs = [[_placeholder(place, kind, round_) for place, kind in enumerate(shape)] for round_ in (0, 1)]
    (sql, params, extra), (again, other, _) = (compile_(values) for values in runs)
    sent = [[as_parameter(value) for value in values] for values in runs]
    places = tuple(sent[0].index(param) if param in sent[0] else None for param in params)
    if again != sql or len(other) != len(params):
        raise AssertionError(f"{name}: its SQL depends on its values, not only its parameters")
    for place, param, repeated in zip(places, params, other, strict=True):
        if (place is None and repeated != param) or (place is not None and repeated != sent[1][place]):
            raise AssertionError(f"{name}: a parameter is computed from a value or the clock: {params}")
    if all_used and set(places) - {None} != set(range(len(shape))):
        raise AssertionError(f"{name}: a value does not reach the SQL as a parameter of its own: {params}")
    constants = tuple(None if place is not None else param for place, param in zip(places, params, strict=True))
    return Statement(sql, places, constants), extra


class _Compiled:
    def __init__(self, build: Callable[..., QuerySet], shape: tuple[type, ...]) -> None:
        def compile_(values: list):
            queryset = build(*values)
            compiler = queryset.query.get_compiler(using=queryset.db)
            return (*compiler.as_sql(), (queryset, compiler))

        name = getattr(build, "__qualname__", repr(build))
        self.statement, (queryset, compiler) = compile_once(name, shape, compile_)
        fields = [column[0] for column in compiler.select[: compiler.col_count]]
        self.compiler, self.converters = compiler, compiler.get_converters(fields)
        self.iterable = queryset._iterable_class
        if queryset._known_related_objects or queryset._prefetch_related_lookups:
            raise AssertionError(f"{name}: a read of a related manager or with prefetches cannot be prepared")
        if self.iterable is ModelIterable:
            klass_info = compiler.klass_info
            first, last = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
            self.model, self.span = klass_info["model"], (first, last)
            self.names = [column[0].target.attname for column in compiler.select[first:last]]
            self.populators = get_related_populators(klass_info, compiler.select, queryset.db)
            self.annotations = compiler.annotation_col_map
        elif self.iterable in (ValuesListIterable, FlatValuesListIterable):
            query = queryset.query
            names = [*query.extra_select, *query.values_select, *query.annotation_select]
            if list(queryset._fields or names) != names:
                raise AssertionError(f"{name}: values_list names its columns out of their select order")
        else:
            raise AssertionError(f"{name}: only models and values_list rows can be prepared")

    def run(self, values: tuple) -> list:
        with connection.cursor() as cursor:
            cursor.execute(self.statement.sql, self.statement.params(values))
            rows = cursor.fetchall()
        if self.converters:
            rows = list(self.compiler.apply_converters(rows, self.converters))
        if self.iterable is FlatValuesListIterable:
            return [row[0] for row in rows]
        if self.iterable is ValuesListIterable:
            return [tuple(row) for row in rows]
        return [self._model(row) for row in rows]

    def _model(self, row):
        first, last = self.span
        obj = self.model.from_db(connection.alias, self.names, row[first:last])
        for populator in self.populators:
            populator.populate(row, obj)
        for name, position in self.annotations.items():
            setattr(obj, name, row[position])
        return obj
