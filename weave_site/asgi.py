import os

from django.core.asgi import get_asgi_application

from weave_site.observability import observability_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "weave_site.settings")
observability_init()
application = get_asgi_application()
