"""CPU of the HTTP side of one POST / in the server's protocol, with no socket and no handler.

    .venv/bin/python bench/http_side.py [--requests 20000]

Feeds resonate_site.serving.GuardedHttpProtocol the same POST / (the headers wrk sends, a promise.get body) again
and again on uvloop, through a transport that only counts its writes, to an application that answers `{}` at once:
once through its `direct` path (the protocol hands the body over and writes the answer itself), once through ASGI
(a task, receive, two sends). Prints µs of CPU per request for each, the loop's own turns subtracted, and the
writes per request. What a real socket adds (the sends, the client's wake-ups) is not in it.
"""

import argparse
import asyncio
import os
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")

BODY = b'{"kind":"promise.get","head":{"corrId":"1","version":"2026-04-01"},"data":{"id":"g-1"}}'
REQUEST = (
    b"POST / HTTP/1.1\r\nHost: 127.0.0.1:8001\r\nUser-Agent: wrk\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
)


class Answering:
    """An ASGI application answering `{}`; with `direct`, also offering the direct path."""

    def __init__(self, direct):
        if direct:
            self.direct = types.SimpleNamespace(answer=lambda scope, body, reply: reply(200, b"{}"), refused=None)

    async def __call__(self, scope, receive, send):
        await receive()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})


class CountingTransport(asyncio.Transport):
    def __init__(self):
        super().__init__()
        self.writes, self.closing = 0, False

    def write(self, data):
        self.writes += 1

    def is_closing(self):
        return self.closing

    def close(self):
        self.closing = True

    def get_extra_info(self, name, default=None):
        return {"sockname": ("127.0.0.1", 8001), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


async def per_request(direct, n):
    import uvicorn
    from uvicorn.server import ServerState

    from resonate_site.serving import GuardedHttpProtocol

    config = uvicorn.Config(Answering(direct), http=GuardedHttpProtocol, lifespan="off", log_level="error")
    config.load()
    protocol = GuardedHttpProtocol(config, ServerState(), {}, asyncio.get_running_loop())
    protocol.access_log = False  # as serve runs it
    transport = CountingTransport()
    protocol.connection_made(transport)

    async def turns(feed, count):
        started = time.process_time()
        for _ in range(count):
            if feed:
                protocol.data_received(REQUEST)
            await asyncio.sleep(0)  # the answer comes on the next turns of the loop, on either path
            await asyncio.sleep(0)
        return time.process_time() - started

    await turns(True, 500)  # warm up
    writes = transport.writes
    spent = await turns(True, n) - await turns(False, n)
    return spent / n * 1e6, (transport.writes - writes) / n


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    args = parser.parse_args()
    import django
    import uvloop

    django.setup()
    for direct in (True, False):
        cpu, writes = uvloop.run(per_request(direct, args.requests))
        print(f"{'direct' if direct else 'ASGI':6}  {cpu:5.1f} µs of CPU per request, {writes:.0f} writes")


if __name__ == "__main__":
    main()
