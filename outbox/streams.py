"""GET /poll/{group}/{id}: the Server-Sent Events stream that carries execute and unblock messages to a worker."""

import asyncio

from django.http import HttpResponse, StreamingHttpResponse
from django.views.decorators.http import require_GET

from outbox.hub import hub
from resonate_site.auth import Denied, authenticate_stream
from resonate_site.conf import resonate_settings

KEEPALIVE = ":\n\n"
DRAIN_S = 0.5  # a stream that reached its maximum age stays open this long after it stops being advertised


@require_GET
async def poll(request, group, id):
    """Stream this worker's messages (decision D12); the stream ends after SSE_MAX_AGE_MS and the SDK reconnects."""
    try:
        authenticate_stream(request.headers.get("Authorization"))
    except Denied as denied:
        return HttpResponse(denied.message, status=denied.status, content_type="text/plain")
    response = StreamingHttpResponse(events(group, id), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # proxies must not hold events back
    return response


async def events(group, id):
    """The stream's lines. It is registered here, not in the view, so a client gone before the first line
    never leaves a registered stream behind (the finally below runs only once the generator has started)."""
    stream = await hub().register(group, id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + resonate_settings.SSE_MAX_AGE_MS / 1000
    keepalive = resonate_settings.SSE_KEEPALIVE_MS / 1000
    try:
        yield KEEPALIVE  # the stream is open: clients see headers and a first line at once
        while (left := deadline - loop.time()) > 0:
            try:
                yield await asyncio.wait_for(stream.queue.get(), timeout=min(keepalive, left))
            except TimeoutError:
                yield KEEPALIVE
        # Stop being advertised, then pass on what deliverers routed here just before: a message they
        # sent in that moment is marked delivered, and an unblock is never sent again.
        await hub().withdraw(stream)
        while True:
            try:
                yield await asyncio.wait_for(stream.queue.get(), timeout=DRAIN_S)
            except TimeoutError:
                break
    finally:
        await hub().unregister(stream)
