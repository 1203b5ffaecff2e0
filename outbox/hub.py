"""Where poll:// messages meet live SSE streams: unicast to an id, anycast to one stream of a group.

Streams register with the hub of their server process; a deliverer, in any process, publishes. The
in-memory hub serves one process (the embedded mode). The Redis hub spans processes: each stream
listens on a channel of its own, on its process's one subscriber connection, and is advertised in a
sorted set per group (score = expiry, refreshed while it lives). PUBLISH answers how many listeners
heard, so a stream that is gone (its process dead, its advertisement stale) is noticed at once. Every
advertisement is announced on one channel, JOINS, which every server process hears: a process that read a
group a moment ago and has heard of no stream joining it since knows, without asking Redis, whether any
stream can take a message (nobody_listens). The process a stream connects to also tells its deliverer
(`joins_go_to`), which makes the messages of its group that found no stream due at once.

A message counts as delivered only once its stream has written it to its client and the connection has
stayed open RECEIPT_S after (resonate_site/streams.py, then `delivered`): until then it stays claimed in
the outbox, so one taken by a process that dies before writing it (killed, or frozen with its Redis
subscription open) is sent again when the claim lapses. One taken but never written (the client went
away, the stream was full, or it reached a process whose stream had just closed), or written just
before its connection broke, goes back to the outbox at once (`requeue`). SSE has no acknowledgements:
what a client vanished without a word held unread is lost with it (README.md, known limits).
"""

import asyncio
import collections
import contextlib
import itertools
import json
import logging
import os
import random
import threading
import time
import uuid
from dataclasses import dataclass, field

from floor import redis_urls
from floor.protocol import parse_poll_address

log = logging.getLogger(__name__)

JOINS = "resonate:poll:joins"  # a group's name, published whenever a stream of it is advertised
BUFFER = 1000  # events a stream may fall behind (a backlog arrives in bursts); further ones go back to the outbox
_order = itertools.count()


class HubUnavailable(Exception):
    """The hub cannot take streams or messages right now (Redis out of reach)."""


@dataclass(frozen=True)
class Member:
    """A stream as the router sees it."""

    key: str
    id: str
    sequence: tuple  # registration order: unicast goes to the first registered stream of the id


def choose(cast, id, members):
    """The stream a message goes to (PROTOCOL.md §4.4), or None: uni needs the id; any prefers it."""
    with_id = sorted((m for m in members if m.id == id), key=lambda m: m.sequence) if id else []
    if with_id:
        return with_id[0]
    if cast == "uni" or not members:
        return None
    return random.choice(members)


def sse_event(message):
    """One SSE event: a single data line of compact, ASCII-only JSON, LF framing (decision D12)."""
    return f"data: {json.dumps(message, separators=(',', ':'), ensure_ascii=True)}\n\n"


def registration_order():
    """Orders registrations across processes: wall-clock time first, this process's count to break ties."""
    return (time.time_ns(), os.getpid(), next(_order))


@dataclass(eq=False)
class Stream:
    """One live GET /poll/{group}/{id}: (event, message identity) pairs are put on its queue by the hub."""

    group: str
    id: str
    loop: asyncio.AbstractEventLoop
    key: str = field(default_factory=lambda: uuid.uuid4().hex)
    sequence: tuple = field(default_factory=registration_order)
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(BUFFER))
    # The identities of the messages on the queue or being written, not yet written: a message whose claim lapsed
    # while a slow client held this stream up is taken again, and must not be queued twice.
    holding: set = field(default_factory=set)

    @property
    def channel(self):
        return f"resonate:poll:stream:{self.key}"

    def put(self, event, identity):
        """On the stream's event loop: queue an event, or send it back to the outbox for later if the stream is full.
        A message the stream already holds is not queued again: it is written once, and recorded delivered then."""
        held = None if identity is None else tuple(identity)
        if held is not None:
            if held in self.holding:
                return
            self.holding.add(held)
        try:
            self.queue.put_nowait((event, identity))
        except asyncio.QueueFull:
            self.holding.discard(held)
            log.warning("stream %s/%s is %d events behind; a message waits in the outbox", self.group, self.id, BUFFER)
            requeue([identity], delay_ms=_poll_retry_ms())

    def written(self, identity):
        """The stream has written this message to its client, and its connection stayed open RECEIPT_S after:
        recorded delivered (see `delivered`)."""
        if identity is not None:
            self.holding.discard(tuple(identity))
        delivered(identity)

    def end(self):
        """On the stream's event loop: end the stream now, as at its maximum age (its process is stopping)."""
        with contextlib.suppress(asyncio.QueueFull):  # a full stream is busy: it ends when the server's grace runs out
            self.queue.put_nowait(ENDING)

    def leftovers(self):
        """The identities of the events still queued (the stream is ending without sending them)."""
        found = []
        while not self.queue.empty():
            found.append(self.queue.get_nowait()[1])
        return found


