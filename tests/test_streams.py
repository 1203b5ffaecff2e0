"""How a poll stream ends (outbox/streams.py): it stops being advertised, then passes on what was in flight."""

import asyncio

from outbox.hub import hub
from outbox.streams import DRAIN_S, events


def test_a_message_routed_as_the_stream_reaches_its_maximum_age_still_reaches_the_client(settings):
    settings.RESONATE = {**settings.RESONATE, "SSE_MAX_AGE_MS": 100, "SSE_KEEPALIVE_MS": 1000, "HUB_URL": ""}

    async def scenario():
        received = []
        lines = events("drain", "w1")
        received.append(await anext(lines))  # the stream is registered and open
        [stream] = hub().streams["drain"].values()
        # In flight when the stream stops being advertised (0.1 s): it arrives during the drain.
        asyncio.get_running_loop().call_later(0.1 + DRAIN_S / 2, stream._put, "data: late\n\n")
        received += [item async for item in lines]
        routed_after = hub().publish_all([("poll://uni@drain/w1", {"kind": "unblock"})])
        return received, routed_after

    received, routed_after = asyncio.run(scenario())
    assert "data: late\n\n" in received
    assert routed_after == [False]  # the ended stream is no longer a destination
