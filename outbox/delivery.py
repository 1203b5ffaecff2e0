"""Delivering outbox messages: poll:// to SSE streams through the hub, http(s):// by POST with retries.

A deliverer claims due messages (SKIP LOCKED, so deliverers share the work), counts the attempt and
pushes the next attempt time out by a lease, commits, sends, and records each outcome only if the
message is still the one it claimed (setMessage may have replaced it meanwhile). The process that
writes a message and sends it once committed claims it as it writes it (claim_on_write). A deliverer
that dies between claim and record leaves its messages pending; they are sent again once the lease
lapses. A poll message a stream took is recorded by the stream's process once written to its client
(record_written), so one whose process dies first is sent again the same way. Each step handles a whole
batch: one statement to claim, one round trip to route poll messages, one statement to record.
"""

import logging
from enum import Enum
from typing import NamedTuple

import httpx
from django.db import connection

from floor import rows, telemetry
from floor.clock import now_ms
from floor.conf import resonate_settings
from floor.counters import deliveries_recorded, messages_claimed
from floor.protocol import parse_poll_address
from floor.transactions import Mode, after_commit, run_atomically
from outbox.hub import HubUnavailable, hub
from outbox.models import DeliveryState, Message

log = logging.getLogger(__name__)

BATCH = 100
TABLE = rows.quote(Message._meta.db_table)


class Outcome(Enum):
    DELIVERED = "delivered"  # an HTTP push answered 2xx
    TAKEN = "taken"  # a stream took it: recorded delivered once the stream has written it (record_written)
    DROPPED = "dropped"  # nobody to deliver to; execute is re-sent by the task's timers
    RETRY = "retry"
    UNREACHED = "unreached"  # no stream connected right now: retried for POLL_GRACE_MS (joins_heard), then dropped
    STALE = "stale"  # a retried message nobody can act on any more (see drops_stale)
    HUB_DOWN = "hub down"  # the hub could not be asked: retried, and the grace does not run meanwhile


class Transport(Enum):
    POLL = "poll"  # SSE streams, through the hub
    PUSH = "push"  # http(s):// POSTs


def deliver(keys=None, limit=BATCH, only=None):
    """Send due messages: only those with `keys` if given, only those of one Transport if `only`. The keys claimed."""
    claimed = run_atomically(bookkeeping(claim), keys, now_ms(), limit, only)
    send_claimed(claimed)
    return [message.key for message in claimed]


def send_claimed(messages):
    """Send messages this process holds the claim of (claimed above, or when it wrote them), and record how it went."""
    if not messages:
        return
    with telemetry.span("resonate.deliver", **{"resonate.messages": len(messages)}) as current:
        messages_claimed(messages)
        dropped = stale(messages)
        outcomes = send_all([m for m in messages if m.key not in dropped])
        if dropped:  # in the claimed order again
            sent = iter(outcomes)
            outcomes = [(Outcome.STALE, dropped[m.key]) if m.key in dropped else next(sent) for m in messages]
        if current is not None:
            telemetry.delivered(current, messages, outcomes)
        deliveries_recorded(run_atomically(record, messages, outcomes, now_ms(), mode=Mode.AUTOCOMMIT))


_stale_checks = {}  # {message kind: check}: see drops_stale


def drops_stale(kind, check):
    """Have retried messages of this kind checked before they are sent: check(messages) → {key: why} for those
    nobody can act on any more (tasks registers one for execute: its task is no longer pending at the version
    the message carries). Registered by the app that writes such messages, so the outbox imports none of them."""
    _stale_checks[kind] = check


def stale(messages):
    """{key: why} for the retried messages a registered check finds stale. A first attempt is sent as it is
    (what it is about held when it was written), so only retries cost a read: one per kind and batch."""
    found = {}
    for kind, check in _stale_checks.items():
        retried = [m for m in messages if m.kind == kind and m.attempts > 1]
        if retried:
            found.update(check(retried))
    return found


