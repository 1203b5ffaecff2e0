"""URL routes: the protocol endpoint at /, the workers' message streams, health checks, and the admin."""

import orjson
from django.contrib import admin
from django.http import HttpResponse
from django.urls import include, path

from resonate_site.health import health, ready
from resonate_site.metrics import metrics
from resonate_site.protocol.envelope import CRASHED, ProtocolView
from resonate_site.streams import poll

urlpatterns = [
    path("", ProtocolView.as_view(), name="protocol"),
    path("poll/<str:group>/<str:id>", poll, name="poll"),
    path("health", health, name="health"),
    path("ready", ready, name="ready"),
    path("metrics", metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/", include("api.urls")),
]


def server_error(request):
    """Django's last resort when a view raised: the protocol's clients read JSON, so never an HTML page."""
    if request.path == "/":
        return HttpResponse(orjson.dumps(CRASHED), status=500, content_type="application/json")
    return HttpResponse("Internal server error", status=500, content_type="text/plain")


handler500 = server_error
