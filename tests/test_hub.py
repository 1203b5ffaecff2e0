"""The Redis hub (outbox/hub.py) against a Redis of the test's own: stale entries, many streams, Redis going away."""

import asyncio
import time

import pytest

from outbox.hub import HubUnavailable, RedisHub


def event(n):
    return {"kind": "unblock", "data": {"n": n}}


async def next_line(stream, timeout=5):
    line, _ = await asyncio.wait_for(stream.queue.get(), timeout)
    return line


async def publish(hub, address, message, identity=None):
    return await asyncio.to_thread(hub.publish_all, [(address, message, identity)])


def test_a_stream_left_advertised_by_a_failed_withdrawal_does_not_swallow_messages(own_redis):
    """Unicast goes to the oldest stream of an id: if that one is a leftover, the message must reach the live one."""
    hub = RedisHub(own_redis.url)

    async def scenario():
        stale = await hub.register("g", "w1")
        await hub._unsubscribe(stale)  # gone from its process, but its advertisement is still in Redis
        hub.streams.pop(stale.key)
        live = await hub.register("g", "w1")

        taken = await publish(hub, "poll://uni@g/w1", event(1))

        return taken, await next_line(live), await hub.client.zcard(hub.group_key("g"))

    taken, line, advertised = asyncio.run(scenario())
    assert taken == [True] and '"n":1' in line
    assert advertised == 1  # the leftover was struck


def test_many_streams_closing_at_once_leave_no_destination_behind(own_redis):
    hub = RedisHub(own_redis.url)

    async def scenario():
        streams = [await hub.register("g", f"w{n}") for n in range(300)]
        await asyncio.gather(*(hub.close(stream) for stream in streams))
        taken = await asyncio.to_thread(hub.publish_all, [(f"poll://uni@g/w{n}", event(n), None) for n in range(300)])
        reconnected = await hub.register("g", "w7")
        again = await publish(hub, "poll://uni@g/w7", event(7))
        return taken, again, await next_line(reconnected), await hub.client.zcard(hub.group_key("g"))

    taken, again, line, advertised = asyncio.run(scenario())
    assert taken == [False] * 300  # nobody to take them: they wait in the outbox for the worker to reconnect
    assert again == [True] and '"n":7' in line
    assert advertised == 1


def test_a_stream_whose_client_leaves_while_it_is_set_up_is_not_left_behind(own_redis):
    """The client resets its connection while its stream is being advertised: the request is cancelled there. The
    stream must go with it; left registered, it was refreshed for ever and, as the oldest of its id, took every
    unicast message for that worker (tests/chaos: 150 timers' unblocks lost at one listener)."""
    hub = RedisHub(own_redis.url)

    async def scenario():
        await hub.register("g", "warm")  # the hub is up
        advertise, advertised = hub._advertise, asyncio.Event()

        async def interrupted(streams):
            await advertise(streams)  # in Redis already; the client leaves before the stream is handed back
            advertised.set()
            await asyncio.Event().wait()

        hub._advertise = interrupted
        setting_up = asyncio.create_task(hub.register("g", "w1"))
        await advertised.wait()
        setting_up.cancel()
        with pytest.raises(asyncio.CancelledError):
            await setting_up
        hub._advertise = advertise
        live = await hub.register("g", "w1")
        taken = await publish(hub, "poll://uni@g/w1", event(1))
        return len(hub.streams), taken, await next_line(live), await hub.client.zcard(hub.group_key("g"))

    streams, taken, line, advertised = asyncio.run(scenario())
    assert streams == 2  # warm and live
    assert taken == [True] and '"n":1' in line
    assert advertised == 2


