"""OpenTelemetry, opt-in (floor/telemetry.py): the server's own spans, read from an in-memory exporter. The
instrumentations and the OTLP export run against a real server in tests/e2e/test_telemetry.py."""

import os
import subprocess
import sys

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from floor import telemetry
from outbox import delivery
from resonate_site.protocol.envelope import respond
from tests.conftest import VERSION, targeted

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@pytest.fixture
def spans(monkeypatch):
    """Tracing on for this test, into memory (a provider of the test's own: the process's global one is untouched)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(telemetry, "tracer", provider.get_tracer("test"))
    return exporter


def body(kind, data):
    return orjson.dumps({"kind": kind, "head": {"corrId": "c", "version": VERSION}, "data": data})


def test_traces_are_wanted_only_with_an_otlp_endpoint_and_the_sdk_not_disabled():
    assert not telemetry.wanted({})
    assert telemetry.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert telemetry.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert not telemetry.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"})
    assert not telemetry.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": ""})


def test_a_protocol_request_is_a_span_in_the_callers_trace(db, spans):
    traceparent = f"00-{TRACE}-{PARENT}-01".encode()
    status, _ = telemetry.traced_respond(respond, body("promise.create", targeted("p", 4102444800000)), traceparent)
    assert status == 200
    [span] = spans.get_finished_spans()
    assert span.name == "resonate promise.create"
    assert dict(span.attributes) == {"resonate.operation": "promise.create", "resonate.id": "p", "resonate.status": 200}
    assert format(span.context.trace_id, "032x") == TRACE and format(span.parent.span_id, "016x") == PARENT


def test_a_request_without_a_trace_context_starts_a_trace_and_a_refusal_is_recorded(db, spans):
    status, _ = telemetry.traced_respond(respond, body("promise.get", {"id": "nobody"}), None)
    assert status == 404
    unreadable, _ = telemetry.traced_respond(respond, b"{not json", None)
    assert unreadable == 400
    found, garbled = spans.get_finished_spans()
    assert found.parent is None and found.attributes["resonate.status"] == 404
    assert garbled.name == "resonate unknown" and "resonate.id" not in garbled.attributes


def test_a_delivery_is_a_span_with_an_event_per_message(db, protocol, spans):
    assert protocol("promise.create", targeted("job", 4102444800000)).status == 200
    delivery.deliver()
    [span] = [s for s in spans.get_finished_spans() if s.name == "resonate.deliver"]
    [event] = span.events
    assert span.attributes["resonate.messages"] == 1
    assert dict(event.attributes) == {
        "kind": "execute",
        "subject": "job",
        "address": "poll://any@default",
        "outcome": "UNREACHED",
        "detail": delivery.NO_STREAM,
    }


def test_off_nothing_is_traced_and_nothing_of_opentelemetry_is_loaded(db, protocol):
    assert telemetry.tracer is None
    assert telemetry.span("resonate.deliver").__enter__() is None
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, resonate_site.asgi; print(sorted({m.split('.')[0] for m in sys.modules}))"],
        env={**env, "RESONATE_AUTH_DISABLED": "true"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "opentelemetry" not in loaded and "django" in loaded