def requeue(identities, delay_ms=0):
    """From an event loop: send messages that reached a stream but not its client back to the outbox, on the loop's
    executor (database I/O); the loop waits for it when it closes. Returns the executor's future, or None."""
    identities = [tuple(identity) for identity in identities if identity is not None]
    if identities:
        return asyncio.get_running_loop().run_in_executor(None, _takes_back, identities, delay_ms)
    return None


def _takes_back(identities, delay_ms):
    raise RuntimeError("nothing takes messages back to the outbox: outbox.dispatch registers it (takes_back)")


def delivered(identity):
    """On a stream's event loop: the stream has written this message to its client; record it delivered."""
    if identity is not None:
        _records_delivered([tuple(identity)])


def _records_delivered(identities):
    raise RuntimeError("nothing records deliveries: outbox.dispatch registers it (takes_back)")


def takes_back(requeue, record_delivered):
    """Register what puts messages back in the outbox, requeue(identities, delay_ms), and what records them
    delivered, record_delivered(identities) (called on an event loop, so it must not block): outbox.dispatch's.

    The hub sits below the outbox's dispatch (which publishes through it), so it is told rather than importing it.
    """
    global _takes_back, _records_delivered
    _takes_back, _records_delivered = requeue, record_delivered


def joins_go_to(joined):
    """Register what hears each stream that connects to this process, joined(group) (called on the stream's event
    loop, so it must not block): outbox.dispatch's, whose deliverer makes the group's waiting messages due."""
    global _joined
    _joined = joined


def _joined(group):
    """Nobody hears joins (a process with no deliverer): a waiting message goes at its next attempt."""


def _poll_retry_ms():
    from floor.conf import resonate_settings

    return resonate_settings.POLL_RETRY_MS


async def _flushed(loop):
    """Wait until every callback scheduled on this loop before now has run."""
    done = loop.create_future()
    loop.call_soon(done.set_result, None)
    await done