def test_the_hub_rides_out_redis_going_away_and_its_streams_receive_again_when_it_returns(own_redis, monkeypatch):
    """Redis restarted with nothing on disk: subscriptions and advertisements are gone and must come back. Its
    streams, advertised again, count as joining again: a message that found none meanwhile waits for that
    (outbox.delivery.joins_heard)."""
    import outbox.hub

    joined = []
    monkeypatch.setattr(outbox.hub, "_joined", joined.append)
    hub = RedisHub(own_redis.url)
    deliverer = RedisHub(own_redis.url)  # in another process: what it routes to the stream goes through Redis

    async def loop_lag(seconds):
        """The longest the event loop was kept from running a 10 ms sleep (a spinning relay would starve it)."""
        worst, until = 0.0, time.monotonic() + seconds
        while time.monotonic() < until:
            started = time.monotonic()
            await asyncio.sleep(0.01)
            worst = max(worst, time.monotonic() - started - 0.01)
        return worst

    async def scenario():
        stream = await hub.register("g", "w1")
        assert set(joined) == {"g"}  # once, or twice when the relay's first connection advertised it too
        told = len(joined)
        own_redis.kill()
        lag_while_down = await loop_lag(2)
        with pytest.raises(HubUnavailable):
            await publish(deliverer, "poll://uni@g/w1", event(0))
        with pytest.raises(HubUnavailable):
            await hub.register("g", "w2")  # a new stream is refused (the view answers 503) rather than left deaf
        own_redis.start()
        back = time.monotonic()
        while await publish(deliverer, "poll://uni@g/w1", event(1)) != [True]:
            assert time.monotonic() - back < 10, "the stream never became reachable again"
            await asyncio.sleep(0.05)
        recovered_in = time.monotonic() - back
        while len(joined) == told:  # told right after the advertisement, which a deliverer may already have read
            assert time.monotonic() - back < 10, f"joins told: {joined}"
            await asyncio.sleep(0.01)
        return lag_while_down, recovered_in, await next_line(stream)

    lag_while_down, recovered_in, line = asyncio.run(scenario())
    assert lag_while_down < 1  # a spinning relay starves the loop for as long as Redis is away
    assert recovered_in < 5
    assert '"n":1' in line


@pytest.fixture
def requeued(monkeypatch):
    """What the hub sends back to the outbox."""
    import outbox.hub

    found = []
    monkeypatch.setattr(outbox.hub, "requeue", lambda identities, delay_ms=0: found.extend(identities))
    return found


def test_a_message_published_to_a_stream_that_just_closed_goes_back_to_the_outbox(own_redis, requeued):
    hub = RedisHub(own_redis.url)

    async def scenario():
        stream = await hub.register("g", "w1")
        hub.streams.pop(stream.key)  # closed in this process, its channel not yet unsubscribed
        taken = await publish(hub, "poll://uni@g/w1", event(1), identity=["u:1:p", 5])
        deadline = time.monotonic() + 5
        while not requeued and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return taken

    assert asyncio.run(scenario()) == [True]
    assert requeued == [("u:1:p", 5)]


def test_a_message_for_a_stream_of_this_process_is_handed_over_without_a_publish(own_redis, monkeypatch):
    import redis.client

    def no_publish(*args, **kwargs):
        raise AssertionError("published through Redis")

    hub = RedisHub(own_redis.url)

    async def scenario():
        stream = await hub.register("g", "w1")
        monkeypatch.setattr(redis.client.Pipeline, "publish", no_publish)
        taken = await publish(hub, "poll://any@g", event(1))
        return taken, await next_line(stream)

    taken, line = asyncio.run(scenario())
    assert taken == [True] and '"n":1' in line


def group_reads(own_redis):
    """How many times any hub has read a group's streams from this Redis."""
    import redis

    stats = redis.Redis.from_url(own_redis.url).info("commandstats")
    return stats.get("cmdstat_zrangebyscore", {}).get("calls", 0)


def test_messages_that_follow_each_other_to_a_group_read_its_streams_once(own_redis):
    """Each batch of messages used to read its groups' streams from Redis, a round trip per delivery; a deliverer
    now routes by what it read within KNOWN_S."""
    worker_side, deliverer_side = RedisHub(own_redis.url), RedisHub(own_redis.url)  # two processes

    async def scenario():
        stream = await worker_side.register("g", "w1")
        before = group_reads(own_redis)
        taken = [await publish(deliverer_side, "poll://any@g", event(n)) for n in range(5)]
        return taken, [await next_line(stream) for _ in range(5)], group_reads(own_redis) - before

    taken, lines, reads = asyncio.run(scenario())
    assert taken == [[True]] * 5 and all(f'"n":{n}' in line for n, line in enumerate(lines))
    assert reads == 1


