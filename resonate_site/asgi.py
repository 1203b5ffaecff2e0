"""ASGI entry point: resonate_site.asgi:application, serving everything from one address (the SDKs use one base URL).

- GET /health answers on the event loop: it never waits behind protocol requests.
- GET /poll/… streams run on Django's async handler.
- Every other request is read whole on the event loop first (within READ_TIMEOUT_MS and MAX_BODY_BYTES)
  and only then handed to Django's WSGI handler in a bounded thread pool, which runs the protocol's short,
  database-bound requests several times faster than Django's sync-under-ASGI path (bench/README.md). A client
  that trickles its body holds a coroutine, never one of those threads. GET /ready has a thread of its own.
"""

import asyncio
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")

import orjson  # noqa: E402
from a2wsgi import WSGIMiddleware  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402

from resonate_site.auth import refuse_unprotected  # noqa: E402
from resonate_site.conf import resonate_settings  # noqa: E402
from resonate_site.serving import watch_parent  # noqa: E402

STREAM_PREFIXES = ("/poll/",)
THREADS = int(os.environ.get("RESONATE_WSGI_THREADS", "2"))

django_asgi = get_asgi_application()
refuse_unprotected()  # production mode does not start without auth (resonate_site/auth.py)
django_wsgi = WSGIMiddleware(get_wsgi_application(), workers=THREADS)
readiness_wsgi = WSGIMiddleware(get_wsgi_application(), workers=1)
watch_parent()  # a server process whose supervisor died exits too (resonate_site/serving.py)


async def application(scope, receive, send):
    if scope["type"] != "http":
        await django_asgi(scope, receive, send)
    elif scope["path"] == "/health":
        await answer(send, 200, b"", b"text/plain")
    elif scope["path"].startswith(STREAM_PREFIXES):
        await django_asgi(scope, receive, send)
    else:
        body = await read_body(scope, receive, send)
        if body is not None:
            wsgi = readiness_wsgi if scope["path"] == "/ready" else django_wsgi
            await wsgi(scope, replay(body), send)


async def read_body(scope, receive, send):
    """The whole request body, or None once the client has been answered (too slow, too large) or has gone."""
    limit, chunks, size = resonate_settings.MAX_BODY_BYTES, [], 0
    if declared_length(scope) > limit:
        await refuse(scope, send, 413, f"Request body larger than {limit} bytes")
        return None
    try:
        async with asyncio.timeout(resonate_settings.READ_TIMEOUT_MS / 1000):
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
    except TimeoutError:
        seconds = resonate_settings.READ_TIMEOUT_MS / 1000
        await refuse(scope, send, 408, f"Request body not received within {seconds:g} s")
        return None


def declared_length(scope):
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


def replay(body):
    """An ASGI receive that hands over a body already read (a2wsgi asks for nothing after it)."""
    messages = [{"type": "http.disconnect"}, {"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return messages.pop() if len(messages) > 1 else messages[0]

    return receive


async def refuse(scope, send, status, message):
    """An error before any handler ran: an envelope on the protocol's address, plain text elsewhere."""
    if scope["path"] == "/":
        from resonate_site.metrics import request_answered
        from resonate_site.protocol.dispatch import OPERATIONS
        from resonate_site.protocol.envelope import reply

        envelope = reply("unknown", "0", status, message)
        request_answered(envelope, 0.0, OPERATIONS)
        await answer(send, status, orjson.dumps(envelope), b"application/json")
    else:
        await answer(send, status, message.encode(), b"text/plain")


async def answer(send, status, body, content_type):
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if status >= 400:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
