"""How a poll stream ends (resonate_site/streams.py): closed in the hub first, then what was routed to it is sent,
and what it took but never sent goes back to the outbox."""

import asyncio
import time

import pytest

from floor.conf import resonate_settings
from outbox.hub import hub
from outbox.models import DeliveryState, Message, MessageKind
from resonate_site.streams import events

ADDRESS = "poll://uni@drain/w1"


@pytest.fixture
def memory_hub(settings, monkeypatch):
    import outbox.hub

    settings.RESONATE = {**settings.RESONATE, "SSE_MAX_AGE_MS": 100, "SSE_KEEPALIVE_MS": 1000, "HUB_URL": ""}
    monkeypatch.setattr(outbox.hub, "_hub", None)
    return hub()


def test_a_message_routed_just_before_the_stream_reaches_its_maximum_age_still_reaches_the_client(memory_hub):
    close = memory_hub.close

    async def routed_then_closed(stream):
        # A deliverer in another thread routes a message to the stream the instant before it closes.
        await asyncio.to_thread(memory_hub.publish_all, [(ADDRESS, {"kind": "unblock"}, None)])
        await close(stream)

    memory_hub.close = routed_then_closed

    async def scenario():
        lines = events("drain", "w1")
        received = [await anext(lines)]  # the stream is registered and open
        received += [item async for item in lines]
        routed_after = memory_hub.publish_all([(ADDRESS, {"kind": "unblock"}, None)])
        return received, routed_after

    received, routed_after = asyncio.run(scenario())
    assert received[-1] == 'data: {"kind":"unblock"}\n\n'
    assert routed_after == [False]  # the ended stream is no longer a destination


@pytest.mark.django_db(transaction=True)
def test_what_a_stream_took_but_never_sent_goes_back_to_the_outbox_when_its_client_leaves(memory_hub):
    message = Message.build(MessageKind.UNBLOCK, "p", ADDRESS, {"promise": {"id": "p"}}, now=1)
    Message.objects.store([message])
    key = message.key
    # As a deliverer records it, after the message had waited for a stream since 0: its grace starts afresh.
    Message.objects.filter(key=key).update(state=DeliveryState.DELIVERED, delivered_at=2, unreached_since=0)

    async def scenario():
        lines = events("drain", "w1")
        await anext(lines)
        assert memory_hub.publish_all([(ADDRESS, {"kind": "unblock"}, [key, 1])]) == [True]
        await asyncio.sleep(0.01)  # on the stream's queue; the client goes away before reading it
        await lines.aclose()

    asyncio.run(scenario())

    deadline = time.monotonic() + 5
    while Message.objects.get(key=key).state != DeliveryState.PENDING and time.monotonic() < deadline:
        time.sleep(0.02)
    message = Message.objects.get(key=key)
    assert message.state == DeliveryState.PENDING and message.delivered_at is None
    assert message.unreached_since is None and message.next_attempt_at <= time.time() * 1000


@pytest.mark.django_db(transaction=True)
def test_a_message_for_a_stream_that_is_full_waits_in_the_outbox_and_is_not_announced(memory_hub, monkeypatch):
    from outbox import dispatch
    from outbox.hub import BUFFER

    announced = []
    monkeypatch.setattr(dispatch, "notify", announced.append)
    message = Message.build(MessageKind.UNBLOCK, "p", ADDRESS, {"promise": {"id": "p"}}, now=1)
    Message.objects.store([message])
    key = message.key
    routed_at = None

    async def scenario():
        lines = events("drain", "w1")
        await anext(lines)  # open; the client reads nothing more
        memory_hub.publish_all([(ADDRESS, {"kind": "unblock", "n": n}, None) for n in range(BUFFER)])
        nonlocal routed_at
        routed_at = time.time() * 1000
        assert memory_hub.publish_all([(ADDRESS, {"kind": "unblock"}, [key, 1])]) == [True]
        await asyncio.sleep(0.5)  # the stream finds itself full, and the requeue runs on the loop's executor
        await lines.aclose()

    asyncio.run(scenario())

    message = Message.objects.get(key=key)
    retry = resonate_settings.POLL_RETRY_MS
    assert message.state == DeliveryState.PENDING and message.next_attempt_at >= routed_at + retry - 50
    assert announced == []  # the periodic pass sends it again: announcing would spin while the stream is full
