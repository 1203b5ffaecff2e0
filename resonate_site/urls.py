"""URL routes: the protocol endpoint at /, health checks, and the admin."""

from django.contrib import admin
from django.urls import path

from resonate_site.health import health, ready
from resonate_site.protocol.envelope import ProtocolView

urlpatterns = [
    path("", ProtocolView.as_view(), name="protocol"),
    path("health", health, name="health"),
    path("ready", ready, name="ready"),
    path("admin/", admin.site.urls),
]
