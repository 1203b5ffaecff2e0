"""OpenTelemetry against a real server: the embedded server started with OTEL_EXPORTER_OTLP_ENDPOINT sends its
traces over OTLP/HTTP to a receiver of this test's own, which decodes them with the OpenTelemetry project's
protobuf definitions. Protocol requests join the caller's trace; the console is traced by the Django
instrumentation (and its queries by psycopg's on PostgreSQL); deliveries and sweeps are spans too."""

import threading
import time
import uuid

import httpx
import pytest
from django.conf import settings

from tests.e2e.conftest import embedded_env, start_embedded
from tests.e2e.otlp import attributes
from tests.e2e.servers import Client, assert_clean_logs, now_ms


@pytest.fixture(scope="module")
def traced(database_url, otlp_receiver, tmp_path_factory):
    logs = tmp_path_factory.mktemp("logs")
    env = {
        **embedded_env(database_url),
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_receiver.url,
        "OTEL_SERVICE_NAME": "resonate-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # export every 0.1 s, not 5 s
    }
    server = start_embedded(env, logs / "server.log")
    yield server
    server.process.stop()
    assert_clean_logs(logs)


def test_a_protocol_request_joins_the_callers_trace(traced, otlp_receiver):
    trace_id, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    id = f"otel-{uuid.uuid4().hex[:8]}"
    body = {"kind": "promise.create", "head": {"corrId": "c", "version": "2026-04-01"}}
    body["data"] = {"id": id, "timeoutAt": now_ms() + 60_000, "tags": {}}
    answer = httpx.post(f"{traced.url}/", json=body, headers={"traceparent": f"00-{trace_id}-{parent}-01"})
    assert answer.status_code == 200
    [(service, span)] = otlp_receiver.wait(lambda s: attributes(s).get("resonate.id") == id)
    assert service == "resonate-under-test" and span.name == "resonate promise.create"
    assert span.trace_id.hex() == trace_id and span.parent_span_id.hex() == parent
    assert attributes(span)["resonate.status"] == 200


def test_deliveries_and_sweeps_are_traced(traced, otlp_receiver):
    rpc = Client(traced.url)
    pushed, streamed, timer = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("pushed", "streamed", "timer"))
    group = f"g{uuid.uuid4().hex[:8]}"
    listening = threading.Event()

    def listen():  # a worker's stream in this process's group: the server hands it the execute at once
        with httpx.stream("GET", f"{traced.url}/poll/{group}/w1", timeout=10) as stream:
            listening.set()
            for _ in stream.iter_lines():
                pass

    threading.Thread(target=listen, daemon=True).start()
    assert listening.wait(5)
    time.sleep(0.3)  # the stream has joined its group
    # The writing request hands an execute to its stream itself only while the deliverer thread has read delivery
    # unpaused within the last 100 ms (Deliverer.hand_over); otherwise the deliverer sends it, as the pushed one's
    # wake-up does. So several go back to back: those after the first find that read fresh.
    streamed = [f"{streamed}-{n}" for n in range(5)]
    for id, target in ((pushed, "http://127.0.0.1:9/unreachable"), *((id, f"poll://any@{group}") for id in streamed)):
        assert (
            rpc("promise.create", {"id": id, "timeoutAt": now_ms() + 60_000, "tags": {"resonate:target": target}})[0]
            == 200
        )
    assert rpc("promise.create", {"id": timer, "timeoutAt": now_ms() + 200, "tags": {}})[0] == 200

    def delivers(job, outcome):
        def test(span):
            events = [{a.key: a.value.string_value for a in e.attributes} for e in span.events]
            return span.name == "resonate.deliver" and {"subject": job, "outcome": outcome}.items() <= next(
                (e.items() for e in events if e.get("subject") == job), {}.items()
            )

        return test

    otlp_receiver.wait(delivers(pushed, "RETRY"))
    otlp_receiver.wait(lambda s: s.name == "resonate.push" and "127.0.0.1:9" in attributes(s)["url.full"])
    otlp_receiver.wait(
        lambda span: (
            attributes(span).get("resonate.transport") == "stream"
            and any(delivers(id, "TAKEN")(span) for id in streamed)
        )
    )
    otlp_receiver.wait(lambda s: s.name == "resonate.sweep" and attributes(s)["resonate.fired"] >= 1)
    assert rpc("promise.get", {"id": timer})[1]["promise"]["state"] == "rejected_timedout"


def test_the_console_is_traced_by_the_django_instrumentation(traced, otlp_receiver):
    assert httpx.get(f"{traced.url}/admin/login/").status_code == 200
    otlp_receiver.wait(lambda s: attributes(s).get("http.route") == "admin/login/")
    if "postgresql" in settings.DATABASES["default"]["ENGINE"]:  # psycopg's instrumentation; SQLite has none
        otlp_receiver.wait(lambda s: attributes(s).get("db.system") == "postgresql")