def claim_on_write(message, nobody_listens=False):
    """Claim a message as it is written, for the process that writes it and sends it once it is committed:
    the attempt counted and the lease taken as claim would, without a statement of its own.

    The lease runs on the clock every deliverer reads, from now; a transaction slow to commit eats into it,
    so the sender checks what is left of it before sending (still_held).

    When the writing process knows that no stream can take it now (nobody_listens: the hub's word, without a round
    trip), the attempt is made as it is written: recorded as one that found no stream (settled_as), due again after
    POLL_RETRY_MS (or as joins_heard says), with nothing to send or record after the commit (recorded_on_write)."""
    message.attempts += 1
    now = now_ms()
    if nobody_listens:
        message.state, message.next_attempt_at, message.delivered_at, message.unreached_since = settled_as(
            message, Outcome.UNREACHED, now
        )
        message.last_error = NO_STREAM
    else:
        message.next_attempt_at = now + lease_ms(message.address)


def recorded_on_write(message):
    """Whether a message claimed as it was written had its attempt recorded then (claim_on_write): found no stream."""
    return message.unreached_since is not None


def still_held(message, now):
    """Whether a message claimed on write is still safely this process's to send: at least half its lease
    left. Otherwise it is claimed again like any announced message, so that it is not sent twice when
    another deliverer has taken it since its lease lapsed."""
    return message.next_attempt_at - now >= lease_ms(message.address) / 2


def lease_ms(address):
    """How long a claim holds a message: one attempt, a publish to the hub or a whole HTTP push with its timeout."""
    if address.startswith("poll://"):
        return POLL_LEASE_MS
    return resonate_settings.PUSH_TIMEOUT_MS + resonate_settings.DELIVERY_BACKOFF_MS


def bookkeeping(step):
    """A delivery step whose commit need not wait for the disk (PostgreSQL's synchronous_commit off).

    If the database crashes before such a commit is flushed, the claim or the outcome is forgotten and
    the message is sent again: delivery is at least once anyway. The protocol's own state is always
    committed synchronously.
    """

    def unflushed(*args):
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
        return step(*args)

    unflushed.__name__ = step.__name__
    return unflushed


PASS_BATCH = 500  # the periodic pass drains a backlog (after an outage) in bigger batches: fewer round trips
# SQLite has one writer at a time, and a request's transaction waits for each of the pass's claims and records: in
# smaller batches the requests get their turns sooner. The embedded mode with nobody listening drops 1,500 messages a
# second at the end of their grace: promise.create's p99 at 16 clients 62-86 -> 40-45 ms (bench/HISTORY.md, 2026-12-05).
PASS_BATCH_SQLITE = 50


def due_on_join(groups, now):
    """Streams of these groups have just connected: their poll:// messages that found no stream are due now, not
    at the end of their grace (joins_heard) or POLL_RETRY_MS after that attempt. A worker whose first invocation is
    written a moment before its stream connects (an SDK that has just started) gets it at once. Their keys."""
    due = []
    with connection.cursor() as cursor:
        for group in groups:
            prefixes = [f"poll://any@{group}", f"poll://any@{group}/", f"poll://uni@{group}/"]
            cursor.execute(
                f'UPDATE {TABLE} SET "next_attempt_at" = %s WHERE "state" = %s AND "next_attempt_at" > %s'
                ' AND "unreached_since" IS NOT NULL AND ("address" = %s'
                ' OR substr("address", 1, %s) = %s OR substr("address", 1, %s) = %s) RETURNING "key"',
                [now, DeliveryState.PENDING, now, prefixes[0], *_prefix(prefixes[1]), *_prefix(prefixes[2])],
            )
            due += [key for (key,) in cursor.fetchall()]
    return due


def _prefix(prefix):
    return len(prefix), prefix


