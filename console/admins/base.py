"""What every console table shares: the user's scope, the permission an operator form needs, the read-only
admin with a paginator that never counts a whole big table, and the admin of a namespace's own settings."""

from django import forms
from django.contrib import admin
from django.contrib.admin.views.main import ORDER_VAR, PAGE_VAR, ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.utils.functional import cached_property

from core.identity import identity_of_user
from history.selectors.access import visible_rows

PERMISSIONS = {
    "recover": "history.recover_workflowinstance",
    "control": "history.control_workflowinstance",
    "signal": "history.signal_workflowinstance",
}


VIEW_INSTANCES = "history.view_workflowinstance"


def operator_identity(request, permission: str):
    """The identity the admin user acts as, when it holds ``permission`` (a key of PERMISSIONS) and is an operator."""
    if not request.user.has_perm(PERMISSIONS[permission]):
        raise PermissionDenied
    identity = identity_of_user(request.user)
    if identity is None:
        raise PermissionDenied
    return identity


class CappedCountPaginator(Paginator):
    """Counts at most ``cap`` rows (CAP unless given), so a changelist over millions of rows never scans them all;
    ``capped`` when there are more (the list says "more than")."""

    CAP = 10_000

    def __init__(self, *args, cap: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.cap = self.CAP if cap is None else cap

    @cached_property
    def count(self) -> int:
        # No ORDER BY inside the capped count: it would sort CAP rows just to count them.
        return self.object_list.order_by()[: self.cap + 1].count()

    @property
    def capped(self) -> bool:
        return self.count > self.cap


class IndexedChangeList(ChangeList):
    """A page's rows read from their own table alone, its filters and order on that table's indexes; the rows
    they show beside them read afterwards by primary key, one query each. Joined in, they let MariaDB drive the
    page from the small table (a namespace's few definitions) and sort every instance of each: 6 s at 1M
    instances on a cold pool, where the instances' own (namespace, updated_at) index reads 50 rows."""

    def apply_select_related(self, qs):
        if isinstance(self.list_select_related, list | tuple):
            return qs.prefetch_related(*self.list_select_related)
        return super().apply_select_related(qs)

    def get_ordering(self, request, queryset):
        # Only the columns an admin declares sortable (those an index serves in order) sort, even from a
        # hand-made URL: another order sorts the whole range to show a page of it.
        if self.sortable_by is not None and self.params.get(ORDER_VAR):
            self.params[ORDER_VAR] = ".".join(p for p in self.params[ORDER_VAR].split(".") if self._sortable(p))
        # Not the admin's ordering appended after the chosen one (Django keeps the queryset's): the chosen column
        # and the primary key alone are what its index serves.
        ordering = super().get_ordering(request, queryset.order_by())
        # Django breaks ties by -pk whatever the order's direction: the same direction as the order lets one
        # index (whose entries end with the primary key) serve both.
        ascending = len(ordering) > 1 and isinstance(ordering[-2], str) and not ordering[-2].startswith("-")
        if ascending and ordering[-1] == "-pk":
            ordering[-1] = "pk"
        return ordering

    def _sortable(self, param: str) -> bool:
        index = param.rpartition("-")[2]
        return (
            index.isdigit()
            and int(index) < len(self.list_display)
            and self.list_display[int(index)] in self.sortable_by
        )


def scoped(request, queryset):
    """What this admin user may see: its operator namespace and queues (a bare superuser sees all)."""
    user = request.user
    if user.is_superuser and not hasattr(user, "weave_operator"):
        return queryset
    return visible_rows(queryset, identity_of_user(user))


class ReadOnlyAdmin(admin.ModelAdmin):
    paginator = CappedCountPaginator
    show_full_result_count = False
    list_per_page = 50
    # Never every row of a list on one page ("Show all"), whatever its count: at most the page's own.
    list_max_show_all = list_per_page
    # Count only up to this many pages after the one shown (None: up to CAP).
    pages_counted_ahead: int | None = None

    class Media:
        css = {"all": ["console/console.css"]}
        # The copy buttons beside ids (console.links.copy_button).
        js = ["console/copy.js"]

    def get_changelist(self, request, **kwargs):
        return IndexedChangeList

    def get_paginator(self, request, queryset, per_page, orphans=0, allow_empty_first_page=True):
        cap = None
        if self.pages_counted_ahead is not None:
            page = request.GET.get(PAGE_VAR, "1")
            ahead = ((int(page) if page.isdigit() else 1) + self.pages_counted_ahead) * per_page
            cap = min(ahead, self.paginator.CAP)
        return self.paginator(queryset, per_page, orphans, allow_empty_first_page, cap=cap)

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        return scoped(request, super().get_queryset(request))

    def get_list_select_related(self, request):
        # Django's default follows every foreign key recursively once list_display shows one: for
        # poll rounds a 34-table join MariaDB never finishes planning. Join only the columns shown.
        if self.list_select_related is not False:
            return self.list_select_related
        foreign_keys = {f.name for f in self.model._meta.fields if f.many_to_one or f.one_to_one}
        return tuple(name for name in self.list_display if name in foreign_keys)


class HttpsURLField(forms.URLField):
    """A URL typed without a scheme is taken as https (Django 6's default, without its warning now)."""

    def __init__(self, **kwargs):
        super().__init__(assume_scheme="https", **kwargs)


class NamespaceSettingForm(forms.ModelForm):
    """A setting of the operator's namespace (an approval policy, a webhook): the namespace is the operator's,
    never a field of the form."""

    namespace_id = ""  # set per request by NamespaceSettingAdmin.get_form

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.instance.namespace_id = self.namespace_id

    def validate_unique(self):
        # namespace is not a form field, so the model form would leave the unique constraints unchecked.
        try:
            self.instance.validate_constraints()
        except ValidationError as error:
            self._update_errors(error)


class NamespaceSettingAdmin(admin.ModelAdmin):
    """The admin of a NamespaceSettingForm's rows: those of the user's namespace, edited by an operator only."""

    class Media:
        css = {"all": ["console/console.css"]}

    def get_queryset(self, request):
        return scoped(request, super().get_queryset(request))

    def get_form(self, request, obj=None, change=False, **kwargs):
        identity = identity_of_user(request.user)
        if identity is None:
            raise PermissionDenied
        form = super().get_form(request, obj, change, **kwargs)
        return type(form.__name__, (form,), {"namespace_id": identity.namespace_id})


class IncidentAdmin(admin.ModelAdmin):
    """The console's own incident records (cases, campaigns): whoever may view the instances reads them; adding
    and changing is each admin's own rule; nothing is deleted."""

    class Media:
        css = {"all": ["console/console.css"]}

    def has_module_permission(self, request):
        return request.user.has_perm(VIEW_INSTANCES)

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm(VIEW_INSTANCES)

    def has_change_permission(self, request, obj=None):
        return self.has_add_permission(request)

    def has_delete_permission(self, request, obj=None):
        return False
