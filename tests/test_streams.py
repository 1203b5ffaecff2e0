"""How a poll stream ends (resonate_site/streams.py): closed in the hub first, then what was routed to it is sent,
and what it took but never sent goes back to the outbox."""

import asyncio
import contextlib
import os
import threading
import time

import pytest

from floor.clock import now_ms
from floor.conf import resonate_settings
from outbox.delivery import deliver
from outbox.hub import hub
from outbox.models import DeliveryState, Message, MessageKind
from resonate_site.streams import RECEIPT_S, events

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
    # As a deliverer leaves it once a stream took it, after it had waited for a stream since 0: claimed for a lease.
    Message.objects.filter(key=key).update(attempts=1, next_attempt_at=now_ms() + 60_000, unreached_since=0)

    async def scenario():
        lines = events("drain", "w1")
        await anext(lines)
        assert memory_hub.publish_all([(ADDRESS, {"kind": "unblock"}, [key, 1])]) == [True]
        await asyncio.sleep(0.01)  # on the stream's queue; the client goes away before reading it
        await lines.aclose()

    asyncio.run(scenario())

    assert back_in_the_outbox(key)
    message = Message.objects.get(key=key)
    assert message.state == DeliveryState.PENDING and message.delivered_at is None and message.unreached_since is None


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


@pytest.mark.django_db(transaction=True)
def test_a_message_taken_when_the_connection_is_closing_is_not_written_but_goes_back_to_the_outbox(memory_hub):
    # uvicorn drops a write to a connection it knows is closed without an error: the stream must not count it sent.
    key = delivered_message()
    gone = False

    async def scenario():
        lines = events("drain", "w1", closing=lambda: gone)
        await anext(lines)
        nonlocal gone
        gone = True  # the client's FIN arrived while the stream waited
        assert memory_hub.publish_all([(ADDRESS, {"kind": "unblock"}, [key, 1])]) == [True]
        return [line async for line in lines]

    written = asyncio.run(scenario())

    assert written == []
    assert back_in_the_outbox(key)


