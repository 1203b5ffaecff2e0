"""OpenTelemetry traces, opt-in: off unless OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set.

On, each process (a server process, a Celery worker process, Beat) sends its spans over OTLP/HTTP, configured by
the usual OTEL_* variables (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_HEADERS, the
sampler's OTEL_TRACES_SAMPLER…), with the OpenTelemetry project's own instrumentations of Django (the console,
/api/), psycopg and Celery, and the server's own spans:

- `resonate <kind>` for each protocol request on POST / (resonate.operation, resonate.id, resonate.status), a
  child of the caller's trace when the request carries a W3C `traceparent` header: then the spans of everything
  that request does join the caller's trace;
- `resonate.deliver` for each batch of messages a deliverer sends, an event per message (kind, subject,
  address, outcome), and `resonate.push` for each HTTP push; messages handed by the request that wrote them to a
  stream of its own process are a `resonate.deliver` too (resonate.transport "stream"), in the request's trace;
- `resonate.sweep` for each background pass of the timeout sweep that fired something (resonate.fired).

Off, nothing of OpenTelemetry is imported, and each of those places costs one test of `tracer` against None.
"""

import contextlib
import logging
import os

import orjson

log = logging.getLogger(__name__)

tracer = None  # the server's tracer once start() has run with tracing on; None means off


def wanted(environ=os.environ):
    """Whether the OTEL_* variables ask for traces: an OTLP endpoint set, and the SDK not disabled."""
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return bool(endpoint) and environ.get("OTEL_SDK_DISABLED", "").strip().lower() != "true"


def start(service, exporter=None, instrument=True):
    """Turn tracing on in this process when wanted (or with `exporter`, which tests pass: spans go there, at once).
    Once per process, after Django is set up and before its WSGI handler is built (the Django instrumentation adds
    a middleware). `service` names the process's role unless OTEL_SERVICE_NAME does."""
    global tracer
    if tracer is not None or (exporter is None and not wanted()):
        return
    from opentelemetry import trace
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or service})
    provider = TracerProvider(resource=resource)
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    if instrument:
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
        from opentelemetry.instrumentation.django import DjangoInstrumentor
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

        DjangoInstrumentor().instrument()
        PsycopgInstrumentor().instrument()
        CeleryInstrumentor().instrument()
    tracer = trace.get_tracer("resonate")
    log.info("OpenTelemetry traces on: service %s", resource.attributes.get(SERVICE_NAME))


def span(name, **attributes):
    """A span of the server's own, or nothing when tracing is off."""
    if tracer is None:
        return contextlib.nullcontext()
    return tracer.start_as_current_span(name, attributes=attributes)


def finished(name, started_ns, **attributes):
    """A span that began at `started_ns` (time.time_ns()) and ends now, for work worth a span only once it turns
    out to have done something (a sweep that fired timeouts)."""
    tracer.start_span(name, attributes=attributes, start_time=started_ns).end()


def traced_respond(respond, body, traceparent, envelope=None):
    """respond(body, envelope) inside a `resonate <kind>` span, a child of the caller's trace when it sent
    `traceparent`. `envelope`: the body already decoded, if it was."""
    from opentelemetry.propagate import extract
    from opentelemetry.trace import SpanKind, Status, StatusCode

    parent = extract({"traceparent": traceparent.decode("latin-1")}) if traceparent else None
    kind, id = operation_of(body if envelope is None else envelope)
    with tracer.start_as_current_span(f"resonate {kind}", context=parent, kind=SpanKind.SERVER) as current:
        current.set_attribute("resonate.operation", kind)
        if id is not None:
            current.set_attribute("resonate.id", id)
        status, reply = respond(body, envelope)
        current.set_attribute("resonate.status", status)
        if status >= 500:
            current.set_status(Status(StatusCode.ERROR, f"status {status}"))
        return status, reply


def operation_of(body):
    """The envelope's kind and its data's id (or task id), as far as the body (bytes, or decoded) lets them be read."""
    if isinstance(body, bytes | bytearray | memoryview):
        try:
            envelope = orjson.loads(body)
        except orjson.JSONDecodeError:
            return "unknown", None
    else:
        envelope = body
    if not isinstance(envelope, dict):
        return "unknown", None
    kind = envelope.get("kind") if isinstance(envelope.get("kind"), str) else "unknown"
    data = envelope.get("data")
    id = data.get("id") if isinstance(data, dict) else None
    return kind, id if isinstance(id, str) else None


def delivered(current, messages, outcomes):
    """An event on the deliver span for each message sent and how it went."""
    for message, (outcome, detail) in zip(messages, outcomes, strict=True):
        attributes = {"kind": message.kind, "subject": message.subject, "address": message.address}
        attributes["outcome"] = outcome.name
        if detail:
            attributes["detail"] = detail
        current.add_event("message", attributes)
