"""OpenTelemetry against a real server: the embedded server started with OTEL_EXPORTER_OTLP_ENDPOINT sends its
traces over OTLP/HTTP to a receiver of this test's own, which decodes them with the OpenTelemetry project's
protobuf definitions. Protocol requests join the caller's trace; the console is traced by the Django
instrumentation (and its queries by psycopg's on PostgreSQL); deliveries and sweeps are spans too."""

import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from django.conf import settings
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.e2e.conftest import embedded_env, start_embedded
from tests.e2e.servers import Client, assert_clean_logs, now_ms


class Receiver:
    """The least OTLP/HTTP traces receiver: POST /v1/traces, protobuf; every span kept, with its service."""

    def __init__(self):
        self.spans, self.lock = [], threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                request = ExportTraceServiceRequest()
                request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.lock:
                    for resource in request.resource_spans:
                        service = {a.key: a.value.string_value for a in resource.resource.attributes}["service.name"]
                        for scope in resource.scope_spans:
                            receiver.spans.extend((service, span) for span in scope.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, test, timeout=20):
        """The spans (service, span) for which test(span) holds, once there is one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                found = [(service, span) for service, span in self.spans if test(span)]
            if found:
                return found
            time.sleep(0.05)
        with self.lock:
            names = sorted({span.name for _, span in self.spans})
        raise AssertionError(f"no such span within {timeout} s; received: {names}")


def attributes(span):
    def value(v):
        return v.string_value or v.int_value or v.bool_value

    return {a.key: value(a.value) for a in span.attributes}


@pytest.fixture(scope="module")
def receiver():
    found = Receiver()
    yield found
    found.server.shutdown()


@pytest.fixture(scope="module")
def traced(database_url, receiver, tmp_path_factory):
    logs = tmp_path_factory.mktemp("logs")
    env = {
        **embedded_env(database_url),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": "resonate-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # export every 0.1 s, not 5 s
    }
    server = start_embedded(env, logs / "server.log")
    yield server
    server.process.stop()
    assert_clean_logs(logs)


def test_a_protocol_request_joins_the_callers_trace(traced, receiver):
    trace_id, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    id = f"otel-{uuid.uuid4().hex[:8]}"
    body = {"kind": "promise.create", "head": {"corrId": "c", "version": "2026-04-01"}}
    body["data"] = {"id": id, "timeoutAt": now_ms() + 60_000, "tags": {}}
    answer = httpx.post(f"{traced.url}/", json=body, headers={"traceparent": f"00-{trace_id}-{parent}-01"})
    assert answer.status_code == 200
    [(service, span)] = receiver.wait(lambda s: attributes(s).get("resonate.id") == id)
    assert service == "resonate-under-test" and span.name == "resonate promise.create"
    assert span.trace_id.hex() == trace_id and span.parent_span_id.hex() == parent
    assert attributes(span)["resonate.status"] == 200


def test_deliveries_and_sweeps_are_traced(traced, receiver):
    rpc = Client(traced.url)
    job, timer = f"job-{uuid.uuid4().hex[:8]}", f"timer-{uuid.uuid4().hex[:8]}"
    assert (
        rpc(
            "promise.create",
            {"id": job, "timeoutAt": now_ms() + 60_000, "tags": {"resonate:target": "poll://any@nobody"}},
        )[0]
        == 200
    )
    assert rpc("promise.create", {"id": timer, "timeoutAt": now_ms() + 200, "tags": {}})[0] == 200

    def delivers_job(span):
        return span.name == "resonate.deliver" and any(
            {a.key: a.value.string_value for a in e.attributes}.get("subject") == job for e in span.events
        )

    receiver.wait(delivers_job)
    receiver.wait(lambda s: s.name == "resonate.sweep" and attributes(s)["resonate.fired"] >= 1)
    assert rpc("promise.get", {"id": timer})[1]["promise"]["state"] == "rejected_timedout"


def test_the_console_is_traced_by_the_django_instrumentation(traced, receiver):
    assert httpx.get(f"{traced.url}/admin/login/").status_code == 200
    receiver.wait(lambda s: attributes(s).get("http.route") == "admin/login/")
    if "postgresql" in settings.DATABASES["default"]["ENGINE"]:  # psycopg's instrumentation; SQLite has none
        receiver.wait(lambda s: attributes(s).get("db.system") == "postgresql")