class MemoryHub:
    """Streams and deliverers in one process."""

    knows_every_stream = True  # groups_listening is every group with a stream (outbox.delivery.drop_unheard)

    def __init__(self):
        self.streams = {}  # group → {key: Stream}
        self.lock = threading.Lock()

    async def ready(self):
        return True

    def start(self):
        """Nothing to connect: every stream of this hub is in this process."""

    async def register(self, group, id):
        stream = Stream(group, id, asyncio.get_running_loop())
        with self.lock:
            self.streams.setdefault(group, {})[stream.key] = stream
        _joined(group)
        return stream

    def open_streams(self):
        with self.lock:
            return [stream for streams in self.streams.values() for stream in streams.values()]

    async def close(self, stream):
        """Route nothing more to this stream; once this returns, everything routed to it is on its queue."""
        with self.lock:
            self.streams.get(stream.group, {}).pop(stream.key, None)
        await _flushed(stream.loop)  # offers made under the lock before the pop were scheduled before this

    def groups_listening(self):
        """The groups with a stream now (outbox.delivery.drop_unheard): every stream is in this process."""
        with self.lock:
            return {group for group, streams in self.streams.items() if streams}

    def take_here(self, messages):
        """Every stream is this process's: publish_all, which makes no round trip."""
        return self.publish_all(messages)

    def nobody_listens(self, address):
        """Whether no stream can take a message to this poll:// address now (see RedisHub.nobody_listens). Exact here:
        every stream is in this process."""
        cast, group, id = parse_poll_address(address)
        with self.lock:
            streams = self.streams.get(group, {})
            return choose(cast, id, [Member(s.key, s.id, s.sequence) for s in streams.values()]) is None

    def publish_all(self, messages):
        """Route each (address, message, identity) to one stream; whether each was taken."""
        taken = []
        with self.lock:  # offers happen under the lock, so a closed stream gets none after close() returns
            for address, message, identity in messages:
                cast, group, id = parse_poll_address(address)
                streams = self.streams.get(group, {})
                chosen = choose(cast, id, [Member(s.key, s.id, s.sequence) for s in streams.values()])
                if chosen is not None:
                    stream = streams[chosen.key]
                    stream.loop.call_soon_threadsafe(stream.put, sse_event(message), identity)
                taken.append(chosen is not None)
        return taken


