import os

from django.core.wsgi import get_wsgi_application

from weave_site.observability import observability_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "weave_site.settings")
observability_init()
application = get_wsgi_application()

from api.parsing import chunked_bodies_read  # noqa: E402 - the API's modules read the settings named above

# A chunked body is read within the body limit where the server ends it, else refused (api/parsing.py).
application = chunked_bodies_read(application)
