"""Where poll:// messages meet live SSE streams: unicast to an id, anycast to one stream of a group.

Streams register with the hub of their server process; a deliverer, in any process, publishes. The
in-memory hub serves one process (the embedded mode). The Redis hub spans processes: each stream is
listed in a sorted set per group (score = expiry, refreshed while it lives) and each server process
listens on its own channel; PUBLISH answers how many processes heard, so a vanished one is noticed.
"""

import asyncio
import itertools
import json
import logging
import os
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

BUFFER = 100  # events a slow stream may fall behind before further ones are dropped (as the reference does)
_sequence = itertools.count()


def parse_poll_address(address):
    """poll://uni|any@group[/id] → (cast, group, id or None); None if it is not a poll address."""
    url = urlsplit(address)
    cast, _, group = url.netloc.partition("@")
    if url.scheme != "poll" or cast not in ("uni", "any") or not group:
        return None
    return cast, group, url.path.lstrip("/") or None


@dataclass(frozen=True)
class Member:
    """A stream as the router sees it."""

    key: str
    id: str
    sequence: int  # registration order: unicast goes to the first registered stream of the id


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


@dataclass(eq=False)
class Stream:
    """One live GET /poll/{group}/{id}: events are put on its queue from any thread."""

    group: str
    id: str
    loop: asyncio.AbstractEventLoop
    key: str = field(default_factory=lambda: uuid.uuid4().hex)
    sequence: int = field(default_factory=lambda: next(_sequence))
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(BUFFER))
    refresher: asyncio.Task | None = None

    def offer(self, event):
        """Hand an event to the stream's event loop; safe from any thread."""
        self.loop.call_soon_threadsafe(self._put, event)

    def _put(self, event):
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            log.warning("stream %s/%s is %d events behind; dropping one", self.group, self.id, BUFFER)


class MemoryHub:
    """Streams and deliverers in one process."""

    def __init__(self):
        self.streams = {}  # group → {key: Stream}
        self.lock = threading.Lock()

    async def register(self, group, id):
        stream = Stream(group, id, asyncio.get_running_loop())
        with self.lock:
            self.streams.setdefault(group, {})[stream.key] = stream
        return stream

    async def withdraw(self, stream):
        """Route nothing more to this stream (what is already on its way still reaches its queue)."""
        with self.lock:
            self.streams.get(stream.group, {}).pop(stream.key, None)

    unregister = withdraw  # events are offered to the stream object itself: nothing else to forget

    def publish_all(self, messages):
        """Route each (address, message) to one stream; whether each was taken."""
        with self.lock:
            groups = {group: dict(streams) for group, streams in self.streams.items()}
        taken = []
        for address, message in messages:
            cast, group, id = parse_poll_address(address)
            streams = groups.get(group, {})
            chosen = choose(cast, id, [Member(s.key, s.id, s.sequence) for s in streams.values()])
            if chosen is not None:
                streams[chosen.key].offer(sse_event(message))
            taken.append(chosen is not None)
        return taken