class RedisHub:
    """Streams in many server processes, deliverers anywhere, meeting in Redis.

    The server process side runs on its event loop: one subscriber connection (kept by `_relay`, which
    reconnects with backoff and then subscribes and advertises every live stream again), and a small
    pool for advertisements. The deliverer side is synchronous and thread-safe.
    """

    knows_every_stream = False  # most streams are other processes'
    TTL_MS = 30_000  # an advertisement not refreshed for this long belongs to a dead process
    REFRESH_S = 10
    HEARTBEAT_S = 2  # the relay hears its own process channel this often, or reconnects after 3 beats
    WAIT_S = 2  # how long a new stream waits for the hub to be (re)connected
    BACKOFF_S = (0.1, 1.0)  # reconnecting: a refused connect costs nothing, so keep trying often
    TIMEOUT_S = 2  # socket timeouts of commands
    KNOWN_S = 1.0  # how long a deliverer routes a group's messages by its members as it last read them

    def __init__(self, url):
        self.url = url
        self.process = f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.control = f"resonate:poll:process:{self.process}"  # always subscribed: the relay's heartbeat
        self.streams = {}  # key → Stream, in this process
        self.closing = {}  # channel → future resolved when Redis confirms the unsubscribe
        self.client = self.pubsub = self.relay = None
        self.up = None  # asyncio.Event: subscribed and advertised
        self._sync = None
        self._sync_lock = threading.Lock()
        self._known = {}  # group → (when read, monotonic s; its members as _read_members gives them): see _members
        self._forgotten = collections.Counter()  # group → how many times forgotten: a read older than that is not kept
        self._known_lock = threading.Lock()
        # Since when (monotonic s) the relay has heard JOINS without a break, or None: see nobody_listens.
        self._joins_since = None

    @staticmethod
    def group_key(group):
        return f"resonate:poll:group:{group}"

    def member(self, stream):
        return json.dumps([stream.channel, stream.key, stream.id, list(stream.sequence)])

    def pool_options(self, retries):
        """Bounded waits everywhere, and (almost) no retries inside redis-py: the hub reconnects itself."""
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        return {
            "max_connections": 20,  # callers wait for a free connection instead of failing
            "timeout": self.TIMEOUT_S,
            "socket_timeout": self.TIMEOUT_S,
            "socket_connect_timeout": self.TIMEOUT_S,
            "retry": Retry(NoBackoff(), retries),
        }

    # server process side (asyncio)

    async def ready(self):
        """Whether this process is connected to the hub (waiting WAIT_S for it, the first time or after a loss)."""
        self.start()
        try:
            await asyncio.wait_for(self.up.wait(), self.WAIT_S)
        except TimeoutError:
            return False
        return True

    async def register(self, group, id):
        self.start()
        stream = Stream(group, id, asyncio.get_running_loop())
        self.streams[stream.key] = stream  # from here a reconnecting relay subscribes and advertises it too
        try:
            await asyncio.wait_for(self.up.wait(), self.WAIT_S)
            await self.pubsub.subscribe(stream.channel)
            await self._advertise([stream])
            self.forget(stream.group)
        except Exception as error:
            self.streams.pop(stream.key, None)
            await self._unsubscribe(stream)
            raise HubUnavailable(f"the message hub is unavailable: {error!r}") from error
        except asyncio.CancelledError:  # the client left while the stream was being set up
            await self.close(stream)  # else it stayed advertised and refreshed, and took messages nobody read
            raise
        _joined(stream.group)
        return stream

    def open_streams(self):
        return list(self.streams.values())

    async def close(self, stream):
        """Route nothing more to this stream; once this returns, everything routed to it is on its queue.

        The advertisement goes first; then the channel is unsubscribed and the relay waits for Redis to
        confirm it, which comes after every message published to the channel before. Cancelled half-way, it still
        takes the stream out of this process: a stream left there was refreshed for ever and took messages.
        """
        try:
            try:
                await self._withdraw([stream])
            except Exception as error:  # a stale advertisement is struck by the first deliverer nobody hears
                log.info("could not withdraw stream %s/%s: %r", stream.group, stream.id, error)
            await self._unsubscribe(stream)
        finally:  # from here the relay sends back to the outbox whatever still arrives for this stream
            self.streams.pop(stream.key, None)
            self.forget(stream.group)

    async def _unsubscribe(self, stream):
        pubsub = self.pubsub
        if pubsub is None or not self.up.is_set():
            return  # no subscriber connection: its subscriptions ended with it
        confirmed = asyncio.get_running_loop().create_future()
        self.closing[stream.channel] = confirmed
        try:
            await pubsub.unsubscribe(stream.channel)
            await asyncio.wait_for(asyncio.shield(confirmed), self.TIMEOUT_S)
        except Exception as error:  # the relay reconnects; the new connection subscribes only live streams
            log.info("unsubscribing %s/%s: %r", stream.group, stream.id, error)
        finally:
            self.closing.pop(stream.channel, None)

    async def _withdraw(self, streams):
        pipe = self.client.pipeline(transaction=False)
        for stream in streams:
            pipe.zrem(self.group_key(stream.group), self.member(stream))
        await pipe.execute()

    async def _advertise(self, streams, joining=True):
        """Advertise streams in their groups, and announce on JOINS that they joined, after the advertisement (one
        connection keeps the order): a process that hears the announcement and reads the group again finds them.
        A refresh (joining=False) announces nothing: every process read them already, or hears them join again
        after a reconnection."""
        expiry = time.time() * 1000 + self.TTL_MS
        pipe = self.client.pipeline(transaction=False)
        for stream in streams:
            pipe.zadd(self.group_key(stream.group), {self.member(stream): expiry})
        if joining:
            for group in sorted({stream.group for stream in streams}):
                pipe.publish(JOINS, group)
        await pipe.execute()

    def start(self):
        """Connect this process's subscriber, once: when the server process starts (resonate_site.asgi's
        lifespan), or on its first stream."""
        if self.relay is not None:
            return
        import redis.asyncio

        pool = redis_urls.async_pool(self.url, **self.pool_options(retries=0))
        self.client = redis.asyncio.Redis(connection_pool=pool)
        self.up = asyncio.Event()
        loop = asyncio.get_running_loop()
        self.relay = loop.create_task(self._relay())  # kept referenced: an unreferenced task may be collected
        self.refresher = loop.create_task(self._refresh())

    async def _relay(self):
        """Hand what arrives on the streams' channels to the streams; reconnect, with backoff, when Redis goes away."""
        backoff = self.BACKOFF_S[0]
        while True:
            pubsub = self.client.pubsub()
            try:
                await pubsub.subscribe(self.control, JOINS)
                self.pubsub = pubsub
                streams = list(self.streams.values())
                if streams:
                    await pubsub.subscribe(*(s.channel for s in streams))
                    await self._advertise(streams)
                    for group in sorted({stream.group for stream in streams}):  # unheard meanwhile: joined again
                        _joined(group)
                self.up.set()
                # Streams that closed meanwhile found no connection to unsubscribe from: undo them here.
                gone = [stream for stream in streams if stream.key not in self.streams]
                if gone:
                    await pubsub.unsubscribe(*(stream.channel for stream in gone))
                    await self._withdraw(gone)
                if backoff > self.BACKOFF_S[0]:
                    log.warning("message hub reconnected; %d streams subscribed again", len(streams))
                backoff = self.BACKOFF_S[0]
                await self._listen(pubsub)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("message hub connection lost (%r); reconnecting in %.1f s", error, backoff)
            finally:
                self._hearing_joins(None)  # joins announced from here on may go unheard
                self.up.clear()
                self.pubsub = None
                for confirmed in self.closing.values():  # their subscriptions ended with the connection
                    if not confirmed.done():
                        confirmed.set_result(None)
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
                with contextlib.suppress(Exception):
                    await self.client.connection_pool.disconnect()  # stale after Redis went away: start afresh
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.BACKOFF_S[1])

    async def _listen(self, pubsub):
        heard = time.monotonic()
        next_beat = 0.0
        while True:
            now = time.monotonic()
            if now >= next_beat:
                await self.client.publish(self.control, "beat")
                next_beat = now + self.HEARTBEAT_S
            if now - heard > 3 * self.HEARTBEAT_S:
                raise HubUnavailable("the subscriber connection went silent")
            item = await pubsub.get_message(timeout=self.HEARTBEAT_S)
            if item is None:
                continue
            heard = time.monotonic()
            channel = item["channel"].decode()
            if channel == JOINS:
                if item["type"] == "message":
                    self.forget(item["data"].decode())
                elif item["type"] == "subscribe":  # Redis confirms it: every join announced after this is heard
                    self._hearing_joins(heard)
            elif item["type"] == "message" and channel != self.control:
                envelope = json.loads(item["data"])
                identity = tuple(envelope["message"]) if envelope.get("message") else None
                self._hand(envelope["stream"], envelope["event"], identity)
            elif item["type"] == "unsubscribe" and channel in self.closing:
                confirmed = self.closing[channel]
                if not confirmed.done():
                    confirmed.set_result(None)

    def _hand(self, key, event, identity):
        """On the event loop: put an event on this process's stream, or back in the outbox if the stream has closed
        since it was chosen (relayed from Redis, or handed over directly by a deliverer of this process)."""
        stream = self.streams.get(key)
        if stream is not None:
            stream.put(event, identity)
        else:
            requeue([identity])

    async def _refresh(self):
        """Keep every live stream's advertisement from expiring, in one pipeline per period."""
        while True:
            await asyncio.sleep(self.REFRESH_S)
            streams = list(self.streams.values())
            if streams and self.up.is_set():
                try:
                    await self._advertise(streams, joining=False)
                except Exception as error:  # the relay notices Redis away and advertises again when back
                    log.info("could not refresh %d stream advertisements: %r", len(streams), error)

    # deliverer side (any thread, synchronous)

    def sync_client(self):
        with self._sync_lock:
            if self._sync is None:
                import redis

                pool = redis_urls.sync_pool(self.url, **self.pool_options(retries=1))
                self._sync = redis.Redis(connection_pool=pool)
            return self._sync

    def take_here(self, messages):
        """Hand each (address, message, identity) whose stream, chosen among its group's members as last read (see
        _members; no round trip), is one of this process's to that stream: whether each was. The others are for
        publish_all, which chooses again."""
        now, taken = time.monotonic(), []
        for address, message, identity in messages:
            route = parse_poll_address(address)
            with self._known_lock:
                members = {route[1]: self._remembered(route[1], now) or {}}
            chosen = self._choose(route, members)
            taken.append(chosen is not None and self._hand_here(chosen.key, message, identity))
        return taken

    def _hand_here(self, key, message, identity):
        """Put the message on this process's stream `key`, on its loop, if it is one: whether it was. A stream that
        closes meanwhile sends it back to the outbox (_hand)."""
        local = self.streams.get(key)
        if local is not None:
            local.loop.call_soon_threadsafe(self._hand, key, sse_event(message), identity)
        return local is not None

    def publish_all(self, messages):
        """Route each (address, message, identity) to one stream: whether each was taken.

        Each group's streams are read once; every message is routed, and all are published in one
        pipeline but those for a stream of this process, which are handed to it directly. A message that
        no stream heard (the stream is gone) goes round again to another stream, with that one struck
        from the group. Raises HubUnavailable when Redis cannot be reached.
        """
        import redis

        try:
            return self._publish_all(self.sync_client(), messages)
        except redis.RedisError as error:
            raise HubUnavailable(f"the message hub is unavailable: {error!r}") from error

    def _publish_all(self, client, messages):
        routes = [parse_poll_address(address) for address, _, _ in messages]
        members, fresh = self._members(client, {group for _, group, _ in routes})
        taken = [False] * len(messages)
        waiting = list(range(len(messages)))
        while waiting:
            chosen = {n: self._choose(routes[n], members) for n in waiting}
            if unsure := {routes[n][1] for n in waiting if chosen[n] is None} - fresh - self._complete(members):
                # Nobody among the members as last read, and streams may have joined unheard since: read them again
                # before a message is called unreached.
                members.update(self._read_members(client, unsure))
                fresh |= unsure
                chosen.update({n: self._choose(routes[n], members) for n in waiting if routes[n][1] in unsure})
            pipe, published = client.pipeline(transaction=False), []
            for n in waiting:
                if chosen[n] is None:
                    continue
                group = routes[n][1]
                member, channel, raw = members[group][chosen[n].key]
                _, message, identity = messages[n]
                if self._hand_here(member.key, message, identity):  # a stream of this process: no round trip
                    taken[n] = True
                    continue
                envelope = {"stream": member.key, "event": sse_event(message), "message": identity}
                pipe.publish(channel, json.dumps(envelope))
                published.append((n, group, (member, channel, raw)))
            waiting, gone = [], []
            for (n, group, (member, _, raw)), heard in zip(published, pipe.execute() if published else [], strict=True):
                if heard:
                    taken[n] = True
                else:
                    members[group].pop(member.key, None)
                    gone.append((group, raw))
                    waiting.append(n)
            if gone:
                pipe = client.pipeline(transaction=False)
                for group, raw in gone:
                    pipe.zrem(self.group_key(group), raw)
                    self.forget(group)
                pipe.execute()
        return taken

    @staticmethod
    def _choose(route, members):
        cast, group, id = route
        return choose(cast, id, [member for member, _, _ in members[group].values()])

    def _members(self, client, groups):
        """({group: {stream key: (Member, channel, raw entry)}} of the live streams of these groups, as read from Redis
        within KNOWN_S (each a copy, the caller's to change); the groups among them read just now).

        Routing by members read a moment ago saves a round trip per batch, and is safe: a stream gone since (its
        advertisement withdrawn, its process dead) is not heard when published to, and is struck; a message none of
        them can take has its group read again (_publish_all) before it is called unreached. Only a stream that
        joined since is left out for that moment: anycast picks among the others. This process's own streams joining
        or leaving make it read their group again at once (forget).
        """
        now, found, unknown = time.monotonic(), {}, []
        with self._known_lock:
            for group in groups:
                remembered = self._remembered(group, now)
                if remembered is not None:
                    found[group] = dict(remembered)
                else:
                    unknown.append(group)
        if unknown:
            found.update(self._read_members(client, unknown))
        return found, set(unknown)

    def _hearing_joins(self, since):
        with self._known_lock:
            self._joins_since = since

    def _complete(self, groups):
        """Those of these groups whose members as remembered are all there are (_all_members)."""
        now = time.monotonic()
        with self._known_lock:
            return {group for group in groups if self._all_members(group, now) is not None}

    def _all_members(self, group, now):
        """The group's members as remembered, if they are all there are: read within KNOWN_S while JOINS was heard,
        with no stream heard joining since (it would have been forgotten); else None. Under _known_lock."""
        since = self._joins_since
        return None if since is None else self._remembered(group, now, heard_since=since)

    def nobody_listens(self, address):
        """Whether no stream can take a message to this poll:// address now, as this process knows without asking
        Redis: its group's members as read within KNOWN_S, while this process heard every stream that joined a group
        since (JOINS), leave none to choose. False whenever that is not known (the group not read lately, the relay
        not connected, as in a process that has none). A stream that joined elsewhere and whose announcement is
        still on its way (a millisecond or so) is not counted: a message for it waits POLL_RETRY_MS, as one that
        arrived just before the stream did."""
        route = parse_poll_address(address)
        if route is None:
            return False
        with self._known_lock:
            members = self._all_members(route[1], time.monotonic())
        return members is not None and self._choose(route, {route[1]: members}) is None

    def _remembered(self, group, now, heard_since=None):
        """The group's members as read within KNOWN_S of `now` (not a copy: not to be changed), or None; None too for
        a read from before `heard_since`, if given. Under _known_lock."""
        known = self._known.get(group)
        if known is None or now - known[0] >= self.KNOWN_S or (heard_since is not None and known[0] < heard_since):
            return None
        return known[1]

    def _read_members(self, client, groups):
        """{group: {stream key: (Member, channel, raw entry)}} read from Redis now (and remembered for _members)."""
        now, groups = time.time() * 1000, list(groups)
        with self._known_lock:
            read_at, forgotten = time.monotonic(), {group: self._forgotten[group] for group in groups}
        pipe = client.pipeline(transaction=False)
        for group in groups:
            pipe.zremrangebyscore(self.group_key(group), "-inf", now)
            pipe.zrangebyscore(self.group_key(group), now, "+inf")
        replies = pipe.execute()
        found = {}
        for group, raws in zip(groups, replies[1::2], strict=True):
            found[group] = {}
            for raw in raws:
                channel, stream, stream_id, sequence = json.loads(raw)
                found[group][stream] = (Member(stream, stream_id, tuple(sequence)), channel, raw)
        with self._known_lock:
            for group in groups:
                if self._forgotten[group] == forgotten[group]:  # else a stream joined or left while it was read
                    self._known[group] = (read_at, dict(found[group]))
        return found

    def forget(self, group):
        """Read this group's members from Redis on its next message: one of its streams has joined or left."""
        with self._known_lock:
            self._known.pop(group, None)
            self._forgotten[group] += 1


ENDING = ("", None)  # on a stream's queue: end now (Stream.end), after sending what was routed to it before


def end_streams():
    """This process is stopping (SIGTERM): every stream it holds ends at once, as at its maximum age (withdrawn from
    the hub, then sending what was routed to it before), so that its worker reconnects to another process now rather
    than when the server's grace for requests in flight runs out. Once per process; on its event loop."""
    global _ended
    if _hub is None or _ended:
        return
    _ended = True
    for stream in _hub.open_streams():
        stream.end()


_hub = None
_ended = False


def hub():
    """This process's hub: in memory, or Redis when RESONATE_HUB_URL is set."""
    global _hub
    if _hub is None:
        from floor.conf import resonate_settings

        url = resonate_settings.HUB_URL
        _hub = RedisHub(url) if url else MemoryHub()
    return _hub
