"""ASGI entry point: resonate_site.asgi:application, serving everything from one address (the SDKs use one base URL).

- POST / (the protocol) is read whole and decoded on the event loop, then answered by the protocol's own code
  (`respond`: validate, run the handler in its transaction, encode) on the loop's thread when it is alone or
  quick, and on a fixed set of threads otherwise (resonate_site.serving.ProtocolThreads), with
  none of Django's request machinery around it: no URL resolver, middleware or request and response
  objects. Django stays the schema, the console, /api/, the commands and the settings. Served by
  `manage.py serve`, a small body does not even go through ASGI: the HTTP protocol hands it whole to
  `answer_directly` (`application.direct`, resonate_site/serving.py); `protocol` answers the rest the same way.
- GET /health answers on the event loop: it never waits behind protocol requests.
- GET /poll/… streams run on Django's async handler.
- Everything else (the console, /api/, /metrics, /ready) goes to Django's WSGI handler on a thread pool
  of its own, /ready on a thread of its own.
- At startup (ASGI lifespan) the process connects to the message hub, so that it hears streams joining their
  groups anywhere before any of its own connects (outbox.hub.RedisHub.nobody_listens).

Every body is read on the event loop first, within READ_TIMEOUT_MS and MAX_BODY_BYTES: a client that
trickles its body holds a coroutine, never a thread.
"""

import asyncio
import functools
import logging
import os
import types

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")

from a2wsgi import WSGIMiddleware  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.db import connection  # noqa: E402
from django.http.request import split_domain_port, validate_host  # noqa: E402

from floor import rows, telemetry  # noqa: E402
from floor.conf import resonate_settings  # noqa: E402
from floor.transactions import close_if_old, database_troubled, run_together  # noqa: E402
from outbox.hub import hub  # noqa: E402
from resonate_site.auth import refuse_unprotected  # noqa: E402
from resonate_site.serving import (  # noqa: E402
    NOSNIFF,
    ProtocolThreads,
    deadlines,
    freeze_startup_heap,
    header,
    watch_parent,
)

log = logging.getLogger(__name__)
STREAM_PREFIXES = ("/poll/",)
JSON = b"application/json"

django_asgi = get_asgi_application()  # sets Django up: the protocol's modules import models
telemetry.start("resonate-server")  # when OTEL_* asks for it, before the WSGI handler is built (floor/telemetry.py)

# Protocol threads per process, for the requests that arrive while another is in flight (the first runs on the loop's
# thread). PostgreSQL: 6. Four served ~10% more than 2 at 16 clients, and more lost to the GIL, until creates were sent
# together (floor.batching): a statement carries the creates of the threads waiting for it, and with 6 of them
# promise.create at 16 clients was 6-12% faster than with 4 (bench/HISTORY.md, 2026-12-07). SQLite: none, every
# request on the loop's thread. Every transaction there is a writer and takes its turn (floor/sqlite3/base.py), so a
# thread only adds hand-offs and GIL contention: promise.create at 16 clients 1,294 -> 1,656/s, promise.get 2,765 ->
# 4,482/s (bench/HISTORY.md, 2026-12-04, "inline when idle").
THREADS = int(os.environ.get("RESONATE_WSGI_THREADS") or (6 if connection.vendor == "postgresql" else 0))

from resonate_site.protocol.dispatch import quick  # noqa: E402
from resonate_site.protocol.envelope import decoded, refused, respond  # noqa: E402

refuse_unprotected()  # production mode does not start without auth (resonate_site/auth.py)
django_wsgi = WSGIMiddleware(get_wsgi_application(), workers=2)
readiness_wsgi = WSGIMiddleware(get_wsgi_application(), workers=1)
watch_parent()  # a server process whose supervisor died exits too (resonate_site/serving.py)
# Django checks the Host header of every request it serves (DNS rebinding); the protocol's path does the same.
ALLOWED_HOSTS = settings.ALLOWED_HOSTS or ([".localhost", "127.0.0.1", "[::1]"] if settings.DEBUG else [])


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
    elif scope["type"] != "http":
        await django_asgi(scope, receive, send)
    elif scope["path"] == "/" and scope["method"] == "POST":
        await protocol(scope, receive, send)
    elif scope["path"] == "/health":
        await answer(send, 200, b"", b"text/plain")
    elif scope["path"].startswith(STREAM_PREFIXES):
        await django_asgi(scope, receive, send)
    else:
        body = await read_body(scope, receive, send)
        if body is not None:
            wsgi = readiness_wsgi if scope["path"] == "/ready" else django_wsgi
            await wsgi(scope, replay(body), send)