def test_a_stream_that_joins_another_process_is_reached_at_once_by_a_deliverer_that_read_its_group_before(own_redis):
    """What a deliverer remembers of a group never makes a message unreached: a message none of the remembered
    streams can take has the group read again."""
    first, second, deliverer_side = (RedisHub(own_redis.url) for _ in range(3))

    async def scenario():
        nobody = await publish(deliverer_side, "poll://any@g", event(0))  # read: no stream at all
        w1 = await first.register("g", "w1")
        anycast = await publish(deliverer_side, "poll://any@g", event(1))
        w2 = await second.register("g", "w2")  # joins after the deliverer read the group with w1 only
        unicast = await publish(deliverer_side, "poll://uni@g/w2", event(2))
        return nobody, anycast, unicast, await next_line(w1), await next_line(w2)

    nobody, anycast, unicast, line1, line2 = asyncio.run(scenario())
    assert nobody == [False]
    assert anycast == [True] and '"n":1' in line1
    assert unicast == [True] and '"n":2' in line2


def test_a_remembered_stream_that_has_left_is_struck_and_its_ids_new_stream_gets_the_message(own_redis):
    worker_side, deliverer_side = RedisHub(own_redis.url), RedisHub(own_redis.url)

    async def scenario():
        old = await worker_side.register("g", "w1")
        await publish(deliverer_side, "poll://uni@g/w1", event(1))
        await next_line(old)
        await worker_side.close(old)  # the worker reconnects: a new stream for the same id
        new = await worker_side.register("g", "w1")
        taken = await publish(deliverer_side, "poll://uni@g/w1", event(2))
        return taken, await next_line(new), await worker_side.client.zcard(worker_side.group_key("g"))

    taken, line, advertised = asyncio.run(scenario())
    assert taken == [True] and '"n":2' in line
    assert advertised == 1


def test_a_message_handed_over_as_its_stream_closes_goes_back_to_the_outbox(own_redis, requeued):
    hub = RedisHub(own_redis.url)

    async def scenario():
        stream = await hub.register("g", "w1")
        hub.streams.pop(stream.key)  # closed after the deliverer chose it, before the handover ran on the loop
        hub._hand(stream.key, "data: {}\n\n", ("u:1:p", 5))
        return stream.queue.empty()

    assert asyncio.run(scenario())
    assert requeued == [("u:1:p", 5)]


def test_a_stream_that_closes_while_the_hub_reconnects_is_not_subscribed_or_advertised_again(own_redis):
    hub = RedisHub(own_redis.url)

    async def scenario():
        stream = await hub.register("g", "w1")
        advertise = hub._advertise

        async def closed_meanwhile(streams):  # the relay has taken its list of streams; the client leaves now
            await hub.close(stream)
            await advertise(streams)

        own_redis.kill()
        await asyncio.sleep(0.3)
        hub._advertise = closed_meanwhile
        own_redis.start()
        await asyncio.wait_for(hub.up.wait(), 10)
        hub._advertise = advertise
        taken = await publish(hub, "poll://uni@g/w1", event(1))
        return taken, await hub.client.zcard(hub.group_key("g"))

    taken, advertised = asyncio.run(scenario())
    assert taken == [False] and advertised == 0


def test_a_new_stream_gets_a_503_while_the_hub_is_unreachable(settings, monkeypatch):
    import outbox.hub
    from tests.faults import free_port

    settings.RESONATE = {**settings.RESONATE, "HUB_URL": f"redis://127.0.0.1:{free_port()}/0"}  # nobody there
    monkeypatch.setattr(outbox.hub, "_hub", None)
    monkeypatch.setattr(RedisHub, "WAIT_S", 0.3)
    from django.test import AsyncClient

    response = asyncio.run(AsyncClient().get("/poll/g/w1"))

    assert response.status_code == 503 and response["Content-Type"] == "text/plain"


async def hearing_joins(hub):
    """Start a hub's relay, as a server process does at startup, and wait until Redis has confirmed its JOINS."""
    hub.start()
    until = time.monotonic() + 5
    while hub._joins_since is None:
        assert time.monotonic() < until, "the relay never subscribed to JOINS"
        await asyncio.sleep(0.01)


