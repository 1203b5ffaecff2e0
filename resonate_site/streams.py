"""GET /poll/{group}/{id}: the Server-Sent Events stream that carries execute and unblock messages to a worker."""

import asyncio
import collections

from django.http import HttpResponse, StreamingHttpResponse
from django.views.decorators.http import require_GET

from floor.conf import resonate_settings
from outbox.hub import ENDING, HubUnavailable, hub, requeue
from resonate_site.auth import Denied, authenticate_stream
from resonate_site.serving import CLOSING

KEEPALIVE = ":\n\n"


@require_GET
async def poll(request, group, id):
    """Stream this worker's messages (decision D12); the stream ends after SSE_MAX_AGE_MS and the SDK reconnects."""
    try:
        authenticate_stream(request.headers.get("Authorization"))
    except Denied as denied:
        return HttpResponse(denied.message, status=denied.status, content_type="text/plain")
    if not await hub().ready():  # the SDKs reconnect after a pause: better than a stream that receives nothing
        return HttpResponse("The message hub is unavailable; reconnect shortly", status=503, content_type="text/plain")
    closing = request.scope.get("extensions", {}).get(CLOSING, never)
    response = StreamingHttpResponse(events(group, id, closing), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # proxies must not hold events back
    return response


def never():
    """Whether the connection is closing, where the server cannot tell (a test client)."""
    return False


# A message written counts as delivered once its connection has stayed open this long after the write. A client
# that breaks the connection (RST or FIN) loses what was still in flight to it, which a write's success does not
# tell; a break the server hears within this time sends the message again instead (at least once). Well inside a
# claim's lease (outbox.delivery.POLL_LEASE_MS, 5 s), so nobody else takes the message meanwhile.
RECEIPT_S = 0.5


async def events(group, id, closing=never):
    """The stream's lines. It is registered here, not in the view, so a client gone before the first line
    never leaves a registered stream behind (the finally below runs only once the generator has started).

    At its maximum age, or when its server process stops (outbox.hub.end_streams), the stream is closed in the hub
    first, then sends what was routed to it before.
    Whatever it took but never handed on goes back to the outbox: a message is handed on only while
    `closing()` says the connection is open, since a write to a closed one is dropped without an error. A message
    written counts as sent, and is recorded delivered, once the connection is still open RECEIPT_S after the write
    (or as the stream ends at its maximum age); one whose connection closes sooner goes back to the outbox too.
    """
    try:
        stream = await hub().register(group, id)
    except HubUnavailable:  # Redis went away since the view asked: end the stream, the SDK reconnects
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + resonate_settings.SSE_MAX_AGE_MS / 1000
    keepalive = resonate_settings.SSE_KEEPALIVE_MS / 1000
    closed, in_hand, unconfirmed = False, None, collections.deque()  # unconfirmed: (written at, identity)

    def confirm(written_before):
        """Record delivered what was written before `written_before` (loop time), the connection still open."""
        while unconfirmed and unconfirmed[0][0] <= written_before and not closing():
            stream.written(unconfirmed.popleft()[1])

    try:
        yield KEEPALIVE  # the stream is open: clients see headers and a first line at once
        quiet_until = loop.time() + keepalive
        while (now := loop.time()) < deadline:
            wake = min(quiet_until, deadline, unconfirmed[0][0] + RECEIPT_S if unconfirmed else deadline)
            try:
                in_hand = await asyncio.wait_for(stream.queue.get(), timeout=max(0.0, wake - now))
            except TimeoutError:
                if closing():  # what it wrote last may not have reached the client: it goes back (finally)
                    return
                confirm(loop.time() - RECEIPT_S)
                if loop.time() >= quiet_until:
                    yield KEEPALIVE
                    quiet_until = loop.time() + keepalive
                continue
            if in_hand is ENDING:  # its server process is stopping (outbox.hub.end_streams)
                in_hand = None
                break
            if closing():
                return
            yield in_hand[0]
            quiet_until = loop.time() + keepalive
            if closing():  # the write waited for a slow client, whose connection closed meanwhile: it may not have
                return  # gone out, and is sent again (at least once)
            unconfirmed.append((loop.time(), in_hand[1]))
            in_hand = None
            confirm(loop.time() - RECEIPT_S)
        await hub().close(stream)
        closed = True
        while not stream.queue.empty() and not closing():
            in_hand = stream.queue.get_nowait()
            if in_hand is ENDING:
                continue
            yield in_hand[0]
            if closing():  # as above
                return
            unconfirmed.append((loop.time(), in_hand[1]))
            in_hand = None
        confirm(float("inf"))  # the stream ends here, its connection open: its client reads to the end
    finally:
        try:
            if not closed:
                await to_the_end(hub().close(stream))
        finally:
            requeue(([in_hand[1]] if in_hand else []) + [identity for _, identity in unconfirmed] + stream.leftovers())


async def to_the_end(coroutine):
    """Run `coroutine` to its end even if this task is cancelled meanwhile, then let the cancellation go on.

    A stream ends when its client leaves, and the server cancels the request soon after: the stream's close in
    the hub must still finish, and only then is what it left sent back to the outbox (nothing can reach its
    queue later)."""
    task = asyncio.ensure_future(coroutine)
    cancelled = False
    while True:
        try:
            await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