async def lifespan(receive, send):
    """Startup: connect to the hub (it reconnects by itself while Redis is away), then leave what start-up built out
    of garbage collection (freeze_startup_heap). Nothing to do at shutdown."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            hub().start()
            freeze_startup_heap()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def answer_directly(scope, body, reply):
    """POST / with its whole body, from serving.GuardedHttpProtocol: reply(status, body, close=False) is called once,
    on the event loop's thread, now or when the protocol's threads have answered. What `protocol` does, without
    ASGI's task, receive and send."""
    if not host_allowed(scope):
        reply(*refused(400, "Invalid Host header"), close=True)
        return
    envelope = decoded(body)
    item = (body, envelope)
    if protocol_threads.inline_now(quick(envelope)):
        reply(*protocol_threads.inline(item))  # what raises here is answered 500 by the caller
        return
    protocol_threads.elsewhere(item).add_done_callback(functools.partial(reply_when_answered, reply))


def reply_when_answered(reply, answered):
    """Every request is answered, so that its connection and its count as open (serving.ProtocolRequests) end."""
    if answered.cancelled() or answered.exception() is not None:
        log.error("POST / failed", exc_info=None if answered.cancelled() else answered.exception())
        reply(*refused(500, "Internal server error"))
    else:
        reply(*answered.result())


async def protocol(scope, receive, send):
    if not host_allowed(scope):
        await answer(send, *refused(400, "Invalid Host header"), JSON, close=True)
        return
    body = await read_body(scope, receive, send)
    if body is not None:
        envelope = decoded(body)  # here, to tell a quick request (dispatch.quick); decoded once
        item = (body, envelope)
        if telemetry.tracer is not None:  # traced: the body goes with the caller's trace context, if any
            item = (body, envelope, header(scope, b"traceparent"))
        # inline when it is alone or quick (serving.py)
        status, reply = await protocol_threads.answer(item, quick(envelope))
        await answer(send, status, reply, JSON)


def serve_protocol(item):
    close_if_old()  # what Django does at each request: drop a connection past its age or broken
    return respond_to(item)


def serve_together(items):
    """The requests open at once in the embedded mode, answered in one transaction (ProtocolThreads.gathered)."""
    close_if_old()  # once, before the transaction: within it, Django would take the connection for broken
    return run_together([functools.partial(respond_to, item) for item in items])


def respond_to(item):
    if len(item) == 2:
        return respond(*item)
    body, envelope, traceparent = item
    return telemetry.traced_respond(respond, body, traceparent, envelope)


protocol_threads = ProtocolThreads(
    serve_protocol,
    THREADS,
    "resonate-protocol",
    troubled=database_troubled,
    together=serve_together if THREADS == 0 and connection.vendor == "sqlite" else None,
    # PostgreSQL: the threads' creates at one moment go in one statement (floor.batching); never the loop's thread.
    initializer=rows.send_creates_together if connection.vendor == "postgresql" else None,
)


if telemetry.tracer is None:  # a traced request takes the ASGI path (protocol), which passes its trace context on
    application.direct = types.SimpleNamespace(answer=answer_directly, refused=refused)


def host_allowed(scope):
    return allowed_host(header(scope, b"host"))


@functools.lru_cache(maxsize=64)  # a deployment has a few names; bounded, as clients choose what they send
def allowed_host(host):
    domain, _ = split_domain_port(host.decode("latin-1")) if host else ("", "")
    return bool(domain) and validate_host(domain, ALLOWED_HOSTS)


async def read_body(scope, receive, send):
    """The whole request body, or None once the client has been answered (too slow, too large) or has gone."""
    limit, chunks, size = resonate_settings.MAX_BODY_BYTES, [], 0
    if declared_length(scope) > limit:
        await refuse(scope, send, 413, f"Request body larger than {limit} bytes")
        return None
    task, seconds = asyncio.current_task(), resonate_settings.READ_TIMEOUT_MS / 1000
    reading, cancelling = deadlines(asyncio.get_running_loop()), task.cancelling()
    reading.start(task, seconds, task.cancel)
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await refuse(scope, send, 413, f"Request body larger than {limit} bytes")
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
    except asyncio.CancelledError:
        if not reading.stop(task) or task.uncancel() > cancelling:
            raise  # not the read deadline, or not only: the server is stopping, or the client has gone
        await refuse(scope, send, 408, f"Request body not received within {seconds:g} s")
        return None
    finally:
        reading.stop(task)


def declared_length(scope):
    value = header(scope, b"content-length")
    return int(value) if value and value.isdigit() else 0


def replay(body):
    """An ASGI receive that hands over a body already read (a2wsgi asks for nothing after it)."""
    messages = [{"type": "http.disconnect"}, {"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return messages.pop() if len(messages) > 1 else messages[0]

    return receive


async def refuse(scope, send, status, message):
    """An error before any handler ran: an envelope on the protocol's address, plain text elsewhere."""
    if scope["path"] == "/":
        await answer(send, *refused(status, message), JSON, close=True)
    else:
        await answer(send, status, message.encode(), b"text/plain", close=True)


async def answer(send, status, body, content_type, close=False):
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        NOSNIFF,
    ]
    if close:  # a client that sent too much, too slowly or to the wrong host is not kept
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