class RedisHub:
    """Streams in many server processes, deliverers anywhere, meeting in Redis."""

    TTL_MS = 30_000  # a registration not refreshed for this long belongs to a dead process
    REFRESH_S = 10

    def __init__(self, url):
        self.url = url
        self.process = f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.channel = f"resonate:poll:process:{self.process}"
        self.streams = {}  # key → Stream, in this process
        self.client = None
        self.relay = None  # the task relaying this process's channel to its streams (kept referenced)
        self.starting = None
        self._sync = None

    @staticmethod
    def group_key(group):
        return f"resonate:poll:group:{group}"

    def member(self, stream):
        return json.dumps([self.channel, stream.key, stream.id, stream.sequence])

    # server process side (asyncio)

    async def register(self, group, id):
        await self._listening()
        stream = Stream(group, id, asyncio.get_running_loop())
        self.streams[stream.key] = stream
        await self._advertise(stream)
        stream.refresher = asyncio.get_running_loop().create_task(self._refresh(stream))
        return stream

    async def withdraw(self, stream):
        """Route nothing more to this stream; what deliverers already sent still reaches it until unregister."""
        stream.refresher.cancel()
        await self.client.zrem(self.group_key(stream.group), self.member(stream))

    async def unregister(self, stream):
        try:
            await self.withdraw(stream)
        finally:
            self.streams.pop(stream.key, None)

    async def _advertise(self, stream):
        await self.client.zadd(self.group_key(stream.group), {self.member(stream): time.time() * 1000 + self.TTL_MS})

    async def _refresh(self, stream):
        while True:
            await asyncio.sleep(self.REFRESH_S)
            try:
                await self._advertise(stream)
            except Exception:  # Redis away: the next refresh puts the stream back
                log.exception("could not refresh stream %s/%s", stream.group, stream.id)

    async def _listening(self):
        """Subscribe this process's channel before any stream is advertised (once per process)."""
        import redis.asyncio

        if self.starting is None:
            self.starting = asyncio.Lock()
        async with self.starting:
            if self.relay is None:
                self.client = redis.asyncio.from_url(self.url)
                pubsub = self.client.pubsub()
                await pubsub.subscribe(self.channel)
                self.relay = asyncio.get_running_loop().create_task(self._relay(pubsub))

    async def _relay(self, pubsub):
        """Hand what arrives on this process's channel to its streams; resubscribe if Redis goes away."""
        while True:
            try:
                async for item in pubsub.listen():
                    if item["type"] == "message":
                        envelope = json.loads(item["data"])
                        stream = self.streams.get(envelope["stream"])
                        if stream is not None:
                            stream._put(envelope["event"])
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("hub channel %s lost; resubscribing", self.channel)
                await asyncio.sleep(1)
                pubsub = self.client.pubsub()
                try:
                    await pubsub.subscribe(self.channel)
                except Exception:
                    log.exception("resubscribing to %s failed", self.channel)

    # deliverer side (any thread, synchronous)

    def publish_all(self, messages):
        """Route each (address, message) to one stream, a round trip per round: whether each was taken.

        Each group's streams are read once; every message is routed and all are published in one
        pipeline. A message whose process no longer listens (PUBLISH reached nobody) goes round again
        to another stream, with that one struck from the group.
        """
        import redis

        if self._sync is None:
            self._sync = redis.Redis.from_url(self.url)
        routes = [parse_poll_address(address) for address, _ in messages]
        members = self._members({group for _, group, _ in routes})
        taken = [False] * len(messages)
        waiting = list(range(len(messages)))
        while waiting:
            sends = []  # (message index, group, member)
            for n in waiting:
                cast, group, id = routes[n]
                chosen = choose(cast, id, [m for m, _, _ in members[group].values()])
                if chosen is not None:
                    sends.append((n, group, members[group][chosen.key]))
            pipe = self._sync.pipeline(transaction=False)
            for n, _, (member, channel, _) in sends:
                pipe.publish(channel, json.dumps({"stream": member.key, "event": sse_event(messages[n][1])}))
            waiting = []
            for (n, group, (member, _, raw)), heard in zip(sends, pipe.execute(), strict=True):
                if heard:
                    taken[n] = True
                else:
                    members[group].pop(member.key, None)
                    self._sync.zrem(self.group_key(group), raw)
                    waiting.append(n)
        return taken

    def _members(self, groups):
        """{group: {stream key: (Member, process channel, raw entry)}} of the live streams of these groups."""
        now, groups = time.time() * 1000, list(groups)
        pipe = self._sync.pipeline(transaction=False)
        for group in groups:
            pipe.zremrangebyscore(self.group_key(group), "-inf", now)
            pipe.zrangebyscore(self.group_key(group), now, "+inf")
        replies = pipe.execute()
        found = {}
        for group, raws in zip(groups, replies[1::2], strict=True):
            found[group] = {}
            for raw in raws:
                channel, stream, stream_id, sequence = json.loads(raw)
                found[group][stream] = (Member(stream, stream_id, sequence), channel, raw)
        return found


_hub = None


def hub():
    """This process's hub: in memory, or Redis when RESONATE_HUB_URL is set."""
    global _hub
    if _hub is None:
        from resonate_site.conf import resonate_settings

        url = resonate_settings.HUB_URL
        _hub = RedisHub(url) if url else MemoryHub()
    return _hub
