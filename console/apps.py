from django.contrib.admin import apps as admin_apps


class ConsoleAdminConfig(admin_apps.AdminConfig):
    """Django's admin with the console's site: the review queue as its home, the tables grouped by purpose."""

    # Not the "console" app's own config: that one stays Django's default.
    default = False
    default_site = "console.site.ConsoleSite"