def deliver_due(only=None):
    """Everything due, batch by batch: the periodic pass that catches what on-commit delivery missed. How many
    messages it attempted."""
    total = 0
    limit = PASS_BATCH if connection.vendor == "postgresql" else PASS_BATCH_SQLITE
    if only is not Transport.PUSH and joins_heard() and hub().knows_every_stream:
        while dropped := run_atomically(drop_unheard, now_ms(), hub().groups_listening(), limit, mode=Mode.AUTOCOMMIT):
            total += dropped
    while sent := len(deliver(limit=limit, only=only)):
        total += sent
    return total


class Unheard(NamedTuple):
    """A message drop_unheard dropped, as the counters and the trace name it."""

    kind: str
    subject: str
    address: str


UNHEARD_GROUPS_MAX = 50  # groups with a stream, beyond which drop_unheard leaves every message to the attempts


def drop_unheard(now, listening, limit):
    """Where joins are heard (joins_heard) and every stream is in this process (the embedded mode's in-memory hub):
    drop up to `limit` poll:// messages whose grace has ended, of groups in which no stream is (`listening`: the
    groups that have one, read after `now`); how many.

    Such a message's last attempt, at the end of its grace, finds no stream and drops it (settled_as): a stream of its
    group that had connected meanwhile would have made it due at once (due_on_join), and a stream that connects after
    `listening` was read is one that connected after that attempt. So its attempt is counted and recorded here without
    a claim, a publish and a record: one statement for the batch. In the embedded mode with nobody listening, those
    three steps per message had held a tenth of the interpreter (bench/HISTORY.md, 2026-12-05). Messages of a group
    with a stream go through the attempts, which know a stream's id (poll://uni@group/id)."""
    if len(listening) > UNHEARD_GROUPS_MAX:
        return 0
    spared, spared_params = "", []
    for group in sorted(listening):
        spared += ' AND "address" <> %s AND substr("address", 1, %s) <> %s AND substr("address", 1, %s) <> %s'
        spared_params += [f"poll://any@{group}", *_prefix(f"poll://any@{group}/"), *_prefix(f"poll://uni@{group}/")]
    with rows.cursor_of(connection) as cursor:
        cursor.execute(
            f'UPDATE {TABLE} SET "state" = %s, "attempts" = "attempts" + 1, "last_error" = %s WHERE "id" IN ('
            f'SELECT "id" FROM {TABLE} WHERE "state" = %s AND "next_attempt_at" <= %s'
            f""" AND "unreached_since" <= %s AND "address" LIKE 'poll://%%'{spared}"""
            ' ORDER BY "next_attempt_at", "id" LIMIT %s) RETURNING "kind", "subject", "address"',
            [DeliveryState.DROPPED, NO_STREAM, DeliveryState.PENDING, now]
            + [now - resonate_settings.POLL_GRACE_MS, *spared_params, limit],
        )
        dropped = [Unheard(*row) for row in cursor.fetchall()]
    if dropped:
        after_commit(unheard_dropped, *dropped)
    return len(dropped)


def unheard_dropped(dropped):
    """Count, trace and log what drop_unheard dropped, once committed: one line for the batch (a line a message, at
    1,500 a second, was a cost of its own), each message at DEBUG."""
    messages_claimed(dropped)
    deliveries_recorded([DeliveryState.DROPPED] * len(dropped))
    with telemetry.span("resonate.deliver", **{"resonate.messages": len(dropped)}) as current:
        if current is not None:
            telemetry.delivered(current, dropped, [(Outcome.UNREACHED, NO_STREAM)] * len(dropped))
    first = dropped[0]
    log.info(
        "%d messages dropped: no stream of their group connected within their grace (%s %s to %s%s)",
        len(dropped),
        first.kind,
        first.subject,
        first.address,
        ", …" if len(dropped) > 1 else "",
    )
    for message in dropped:
        log.debug("%s %s to %s: unreached (%s)", message.kind, message.subject, message.address, NO_STREAM)