def test_the_server_tells_a_stream_when_its_client_has_closed_the_connection():
    import socket
    import threading

    from resonate_site.serving import CLOSING
    from tests.conftest import guarded_uvicorn

    seen = {}
    answered = threading.Event()

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        closing = scope["extensions"][CLOSING]
        seen["open"] = closing()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b":\n\n", "more_body": True})
        answered.set()
        for _ in range(500):
            if closing():
                break
            await asyncio.sleep(0.01)
        seen["closed"] = closing()

    with guarded_uvicorn(app) as port, socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(b"GET /poll/g/w HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert answered.wait(5)
        client.shutdown(socket.SHUT_RDWR)  # the client leaves (FIN); the server has written nothing since
        deadline = time.monotonic() + 6
        while "closed" not in seen:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert seen == {"open": False, "closed": True}


def test_a_stream_cancelled_while_it_closes_still_finishes_closing_before_it_sends_back_what_it_held(
    own_redis, monkeypatch
):
    # The stream saw its connection closing and ended; the server cancels the request while the stream closes in
    # the hub. Cut short, the close left the stream advertised (and, before, registered: it took messages for ever).
    import outbox.hub
    import resonate_site.streams

    redis_hub = outbox.hub.RedisHub(own_redis.url)
    monkeypatch.setattr(outbox.hub, "_hub", redis_hub)
    sent_back = []
    monkeypatch.setattr(resonate_site.streams, "requeue", lambda identities: sent_back.append(list(identities)))
    gone = False

    async def scenario():
        nonlocal gone
        lines = events("g", "w1", closing=lambda: gone)
        await anext(lines)
        stream = next(iter(redis_hub.streams.values()))
        withdraw, withdrawing = redis_hub._withdraw, asyncio.Event()

        async def slow_withdraw(streams):
            withdrawing.set()
            await asyncio.sleep(0.2)
            await withdraw(streams)

        redis_hub._withdraw = slow_withdraw
        gone = True
        await asyncio.to_thread(redis_hub.publish_all, [("poll://uni@g/w1", {"kind": "unblock"}, ["u:1:p", 1])])
        request = asyncio.ensure_future(anext(lines))  # as the server runs it: the request's task
        await withdrawing.wait()
        request.cancel()  # the server noticed the client gone
        with pytest.raises(asyncio.CancelledError):
            await request
        return stream.key in redis_hub.streams, await redis_hub.client.zcard(redis_hub.group_key("g"))

    registered, advertised = asyncio.run(scenario())
    assert not registered and advertised == 0
    assert sent_back == [[["u:1:p", 1]]]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("when", ["while it was written", "within RECEIPT_S after it was written"])
def test_a_message_whose_connection_closed_as_it_went_out_goes_back_to_the_outbox(memory_hub, settings, when):
    # While it was written: the write waited for a slow client to read (uvicorn's drain), and the connection closed
    # meanwhile. Within RECEIPT_S after: the write went out, and the client then broke the connection (RST or FIN).
    # Either way what was in flight to the client is lost with the connection: the message is sent again.
    settings.RESONATE = {**settings.RESONATE, "SSE_MAX_AGE_MS": 10_000}
    key = delivered_message()
    gone = False

    async def scenario():
        nonlocal gone
        lines = events("drain", "w1", closing=lambda: gone)
        await anext(lines)
        assert memory_hub.publish_all([(ADDRESS, {"kind": "unblock"}, [key, 1])]) == [True]
        written = await anext(lines)
        waiting = asyncio.ensure_future(anext(lines))  # the stream goes on: to its next message, or its end
        if when != "while it was written":
            await asyncio.sleep(RECEIPT_S / 5)
        gone = True
        with pytest.raises(StopAsyncIteration):  # the stream ends, writing nothing more
            await asyncio.wait_for(waiting, RECEIPT_S * 2)
        return written

    assert asyncio.run(scenario()) == 'data: {"kind":"unblock"}\n\n'
    assert back_in_the_outbox(key)


@pytest.mark.django_db(transaction=True)
def test_a_message_counts_as_delivered_once_its_connection_has_stayed_open_receipt_s_after_the_write(
    memory_hub, settings
):
    settings.RESONATE = {**settings.RESONATE, "SSE_MAX_AGE_MS": 10_000}
    key = delivered_message()

    async def scenario():
        lines = events("drain", "w1")
        await anext(lines)
        assert memory_hub.publish_all([(ADDRESS, {"kind": "unblock"}, [key, 1])]) == [True]
        written_at = time.monotonic()
        await anext(lines)
        waiting = asyncio.ensure_future(anext(lines))
        await asyncio.sleep(RECEIPT_S / 2)
        early = await asyncio.to_thread(Message.objects.get, key=key)
        recorded = await asyncio.to_thread(recorded_delivered, key)
        waited = time.monotonic() - written_at
        waiting.cancel()  # the client leaves; the stream, still open until now, ends
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await lines.aclose()
        return early.state, recorded, waited

    early, recorded, waited = asyncio.run(scenario())
    assert early == DeliveryState.PENDING  # written, not yet confirmed: still claimed
    assert recorded and waited >= RECEIPT_S
    assert Message.objects.get(key=key).state == DeliveryState.DELIVERED  # not taken back as the stream ended


def delivered_message():
    """An unblock for ADDRESS, stored and claimed as a deliverer leaves it once a stream took it: its key."""
    message = Message.build(MessageKind.UNBLOCK, "p", ADDRESS, {"promise": {"id": "p"}}, now=1)
    Message.objects.store([message])
    Message.objects.filter(key=message.key).update(attempts=1, next_attempt_at=now_ms() + 60_000)
    return message.key


def back_in_the_outbox(key, timeout=5):
    """Whether the message is pending and due again within `timeout` (the stream sends it back on the loop's
    executor), its attempt counted so that nothing recording the attempt that routed it can change it."""
    deadline = time.monotonic() + timeout
    while not due_again(key) and time.monotonic() < deadline:
        time.sleep(0.02)
    return due_again(key)


def due_again(key):
    message = Message.objects.get(key=key)
    return message.state == DeliveryState.PENDING and message.next_attempt_at <= now_ms() and message.attempts == 2


def recorded_delivered(key, timeout=5):
    """Whether the message is recorded delivered within `timeout` (on the loop's executor: no deliverer runs)."""
    deadline = time.monotonic() + timeout
    while Message.objects.get(key=key).state != DeliveryState.DELIVERED and time.monotonic() < deadline:
        time.sleep(0.02)
    return Message.objects.get(key=key).state == DeliveryState.DELIVERED


@pytest.mark.django_db(transaction=True)
def test_a_message_a_stream_took_counts_as_delivered_only_once_the_stream_has_written_it(memory_hub):
    message = Message.build(MessageKind.UNBLOCK, "p", ADDRESS, {"promise": {"id": "p"}}, now=1)
    Message.objects.store([message])

    async def scenario():
        lines = events("drain", "w1")
        await anext(lines)
        assert await asyncio.to_thread(deliver) == [message.key]  # on the stream's queue, not yet written
        taken = await asyncio.to_thread(Message.objects.get, key=message.key)
        return taken, [line async for line in lines]  # to the stream's end (its maximum age)

    taken, written = asyncio.run(scenario())

    assert (taken.state, taken.attempts, taken.delivered_at) == (DeliveryState.PENDING, 1, None)
    assert taken.next_attempt_at > now_ms()  # claimed meanwhile: nobody else sends it
    assert written[0].startswith('data: {"kind":"unblock"')
    assert recorded_delivered(message.key)


@pytest.mark.django_db(transaction=True)
def test_a_message_taken_by_a_process_that_dies_before_writing_it_goes_out_again_once_its_claim_lapses(
    memory_hub, monkeypatch
):
    # A server process killed (or frozen, then killed) with its Redis subscription open: the publish was heard, and
    # the process ran no finally that could send the message back. Here the stream is dropped from the hub unclosed.
    import outbox.delivery

    monkeypatch.setattr(outbox.delivery, "POLL_LEASE_MS", 300)
    message = Message.build(MessageKind.UNBLOCK, "p", ADDRESS, {"promise": {"id": "p"}}, now=1)
    Message.objects.store([message])

    async def scenario():
        dying = events("drain", "w1")
        await anext(dying)
        assert await asyncio.to_thread(deliver) == [message.key]
        for stream in memory_hub.streams.pop("drain").values():  # its process is gone: no write, close or requeue
            stream.leftovers()
        assert await asyncio.to_thread(deliver) == []  # claimed: not sent twice while its claim lasts
        lines = events("drain", "w1")  # the worker reconnects, to another process
        await anext(lines)
        await asyncio.sleep(0.35)
        assert await asyncio.to_thread(deliver) == [message.key]
        return [line async for line in lines]

    assert asyncio.run(scenario())[0].startswith('data: {"kind":"unblock"')
    assert recorded_delivered(message.key)
    assert Message.objects.get(key=message.key).attempts == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("delivery", ["running", "paused", "not looked at for 200 ms"])
def test_a_message_for_a_stream_of_the_committing_process_goes_to_it_from_the_committing_thread(
    memory_hub, settings, monkeypatch, delivery
):
    """Its deliverer thread is not woken for it (a wake-up and a contention for the interpreter on every workflow
    step), unless delivery is paused, or the deliverer has not looked whether it is within 100 ms."""
    from outbox import dispatch
    from outbox.delivery import claim_on_write

    settings.RESONATE = {**settings.RESONATE, "SSE_MAX_AGE_MS": 5000}
    running = dispatch.Deliverer()  # this process's, its thread not started: what reaches it stays on its queue
    monkeypatch.setattr(dispatch, "_deliverer", (os.getpid(), running))
    looked = time.monotonic() - (0.2 if delivery.startswith("not looked") else 0)
    running.pause_read = (looked, delivery == "paused")
    message = Message.build(MessageKind.UNBLOCK, "p", ADDRESS, {"promise": {"id": "p"}}, now=now_ms())
    claim_on_write(message)  # as a process that sends what it writes writes it

    async def scenario():
        lines = events("drain", "w1")
        await anext(lines)
        await asyncio.to_thread(Message.objects.store, [message])
        await asyncio.to_thread(dispatch.notify, [message])  # as the commit announces it, on the committing thread
        if delivery != "running":
            await lines.aclose()
            return None
        written = await anext(lines)
        await anext(lines)  # the next line asked for: the message went out
        await lines.aclose()
        return written

    written = asyncio.run(scenario())
    queued = []
    while not running.keys.empty():
        queued.extend(running.keys.get_nowait())
    assert queued[0] == dispatch.Joined("drain")  # the stream's connecting, told to this process's deliverer
    if delivery == "running":
        assert written.startswith('data: {"kind":"unblock"')
        assert queued[1:] == [dispatch.Written(message.key, message.created_at)]  # only its receipt, to record
    else:
        assert queued[1] is message  # for the deliverer thread, which looks at the pause first


def test_receipts_that_arrive_within_the_linger_are_recorded_in_one_statement(monkeypatch):
    from outbox import dispatch

    recorded, done = [], threading.Event()

    def record(written):
        recorded.append(list(written))
        done.set()

    running = dispatch.Deliverer(embedded=False)
    monkeypatch.setattr(running, "record_written", record)
    monkeypatch.setattr(running, "pause_read", (float("inf"), False))  # never looks at the database
    threading.Thread(target=running.run, daemon=True).start()
    try:
        running.wake([dispatch.Written("a", 1)])
        time.sleep(0.005)  # well within the linger (20 ms)
        running.wake([dispatch.Written("b", 2)])
        assert done.wait(5)
        time.sleep(0.05)
    finally:
        running.stopped.set()
        running.wake([])
    assert recorded == [[dispatch.Written("a", 1), dispatch.Written("b", 2)]]


def deliverer_reading_the_pause(monkeypatch, answers):
    """A production deliverer, running, whose reads of the pause are counted: each answers the next of `answers`
    (False: running; an exception: raised), the last one over and over. Only its own thread's reads: a CI run counted
    two more from another deliverer of the test process."""
    from outbox import dispatch

    reads = []

    def is_paused():
        if threading.current_thread() is not thread:  # another deliverer of this process (an earlier test's, ending)
            return False
        reads.append(time.monotonic())
        answer = answers[min(len(reads), len(answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(dispatch.Pause, "is_paused", is_paused)
    running = dispatch.Deliverer(embedded=False)
    # Wider than the defaults (100, 50 ms and 1 s), for a machine busy with other tests: the same proportions.
    monkeypatch.setattr(running, "PAUSE_TRUSTED_S", 0.3)
    monkeypatch.setattr(running, "PAUSE_REREAD_S", 0.1)
    monkeypatch.setattr(running, "ASKED_S", 0.4)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    return running, reads


def test_the_deliverer_reads_the_pause_again_before_the_requests_asking_about_it_stop_trusting_its_read(monkeypatch):
    """While requests ask whether delivery runs (to claim, and record as unreached, what they write), the deliverer
    reads the pause again every PAUSE_REREAD_S, so their answer never lapses under steady load (each lapse sent a
    batch to the deliverer to record); once nobody asks for ASKED_S it stops reading."""
    running, reads = deliverer_reading_the_pause(monkeypatch, [False])
    try:
        first = running.unpaused_lately()  # never read: not trusted; the message would go to the deliverer
        running.wake([])  # as that message would
        deadline = time.monotonic() + 5
        while not running.unpaused_lately() and time.monotonic() < deadline:
            time.sleep(0.001)
        answers, until = [], time.monotonic() + 0.6
        while time.monotonic() < until:  # a request every 5 ms
            answers.append(running.unpaused_lately())
            time.sleep(0.005)
        read_while_asked = len(reads)
        time.sleep(running.ASKED_S + 0.3)
        read_after = len(reads)
        time.sleep(0.3)
    finally:
        running.stopped.set()
        running.wake([])

    assert first is False
    assert all(answers), answers.count(False)
    gaps = [later - earlier for earlier, later in zip(reads, reads[1:read_while_asked], strict=False)]
    assert 4 <= read_while_asked <= 15 and max(gaps) < running.PAUSE_TRUSTED_S, gaps
    assert len(reads) == read_after <= read_while_asked + running.ASKED_S / running.PAUSE_REREAD_S + 1


def test_the_deliverer_does_not_read_the_pause_again_by_itself_after_a_read_that_failed(monkeypatch):
    """The database away: the next batch tries again, rather than this thread every PAUSE_REREAD_S (a warning each)."""
    from django.db import OperationalError

    gone = OperationalError("gone")
    running, reads = deliverer_reading_the_pause(monkeypatch, [False, gone])  # read, then the database gone
    try:
        running.unpaused_lately()
        running.wake([])
        deadline = time.monotonic() + 5
        while len(reads) < 3 and time.monotonic() < deadline:  # the read, then one that failed twice
            running.unpaused_lately()
            time.sleep(0.005)
        for _ in range(80):  # still asked, for 400 ms
            running.unpaused_lately()
            time.sleep(0.005)
    finally:
        running.stopped.set()
        running.wake([])

    assert len(reads) == 3  # the read that failed was tried twice (on a new connection), and not again by itself


@pytest.mark.django_db(transaction=True)
def test_the_process_deliverer_records_what_its_streams_have_written(memory_hub, settings, monkeypatch):
    from outbox import dispatch

    settings.RESONATE = {**settings.RESONATE, "SSE_MAX_AGE_MS": 5000}
    monkeypatch.setattr(dispatch, "_deliverer", (None, None))
    running = dispatch.Deliverer()
    running.start()  # this process's deliverer from here, as serve's in embedded mode
    try:
        message = Message.build(MessageKind.UNBLOCK, "p", ADDRESS, {"promise": {"id": "p"}}, now=1)

        async def scenario():
            lines = events("drain", "w1")
            await anext(lines)
            await asyncio.to_thread(Message.objects.store, [message])
            dispatch.notify([message.key])  # as a commit announces it
            written = await anext(lines)
            await anext(lines)  # the next line asked for (a keepalive): the message went out
            await lines.aclose()
            return written

        assert asyncio.run(scenario()).startswith('data: {"kind":"unblock"')
        assert recorded_delivered(message.key)
    finally:
        running.stop()


@pytest.mark.django_db(transaction=True)
def test_a_stream_that_connects_while_delivery_is_paused_gets_its_waiting_message_when_delivery_resumes(
    memory_hub, settings, monkeypatch
):
    """A message that found no stream waits for one of its group to connect (outbox.delivery.joins_heard: the
    embedded mode on SQLite is not tried again meanwhile). A stream that connects while debug.start has paused
    delivery is remembered, not forgotten with the pause: its message goes when delivery resumes."""
    from outbox import dispatch
    from outbox.models import Pause

    settings.RESONATE = {**settings.RESONATE, "SSE_MAX_AGE_MS": 5000, "DELIVERY_PASS_MS": 100}
    monkeypatch.setattr(dispatch, "_deliverer", (None, None))
    message = Message.build(MessageKind.UNBLOCK, "p", ADDRESS, {"promise": {"id": "p"}}, now=now_ms())
    message.attempts, message.unreached_since, message.next_attempt_at = 1, now_ms(), now_ms() + 60_000
    Message.objects.store([message])  # found no stream, and waits for one: not due for a minute
    Pause.set(True)
    running = dispatch.Deliverer()
    running.start()
    try:
        time.sleep(0.3)  # the deliverer has seen the pause

        async def scenario():
            lines = events("drain", "w1")
            await anext(lines)  # connected: heard while paused
            await asyncio.sleep(0.3)
            await asyncio.to_thread(Pause.set, False)
            written = await asyncio.wait_for(anext(lines), 3)
            await lines.aclose()
            return written

        assert asyncio.run(scenario()).startswith('data: {"kind":"unblock"')
    finally:
        running.stop()


@pytest.mark.django_db(transaction=True)
def test_a_join_is_looked_at_again_for_an_attempt_recorded_after_it(memory_hub):
    """On PostgreSQL an attempt that found no stream just before one connected may be recorded only after the
    deliverer's due_on_join for that stream: the deliverer makes the group's waiting messages due once more
    JOIN_RECHECK_S later (and once only)."""
    from outbox import dispatch

    running = dispatch.Deliverer()  # its thread not started: driven by hand
    running.rechecks_joins = True  # as start() sets it on PostgreSQL

    def waiting(id):
        message = Message.build(MessageKind.UNBLOCK, id, ADDRESS, {"promise": {"id": id}}, now=now_ms())
        message.attempts, message.unreached_since, message.next_attempt_at = 1, now_ms(), now_ms() + 60_000
        Message.objects.store([message])  # found no stream: due at the end of its grace
        return message.key

    def due(key):
        return Message.objects.get(key=key).next_attempt_at <= now_ms()

    first = waiting("p")
    assert running.make_due_on_join({"drain"}) == 1 and due(first)
    late = waiting("q")  # its attempt recorded after the join was looked at
    assert running.make_due_on_join(set()) == 0 and not due(late)  # its second look has not come yet
    running.rechecks["drain"] = time.monotonic()  # it has
    assert running.make_due_on_join(set()) == 1 and due(late)
    assert running.rechecks == {}  # once: a second look is not looked at again


@pytest.mark.django_db(transaction=True)
def test_recording_what_streams_wrote_says_how_many_it_recorded():
    from floor.transactions import Mode, run_atomically
    from outbox.delivery import record_written

    messages = [Message.build(MessageKind.UNBLOCK, id, ADDRESS, {"promise": {"id": id}}, now=1) for id in "pq"]
    Message.objects.store(messages)
    identities = [(m.key, m.created_at) for m in messages] + [("absent", 1)]
    assert run_atomically(record_written, identities, now_ms(), mode=Mode.AUTOCOMMIT) == 2  # /metrics counts these
    assert run_atomically(record_written, identities, now_ms(), mode=Mode.AUTOCOMMIT) == 0  # recorded already


@pytest.mark.django_db(transaction=True)
def test_a_message_that_had_waited_for_a_stream_gets_its_grace_afresh_when_a_stream_takes_it(memory_hub):
    # Were the stream's process to die before writing it, the attempt after the claim lapses must not find the
    # grace spent by the earlier wait, and drop the unblock at once.
    message = Message.build(MessageKind.UNBLOCK, "p", ADDRESS, {"promise": {"id": "p"}}, now=1)
    Message.objects.store([message])
    Message.objects.filter(key=message.key).update(unreached_since=now_ms() - 8_000)

    async def scenario():
        lines = events("drain", "w1")
        await anext(lines)
        assert await asyncio.to_thread(deliver) == [message.key]
        taken = await asyncio.to_thread(Message.objects.get, key=message.key)
        await lines.aclose()
        return taken

    taken = asyncio.run(scenario())
    assert (taken.state, taken.unreached_since) == (DeliveryState.PENDING, None)
    assert taken.next_attempt_at > now_ms()  # still claimed


def test_a_message_taken_again_while_its_stream_still_holds_it_is_written_once(memory_hub, monkeypatch):
    """A slow client holds its stream up past the claim of a message on the stream's queue: the message is taken
    again (its claim lapsed) and routed to the same stream, which already holds it. Once written, it is recorded
    delivered once."""
    import outbox.hub

    recorded = []
    monkeypatch.setattr(outbox.hub, "_records_delivered", recorded.extend)
    identity = ["unblock:p:poll://uni@drain/w1", 1]

    async def scenario():
        lines = events("drain", "w1")
        await anext(lines)
        assert memory_hub.publish_all([(ADDRESS, {"kind": "unblock"}, identity)]) == [True]
        await asyncio.sleep(0.01)  # on the stream's queue, which the slow client has not read from yet
        assert memory_hub.publish_all([(ADDRESS, {"kind": "unblock"}, identity)]) == [True]  # taken again
        await asyncio.sleep(0.01)
        return [line async for line in lines]  # the client reads on, until the stream reaches its maximum age

    written = asyncio.run(scenario())

    assert written.count('data: {"kind":"unblock"}\n\n') == 1, written
    assert recorded == [tuple(identity)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("delivery", ["running", "paused", "not looked at for 200 ms"])
def test_a_message_no_stream_can_take_has_its_attempt_recorded_as_it_is_written(
    memory_hub, settings, monkeypatch, delivery
):
    """A create with a target whose workers are all away woke the deliverer, which asked the hub and then recorded
    the attempt unreached in a statement of its own. Now the attempt is in the row as written, counted as before,
    and the message reaches a stream that connects later as any unreached one does: by the delivery pass."""
    from floor.counters import DELIVERIES, MESSAGES, flush
    from outbox import dispatch
    from outbox.delivery import NO_STREAM
    from resonate_site.protocol.envelope import perform

    settings.RESONATE = {**settings.RESONATE, "SSE_MAX_AGE_MS": 5000, "POLL_RETRY_MS": 0}
    running = dispatch.Deliverer()  # this process's, its thread not started: what reaches it stays on its queue
    monkeypatch.setattr(dispatch, "_deliverer", (os.getpid(), running))
    looked = time.monotonic() - (0.2 if delivery.startswith("not looked") else 0)
    running.pause_read = (looked, delivery == "paused")
    flush()  # counts are folded into the series at a flush (floor.counters)
    claimed, errors = MESSAGES.labels("execute")._value.get(), DELIVERIES.labels("error")._value.get()

    target = {"resonate:target": "poll://any@away"}
    perform("promise.create", {"id": "p", "timeoutAt": now_ms() + 3_600_000, "tags": target})

    execute = Message.objects.get(kind=MessageKind.EXECUTE, subject="p")
    queued = []
    while not running.keys.empty():
        queued.extend(running.keys.get_nowait())
    if delivery != "running":  # for the deliverer thread, which looks at the pause first
        assert execute.unreached_since is None and [message.key for message in queued] == [execute.key]
        return
    assert queued == []
    assert (execute.state, execute.attempts, execute.last_error) == (DeliveryState.PENDING, 1, NO_STREAM)
    assert execute.unreached_since is not None and execute.next_attempt_at == execute.unreached_since
    flush()
    assert MESSAGES.labels("execute")._value.get() == claimed + 1
    assert DELIVERIES.labels("error")._value.get() == errors + 1  # as an attempt that found no stream counts

    async def scenario():
        lines = events("away", "w1")
        await anext(lines)
        await asyncio.to_thread(deliver)  # the delivery pass
        written = await anext(lines)
        await lines.aclose()
        return written

    assert asyncio.run(scenario()).startswith('data: {"kind":"execute"')
