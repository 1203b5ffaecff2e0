"""URL routes: the protocol endpoint at /, the workers' message streams, health checks, and the admin."""

from django.contrib import admin
from django.urls import include, path

from outbox.streams import poll
from resonate_site.health import health, ready
from resonate_site.metrics import metrics
from resonate_site.protocol.envelope import ProtocolView

urlpatterns = [
    path("", ProtocolView.as_view(), name="protocol"),
    path("poll/<str:group>/<str:id>", poll, name="poll"),
    path("health", health, name="health"),
    path("ready", ready, name="ready"),
    path("metrics", metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/", include("api.urls")),
]
