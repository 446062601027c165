"""The product's ModelAdmins with Django's defaults (full COUNTs, default paginator and change list: the rows
they name joined in, any column sortable), for comparison."""

from django.contrib import admin
from django.core.paginator import Paginator

site = admin.AdminSite(name="bench_default_admin")

for model, model_admin in admin.site._registry.items():
    defaults = type(
        f"Default{type(model_admin).__name__}",
        (type(model_admin),),
        {
            "paginator": Paginator,
            "get_paginator": admin.ModelAdmin.get_paginator,
            "show_full_result_count": True,
            "get_changelist": admin.ModelAdmin.get_changelist,
            "sortable_by": None,
        },
    )
    site.register(model, defaults)