# A publish through the hub, and the stream writing the message and recording it, take milliseconds; when Redis
# or the database is slow, or the client reads slowly, they can outlast this (waits for a pooled connection,
# connects and reads of 2 s each, a stream's queue), and the message is then sent twice: at least once.
POLL_LEASE_MS = 5000


def claim(keys, now, limit, only=None):
    """Take up to `limit` due messages: count the attempt, and hold them for a lease.

    The lease covers one attempt: a whole HTTP push with its timeout, or a publish to the hub. A
    deliverer that dies holding them leaves them to be claimed again once it lapses.
    """
    which = f' AND "key" IN ({rows.placeholders(keys)})' if keys else ""
    if only is Transport.PUSH:  # a process with no hub reaches no stream: it must not try poll:// messages
        which += """ AND "address" NOT LIKE 'poll://%%'"""
    elif only is Transport.POLL:  # a server process sends to streams itself and leaves pushes to Celery
        which += """ AND "address" LIKE 'poll://%%'"""
    lock = " FOR UPDATE SKIP LOCKED" if connection.features.has_select_for_update_skip_locked else ""
    return rows.fetch_sql(
        Message,
        f'UPDATE {TABLE} SET "attempts" = "attempts" + 1,'
        f""" "next_attempt_at" = CASE WHEN "address" LIKE 'poll://%%' THEN %s ELSE %s END WHERE "id" IN ("""
        f'SELECT "id" FROM {TABLE} WHERE "state" = %s AND "next_attempt_at" <= %s{which}'
        f' ORDER BY "next_attempt_at", "id" LIMIT %s{lock}) RETURNING {rows.columns(Message)}',
        [now + lease_ms("poll://"), now + lease_ms("http://"), DeliveryState.PENDING, now, *(keys or []), limit],
    )


def send_all(messages):
    """Try each message's transport once: [(outcome, detail)] in the same order."""
    server_url = resonate_settings.SERVER_URL
    outcomes = [None] * len(messages)
    polled = [n for n, m in enumerate(messages) if parse_poll_address(m.address) is not None]
    if polled:
        try:
            taken = hub().publish_all(
                [(messages[n].address, messages[n].body(server_url), identity(messages[n])) for n in polled]
            )
        except HubUnavailable as error:
            taken = [error] * len(polled)
        for n, ok in zip(polled, taken, strict=True):
            if isinstance(ok, HubUnavailable):
                outcomes[n] = (Outcome.HUB_DOWN, str(ok))
            else:
                outcomes[n] = (Outcome.TAKEN, "") if ok else (Outcome.UNREACHED, NO_STREAM)
    for n, message in enumerate(messages):
        if outcomes[n] is None:
            if message.address.startswith(("http://", "https://")):
                outcomes[n] = push(message.address, message.body(server_url))
            else:
                outcomes[n] = (Outcome.DROPPED, f"no transport for address {message.address!r}")
    return outcomes


NO_STREAM = "no live poll connection for this address"  # an UNREACHED attempt's detail


def identity(message):
    """What names this version of a message: setMessage replaces a message under the same key with a newer one."""
    return [message.key, message.created_at]


def push(url, body):
    """One HTTP push (decision D13): any 2xx is delivered; anything else is retried later."""
    with telemetry.span("resonate.push", **{"url.full": url}) as current:
        try:
            response = httpx.post(url, json=body, timeout=resonate_settings.PUSH_TIMEOUT_MS / 1000)
        except httpx.HTTPError as error:
            return Outcome.RETRY, f"{type(error).__name__}: {error}"
        if current is not None:
            current.set_attribute("http.response.status_code", response.status_code)
        if response.is_success:
            return Outcome.DELIVERED, ""
        return Outcome.RETRY, f"HTTP {response.status_code}"


