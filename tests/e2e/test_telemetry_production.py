"""OpenTelemetry in production mode: its server processes, Celery worker and Beat, started with
OTEL_EXPORTER_OTLP_ENDPOINT, each send their traces, under their own service names, to a local collector
(tests/e2e/otlp.py). A module of its own: its deployment must be the only one on its database."""

import uuid

import pytest

from tests.e2e.conftest import FAST
from tests.e2e.otlp import attributes
from tests.e2e.servers import Client, now_ms

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def server_settings(otlp_receiver):
    """Production mode's processes (this module's `production`) send their traces to the receiver too."""
    return {**FAST, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}


def test_production_modes_celery_worker_and_beat_are_traced(production, otlp_receiver):
    rpc = Client(production.servers[0].url)
    job = f"job-{uuid.uuid4().hex[:8]}"
    target = {"resonate:target": "http://127.0.0.1:9/unreachable"}  # a push: the Celery worker sends it
    assert rpc("promise.create", {"id": job, "timeoutAt": now_ms() + 60_000, "tags": target})[0] == 200
    pushed = otlp_receiver.wait(lambda s: s.name == "resonate.push" and "127.0.0.1:9" in attributes(s)["url.full"])
    assert {service for service, _ in pushed} == {"resonate-worker"}
    runs = otlp_receiver.wait(lambda s: s.name.startswith("run/"))  # the Celery instrumentation, in the worker
    assert {service for service, _ in runs} == {"resonate-worker"}
    sent = otlp_receiver.wait(lambda s: s.name.startswith("apply_async/timeouts.tasks.sweep"))  # Beat's schedule
    assert "resonate-beat" in {service for service, _ in sent}
    served = otlp_receiver.wait(lambda s: attributes(s).get("resonate.id") == job)
    assert {service for service, _ in served} == {"resonate-server"}
