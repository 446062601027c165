"""What every table of the history is built from: the id, reference and exact-JSON field helpers, the
``Revision`` counter, and ``StateFollowed``, the base of a row whose state the timeline follows, with its
save path (one compiled ``INSERT`` per model and one ``UPDATE`` per column set, writing only the columns
that changed since the row was read).
"""

import copy
import weakref

from django.db import DatabaseError, connections, models, router
from django.db.models.signals import post_save, pre_save

from core.ids import new_id


def _id_field() -> models.CharField:
    return models.CharField(primary_key=True, max_length=32, default=new_id, editable=False)


def _ref(to: str, *, null: bool = False, related_name: str = "+", db_index: bool = True) -> models.ForeignKey:
    return models.ForeignKey(
        to,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=null,
        blank=null,
        related_name=related_name,
        db_index=db_index,
    )


def _exact_json(*, null: bool = True) -> models.TextField:
    return models.TextField(null=null, blank=null)


class Revision(models.PositiveBigIntegerField):
    """An unsigned 64-bit revision counter, starting at 1."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("default", 1)
        super().__init__(*args, **kwargs)


# Per connection (a thread's own): the INSERT of a model and the UPDATE of its column sets.
_STATEMENTS: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def _kept(value):
    """A value as read, safe from later changes in place (JSON documents are copied)."""
    return copy.deepcopy(value) if isinstance(value, dict | list) else value


class StateFollowed(models.Model):
    """A row whose ``state`` the timeline follows: it remembers the state it was read with, so the
    writer of ``history.events`` can record before → after when it is saved.

    It also remembers every column it was read with, so a plain ``save()`` of a row read from the
    database writes only the columns that changed since (nothing at all when none did).
    """

    state_at_load: str | None = None

    class Meta:
        abstract = True

    def save(self, *args, update_fields=None, **kwargs):
        as_read = self.__dict__.get("_as_read")
        if update_fields is None and as_read is not None and not self._state.adding and not args and not kwargs:
            # A column deferred at the read and set since is not in ``as_read``: it counts as changed.
            update_fields = [
                f.attname
                for f in self._meta.concrete_fields
                if not f.primary_key
                and f.attname in self.__dict__
                and (f.attname not in as_read or self.__dict__[f.attname] != as_read[f.attname])
            ]
            if not update_fields:
                return
        if update_fields and not self._state.adding and not args and not kwargs:
            self._update_columns(list(update_fields))
        elif self._state.adding and not args and update_fields is None and set(kwargs) <= {"force_insert", "using"}:
            self._insert_row(kwargs.get("using"))
        else:
            super().save(*args, update_fields=update_fields, **kwargs)
        if as_read is not None:
            for name in update_fields or list(as_read):
                attname = self._meta.get_field(name).attname  # update_fields may name a foreign key by its field
                if attname in self.__dict__:
                    as_read[attname] = _kept(self.__dict__[attname])

    def _update_columns(self, names: list[str]) -> None:
        """``save(update_fields=names)`` of a stored row, as Django runs it (signals, field preparation, a
        row that must exist), through an ``UPDATE`` built once per column set: rows the engine changes
        are saved this way several times a transaction, and rebuilding the query cost more than running it."""
        fields = [self._meta.get_field(name) for name in names]
        if any(hasattr(getattr(self, field.attname), "resolve_expression") for field in fields):
            super().save(update_fields=names)  # an expression is compiled by the query
            return
        using = self._state.db or router.db_for_write(type(self), instance=self)
        database = connections[using]
        pre_save.send(sender=type(self), instance=self, raw=False, using=using, update_fields=frozenset(names))
        values = [field.pre_save(self, False) for field in fields]
        statements = _STATEMENTS.setdefault(database, {})
        columns = tuple(field.column for field in fields)
        if ("UPDATE", type(self), columns) not in statements:
            quote = database.ops.quote_name
            assignments = ", ".join(f"{quote(column)} = %s" for column in columns)
            statements["UPDATE", type(self), columns] = (
                f"UPDATE {quote(self._meta.db_table)} SET {assignments} WHERE {quote(self._meta.pk.column)} = %s"
            )
        params = [
            field.get_db_prep_save(value, connection=database) for field, value in zip(fields, values, strict=True)
        ]
        with database.cursor() as cursor:
            cursor.execute(statements["UPDATE", type(self), columns], [*params, self.pk])
            if cursor.rowcount == 0:
                raise DatabaseError("Save with update_fields did not affect any rows.")
        self._state.db = using
        post_save.send(
            sender=type(self), instance=self, created=False, update_fields=frozenset(names), raw=False, using=using
        )

    def _insert_row(self, using: str | None) -> None:
        """The ``save()`` that creates a row, as Django runs it for a model whose key is set before it is
        saved (signals, field preparation, related rows saved first), through one ``INSERT`` per model."""
        fields = [field for field in self._meta.local_concrete_fields if not field.generated]
        if any(hasattr(getattr(self, field.attname), "resolve_expression") for field in fields):
            super().save(force_insert=True, using=using)  # an expression is compiled by the query
            return
        using = using or router.db_for_write(type(self), instance=self)
        database = connections[using]
        self._prepare_related_fields_for_save(operation_name="save")
        pre_save.send(sender=type(self), instance=self, raw=False, using=using, update_fields=None)
        params = [field.get_db_prep_save(field.pre_save(self, True), connection=database) for field in fields]
        statements = _STATEMENTS.setdefault(database, {})
        if ("INSERT", type(self)) not in statements:
            quote = database.ops.quote_name
            columns = ", ".join(quote(field.column) for field in fields)
            statements["INSERT", type(self)] = (
                f"INSERT INTO {quote(self._meta.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"
            )
        with database.cursor() as cursor:
            cursor.execute(statements["INSERT", type(self)], params)
        self._state.adding = False
        self._state.db = using
        post_save.send(sender=type(self), instance=self, created=True, update_fields=None, raw=False, using=using)

    @classmethod
    def from_db(cls, db, field_names, values):
        row = super().from_db(db, field_names, values)
        row.state_at_load = row.__dict__.get("state")
        row._as_read = {name: _kept(value) for name, value in zip(field_names, values, strict=True)}
        return row

    def refresh_from_db(self, using=None, fields=None, from_queryset=None):
        super().refresh_from_db(using=using, fields=fields, from_queryset=from_queryset)
        if fields is None or "state" in fields:
            self.state_at_load = self.__dict__.get("state")
        as_read = self.__dict__.get("_as_read")
        # A deferred column read later arrives here too: from then on it is known as read.
        for name in (fields or list(as_read)) if as_read is not None else ():
            if name in self.__dict__:
                as_read[name] = _kept(self.__dict__[name])