def record(messages, outcomes, now):
    """Store each outcome on its message, unless the message was replaced (or finished by another deliverer)
    meanwhile.

    One statement for the whole batch, which needs no transaction; on PostgreSQL its commit does not wait
    for the disk: if the database crashes before it is flushed, the outcome is forgotten and the message
    is sent again (delivery is at least once anyway). Returns the state each recorded attempt left its
    message in.

    A message a stream took stays claimed, and its stream records it delivered once it has written it to its
    client (record_written). A stream whose process dies first (killed, or frozen and then killed, with its
    Redis subscription still open) leaves it to be sent again once the claim lapses. Such a message is recorded
    here only if it had waited for a stream: its poll grace starts afresh, as when a stream sends it back
    (requeue), or an attempt after the lapse could drop it at once.
    """
    attempts = [
        (m, o)
        for m, o in zip(messages, outcomes, strict=True)
        if o[0] is not Outcome.TAKEN or m.unreached_since is not None
    ]
    if not attempts:
        return []
    states = []
    for message, (outcome, detail) in attempts:
        after = settled_as(message, outcome, now)
        if outcome is not Outcome.TAKEN:  # counted when its stream has written it
            states.append(after.state)
        if after.state != DeliveryState.DELIVERED and outcome is not Outcome.TAKEN:
            # A stream reconnecting is routine (a message waits for it), and so is a stale execute: DEBUG; a
            # message dropped or a push failing is worth an operator's eye. /metrics counts every outcome.
            quiet = outcome is Outcome.STALE or (outcome is Outcome.UNREACHED and after.state == DeliveryState.PENDING)
            log.log(
                logging.DEBUG if quiet else logging.INFO,
                "%s %s to %s: %s (%s)",
                message.kind,
                message.subject,
                message.address,
                outcome.value,
                detail,
            )
        message.state, message.next_attempt_at, message.delivered_at, message.unreached_since = after
        message.last_error = detail
    sql, params, _ = rows.updating(  # the attempt this deliverer claimed, if the message is still that one
        [message for message, _ in attempts],
        *Settled._fields,
        "last_error",
        by=CLAIM,
        only={"state": DeliveryState.PENDING},
    )
    _update_unflushed(sql, params)
    return states


CLAIM = ("key", "attempts", "created_at")  # what names one attempt at one version of a message
VERSION = ("key", "created_at")  # what names one version of a message (identity)


def record_written(identities, now):
    """Record delivered the messages streams have written to their clients (identities: (key, created_at)), unless
    replaced or recorded meanwhile; how many. Whatever attempt routed it: a copy of this version reached a client.

    One statement, with record's unflushed commit: a receipt the database forgets means the message goes out once
    more, which at least once allows."""
    written = [
        Message(key=key, created_at=created_at, state=DeliveryState.DELIVERED, delivered_at=now)
        for key, created_at in identities
    ]
    sql, params, _ = rows.updating(written, "state", "delivered_at", by=VERSION, only={"state": DeliveryState.PENDING})
    return _update_unflushed(sql, params)


def _update_unflushed(sql, params):
    """Run one UPDATE of delivery bookkeeping, which needs no transaction, with a commit that does not wait for the
    disk (see bookkeeping): on PostgreSQL, SET LOCAL goes in the same query string, one round trip. How many rows
    it updated."""
    postgresql = connection.vendor == "postgresql"
    with rows.cursor_of(connection) as cursor:
        cursor.execute(f"SET LOCAL synchronous_commit TO OFF; {sql}" if postgresql else sql, params)
        if postgresql:
            cursor.nextset()  # from SET's result to the UPDATE's
        return cursor.rowcount


class Settled(NamedTuple):
    """A message's delivery bookkeeping after an attempt."""

    state: str
    next_attempt_at: int | None
    delivered_at: int | None = None
    unreached_since: int | None = None


