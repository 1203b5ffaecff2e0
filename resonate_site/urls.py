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

PATHS = {
    "POST /": "the protocol: one JSON envelope per request",
    "GET /poll/{group}/{id}": "a worker's message stream (SSE)",
    "GET /health": "liveness",
    "GET /ready": "readiness: the database and the hub answer",
    "GET /metrics": "Prometheus metrics",
    "/api/": "the REST API (its OpenAPI schema: /api/schema/)",
    "/admin/": "the operators' console",
}


def not_found(request, exception=None):
    """An unknown path: JSON, as everything else a client of this server reads, saying what exists."""
    body = {"error": f"no such path: {request.path}", "paths": PATHS}
    return HttpResponse(orjson.dumps(body), status=404, content_type="application/json")


handler404 = not_found