async def until_true(check, seconds):
    """Wait for check() to hold; how long it took, or None after `seconds`."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > seconds:
            return None
        await asyncio.sleep(0.005)
    return time.monotonic() - started


def test_a_hub_that_hears_joins_knows_nobody_listens_to_a_group_it_read_empty_without_asking_redis_again(own_redis):
    """A message for a group nobody listens to cost two reads of the group per batch, and then a statement to record
    it unreached; a process that hears every stream join knows it from its last read."""
    deliverer_side = RedisHub(own_redis.url)

    async def scenario():
        await hearing_joins(deliverer_side)
        before_read = deliverer_side.nobody_listens("poll://any@g")  # never read: not known
        reads = group_reads(own_redis)
        taken = await publish(deliverer_side, "poll://any@g", event(0))
        read_once = group_reads(own_redis) - reads
        known = deliverer_side.nobody_listens("poll://any@g"), deliverer_side.nobody_listens("poll://uni@g/w1")
        again = await publish(deliverer_side, "poll://any@g", event(1))
        return before_read, taken, read_once, known, again, group_reads(own_redis) - reads

    before_read, taken, read_once, known, again, reads = asyncio.run(scenario())
    assert before_read is False
    assert taken == [False] and read_once == 1  # read once, not read again before calling it unreached
    assert known == (True, True)
    assert again == [False] and reads == 1  # the second message asked Redis nothing


def test_a_stream_joining_in_another_process_is_heard_at_once_by_a_hub_that_knew_its_group_empty(
    own_redis, monkeypatch
):
    """What a process remembers of a group lasts KNOWN_S; made to last a minute here, only the join can end the
    knowledge that nobody listens."""
    monkeypatch.setattr(RedisHub, "KNOWN_S", 60)
    worker_side, deliverer_side = RedisHub(own_redis.url), RedisHub(own_redis.url)

    async def scenario():
        await hearing_joins(deliverer_side)
        await publish(deliverer_side, "poll://any@g", event(0))
        assert deliverer_side.nobody_listens("poll://any@g")
        other_group = await worker_side.register("h", "w1")
        heard_other = await until_true(lambda: not deliverer_side.nobody_listens("poll://any@g"), 0.3)
        stream = await worker_side.register("g", "w1")
        heard = await until_true(lambda: not deliverer_side.nobody_listens("poll://any@g"), 5)
        taken = await publish(deliverer_side, "poll://any@g", event(1))
        return other_group, heard_other, heard, taken, await next_line(stream)

    _, heard_other, heard, taken, line = asyncio.run(scenario())
    assert heard_other is None  # a stream of another group changes nothing
    assert heard is not None and heard < 1
    assert taken == [True] and '"n":1' in line


def test_a_hub_without_a_relay_or_whose_relay_lost_redis_never_claims_nobody_listens(own_redis):
    """A Celery worker's deliverer hears no joins; nor does a server process while its subscriber is reconnecting
    (a join announced meanwhile is lost to it), until it has read the group again since."""
    silent, listening = RedisHub(own_redis.url), RedisHub(own_redis.url)

    async def scenario():
        await publish(silent, "poll://any@g", event(0))
        without_relay = silent.nobody_listens("poll://any@g")
        await hearing_joins(listening)
        await publish(listening, "poll://any@g", event(1))
        before = listening.nobody_listens("poll://any@g")
        own_redis.kill()
        lost = await until_true(lambda: listening._joins_since is None, 10)
        while_down = listening.nobody_listens("poll://any@g")
        own_redis.start()
        back = await until_true(lambda: listening._joins_since is not None, 10)
        after_reconnect = listening.nobody_listens("poll://any@g")  # read before the reconnection: not trusted
        await publish(listening, "poll://any@g", event(2))
        return without_relay, before, lost, while_down, back, after_reconnect, listening.nobody_listens("poll://any@g")

    without_relay, before, lost, while_down, back, after_reconnect, read_again = asyncio.run(scenario())
    assert without_relay is False
    assert before is True
    assert lost is not None and while_down is False
    assert back is not None and after_reconnect is False
    assert read_again is True


def test_the_memory_hub_knows_exactly_who_listens(settings, monkeypatch):
    from outbox.hub import MemoryHub

    memory = MemoryHub()

    async def scenario():
        empty = memory.nobody_listens("poll://any@g"), memory.nobody_listens("poll://uni@g/w1")
        stream = await memory.register("g", "w1")
        joined = (
            memory.nobody_listens("poll://any@g"),
            memory.nobody_listens("poll://uni@g/w1"),
            memory.nobody_listens("poll://uni@g/w2"),
        )
        await memory.close(stream)
        return empty, joined, memory.nobody_listens("poll://any@g")

    empty, joined, left = asyncio.run(scenario())
    assert empty == (True, True)
    assert joined == (False, False, True)  # unicast to an id with no stream: nobody, though the group has one
    assert left is True