def settled_as(message, outcome, now):
    """The message's bookkeeping after an attempt with this outcome."""
    if outcome is Outcome.DELIVERED:
        return Settled(DeliveryState.DELIVERED, message.next_attempt_at, now)
    if outcome is Outcome.TAKEN:  # still claimed (the lease), waiting for its stream's receipt; a grace afresh
        return Settled(DeliveryState.PENDING, message.next_attempt_at)
    if outcome is Outcome.UNREACHED:
        # A stream reconnects after each SSE_MAX_AGE_MS, and the SDKs wait a second before they do: a
        # message sent in that gap waits for the new stream rather than being lost (unblock is never re-sent).
        # The grace runs from the first attempt that found no stream, not from the message's creation: a
        # message that waited out an outage (of the hub, the database, the deliverers) still gets all of it.
        since = now if message.unreached_since is None else message.unreached_since
        if now - since >= resonate_settings.POLL_GRACE_MS:
            return Settled(DeliveryState.DROPPED, message.next_attempt_at, None, since)
        if joins_heard():  # a stream of its group connecting makes it due (due_on_join); else it ends its grace
            return Settled(DeliveryState.PENDING, since + resonate_settings.POLL_GRACE_MS, None, since)
        return Settled(DeliveryState.PENDING, now + resonate_settings.POLL_RETRY_MS, None, since)
    if outcome is Outcome.HUB_DOWN:
        return Settled(DeliveryState.PENDING, now + resonate_settings.POLL_RETRY_MS, None, message.unreached_since)
    if outcome in (Outcome.DROPPED, Outcome.STALE):
        return Settled(DeliveryState.DROPPED, message.next_attempt_at)
    if message.attempts >= resonate_settings.DELIVERY_ATTEMPTS:
        return Settled(DeliveryState.FAILED, message.next_attempt_at)
    return Settled(DeliveryState.PENDING, now + backoff(message.attempts))


def joins_heard():
    """Whether a poll:// message that found no stream can wait for one of its group to connect, rather than be tried
    every POLL_RETRY_MS: wherever a stream's connecting makes its group's waiting messages due (due_on_join), run
    by the deliverer of the process it connects to (outbox.dispatch): the embedded mode, and production mode, whose
    server processes each do so for their own streams. Its last attempt comes when its grace ends.

    An attempt that found no stream just before one connected, and recorded so only after that process's
    due_on_join, would wait out its grace: the deliverer runs due_on_join again JOIN_RECHECK_S later (SQLite needs
    no second look: its due_on_join waits for the transaction that found the stream missing to commit). With
    nobody listening, the retries every 500 ms took more of the interpreter than the requests did in the embedded
    mode (bench/HISTORY.md, 2026-12-04), and production's create at 1 client ran at 269/s against 1,369/s without
    them (2026-12-07)."""
    return _joins_heard()


def hears_joins(check):
    """Register what tells joins_heard (outbox.dispatch: whether this process runs such a deliverer)."""
    global _joins_heard
    _joins_heard = check


_joins_heard = lambda: False  # noqa: E731 (replaced by hears_joins)


def requeue(identities, now, due):
    """Messages a stream took but never sent to its client: due again at `due`; their keys.

    The attempt count moves on, so a deliverer still recording an attempt that routed them cannot
    change them afterwards (record matches the attempt it claimed); the poll grace starts afresh. A
    message recorded delivered meanwhile stays so: another copy of it reached a client.
    """
    requeued = []
    with connection.cursor() as cursor:
        for key, created_at in identities:
            cursor.execute(
                f'UPDATE {TABLE} SET "state" = %s, "attempts" = "attempts" + 1, "next_attempt_at" = %s,'
                ' "delivered_at" = NULL, "unreached_since" = NULL, "last_error" = %s'
                ' WHERE "key" = %s AND "created_at" = %s AND "state" = %s',
                [DeliveryState.PENDING, due, "taken by a stream that did not send it", key, created_at]
                + [DeliveryState.PENDING],
            )
            if cursor.rowcount:
                requeued.append(key)
    return requeued


def backoff(attempts):
    """Delay before attempt n + 1: DELIVERY_BACKOFF_MS doubling per attempt, capped."""
    return min(resonate_settings.DELIVERY_BACKOFF_MS * 2 ** (attempts - 1), resonate_settings.DELIVERY_BACKOFF_MAX_MS)
