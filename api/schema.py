"""The urlconf the OpenAPI schema covers: the REST API alone (not POST /, the streams or the admin).

Regenerate api/openapi.yaml after changing the API:
    .venv/bin/python manage.py spectacular --urlconf api.schema --validate --fail-on-warn --file api/openapi.yaml
"""

from django.urls import include, path

urlpatterns = [path("api/", include("api.urls"))]
