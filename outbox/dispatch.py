"""Who delivers a committed message: the committing thread itself when it is bound for a stream of this process
(Deliverer.hand_over), else the deliverer thread of the process that committed it, at once; Celery for HTTP pushes
in production; and a periodic pass (Beat's, or the embedded deliverer's) for whatever was missed."""

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time
from typing import NamedTuple

from django.db import InterfaceError, OperationalError, close_old_connections, connection, connections

from floor import telemetry
from floor.clock import now_ms
from floor.conf import resonate_settings
from floor.counters import deliveries_recorded, messages_claimed
from floor.outages import log_failure
from floor.protocol import parse_poll_address
from floor.transactions import Mode, after_commit, run_atomically
from outbox.delivery import (
    BATCH,
    PASS_BATCH,
    Outcome,
    Transport,
    claim_on_write,
    deliver,
    deliver_due,
    due_on_join,
    hears_joins,
    identity,
    record_written,
    recorded_on_write,
    send_claimed,
    still_held,
)
from outbox.delivery import requeue as requeue_messages
from outbox.hub import hub, joins_go_to, takes_back
from outbox.models import DeliveryState, Message, Pause

log = logging.getLogger(__name__)


def announce(*messages):
    """Deliver these messages (Message instances, or keys) once the transaction that wrote them commits.

    The messages of one operation go out together: one notice per commit.
    """
    after_commit(notify, *messages)


def notify(messages):
    """Have these committed messages delivered now: those for a stream of this process handed to it at once (see
    Deliverer.hand_over), the others by this process's deliverer thread; a request never waits on a round trip for
    delivery. Those whose attempt was made as they were written (nobody could take them) are only counted. Whatever
    a deliverer misses, the periodic delivery pass sends."""
    running = deliverer()
    if running is None:
        return  # nobody delivers in this process (tests, commands): the message waits in the outbox
    unreached, messages = partition(messages, lambda m: claimed_on_write(m) and recorded_on_write(m))
    if unreached:
        messages_claimed(unreached)  # counted as the deliverer counts an attempt that found no stream
        deliveries_recorded([DeliveryState.PENDING] * len(unreached))
    if not messages:
        return
    try:
        messages = running.hand_over(messages)
    except Exception:
        log_failure(
            log, "could not hand %d messages to this process's streams; its deliverer sends them", len(messages)
        )
    if messages:
        running.wake(messages)


def partition(items, test):
    """(the items that pass the test, the others), each in order."""
    passed, others = [], []
    for item in items:
        (passed if test(item) else others).append(item)
    return passed, others


def claim_if_sent_here(message):
    """Claim a message being written for this process (outbox.delivery.claim_on_write) when its deliverer sends it
    itself as soon as it is committed; with its attempt recorded then when no stream can take it (nobody_listens)."""
    running = deliverer()
    if running is not None and running.sends_at_once(message.address):
        claim_on_write(message, running.nobody_listens(message.address))


def requeue(identities, delay_ms=0):
    """Put messages that reached a stream but not its client back in the outbox: due at once and announced, or
    after `delay_ms` for the periodic pass (a stream that is full). Runs on a thread of an event loop's executor,
    which the loop waits for when it closes; retried while the database is away, for about a minute. Rare: the
    thread's database connection is closed afterwards, not left to an executor thread that may sit idle."""
    try:
        _requeue(identities, delay_ms)
    finally:
        connections.close_all()


def _requeue(identities, delay_ms):
    close_old_connections()
    for attempt in range(12):
        try:
            keys = run_atomically(requeue_messages, identities, now_ms(), now_ms() + delay_ms)
            break
        except Exception:
            log.warning("could not requeue %d messages yet (attempt %d)", len(identities), attempt + 1, exc_info=True)
            time.sleep(min(0.5 * 2**attempt, 5))
    else:
        log.error("gave up requeueing %d messages; they stay recorded as delivered", len(identities))
        return
    if keys and not delay_ms:
        log.info("%d messages went back to the outbox: their stream closed before sending them", len(keys))
        notify(keys)


class Joined(NamedTuple):
    """A stream of this group has connected (Deliverer.joined)."""

    group: str


class Written(NamedTuple):
    """A message a stream has written to its client, on its way to the deliverer that records it delivered."""

    key: str
    created_at: int


def record_delivered(identities):
    """From a stream's event loop: have these messages, (key, created_at), which the stream has written to its
    client, recorded delivered: by this process's deliverer, with the next batch it handles, or with none here
    (tests, commands) on the loop's executor. One left unrecorded (the process dies, the database is away) goes
    out again once its claim lapses."""
    running = deliverer()
    if running is not None:
        running.wake([Written(*identity) for identity in identities])
    else:
        asyncio.get_running_loop().run_in_executor(None, _record_delivered, identities)


def _record_delivered(identities):
    try:
        record_written_now(identities)
    finally:
        connections.close_all()


def record_written_now(identities):
    """record_written in its own step, counted for /metrics."""
    deliveries_recorded(["delivered"] * run_atomically(record_written, identities, now_ms(), mode=Mode.AUTOCOMMIT))


takes_back(requeue, record_delivered)  # the hub's streams give back, through these, what they could and could not send


class Deliverer(threading.Thread):
    """Delivers the messages committed in this process as soon as they are announced, a batch at a time.

    Embedded mode: every transport, and everything due every DELIVERY_PASS_MS (nobody else does).
    Production mode (server processes and Celery workers): poll:// messages, straight to the hub, so a
    message is on its way to its stream within milliseconds of the commit; HTTP pushes (which may take
    PUSH_TIMEOUT_MS) are handed to Celery workers; Beat's delivery pass catches whatever is missed, a
    process killed between its commit and its delivery included.

    In either mode, a stream that connects to this process makes the messages of its group that found no stream
    due, and sends them (due_on_join; see outbox.delivery.joins_heard).
    """

    WAITING = 10_000  # announcements held while delivery is slow; beyond that, the delivery pass has them
    RECEIPTS_LINGER_S = 0.02  # how long receipts alone wait for more (linger)
    PAUSE_TRUSTED_S = 0.1  # how long other threads act on debug.start's pause as this thread last read it
    PAUSE_REREAD_S = 0.05  # how old a read of the pause this thread reads again (paused), by itself while asked
    ASKED_S = 1.0  # how long after a request last asked about the pause this thread keeps its read fresh (run)
    # How long after a join its group's waiting messages are made due once more: an attempt that found no stream
    # just before the stream connected may be recorded after the first due_on_join (not on SQLite, whose due_on_join
    # waits for it). Attempts are recorded milliseconds after they look; one recorded later waits out its grace.
    JOIN_RECHECK_S = 1.0

    def __init__(self, stopping=lambda: False, embedded=True):
        super().__init__(name="resonate-deliverer", daemon=True)
        self.stopped = threading.Event()
        self.stopping = lambda: stopping() or self.stopped.is_set()
        self.embedded = embedded
        self.keys = queue.Queue(self.WAITING)
        self.handoff = None if embedded else Handoff()
        self.pause_read = (float("-inf"), False)  # (when, whether): debug.start's pause as last read (paused)
        self.pause_tried = float("-inf")  # when this thread last began reading it, whether or not it could
        self.asked_at = float("-inf")  # when another thread last asked whether it was unpaused (unpaused_lately)
        self.joins_waiting = set()  # groups whose streams connected while delivery was paused (debug.start)
        self.rechecks = {}  # group → when (monotonic s) its join is looked at again (JOIN_RECHECK_S)
        self.rechecks_joins = False  # whether joins need that second look (set at start: not on SQLite)

    def stop(self):
        self.stopped.set()
        with contextlib.suppress(queue.Full):
            self.keys.put_nowait([])  # wake it
        self.join(10)

    def start(self):
        global _deliverer
        _deliverer = (_this_process, self)
        if self.handoff is not None:
            self.handoff.start()
        self.rechecks_joins = connection.vendor != "sqlite"
        super().start()

    def joined(self, group):
        """A stream of `group` has connected to this process (on its event loop): what found no stream of it goes now
        (due_on_join)."""
        with contextlib.suppress(queue.Full):
            self.keys.put_nowait([Joined(group)])

    def sends_at_once(self, address):
        """Embedded: every message. Production: poll:// ones; HTTP pushes go to Celery workers (see Handoff)."""
        return self.embedded or parse_poll_address(address) is not None

    def nobody_listens(self, address):
        """Whether a message to this address, being written, finds no stream that could take it, as the hub knows
        without a round trip (hub().nobody_listens): then its attempt is recorded as it is written
        (outbox.delivery.claim_on_write). Only while the deliverer has seen delivery unpaused within PAUSE_TRUSTED_S,
        as for hand_over: it reads the pause again by itself while asked (fresh_pause_in); otherwise the first such
        message after a lapse goes through this thread, which reads it then. The hub reads the group every
        RedisHub.KNOWN_S."""
        if not self.unpaused_lately() or parse_poll_address(address) is None:
            return False
        try:
            return hub().nobody_listens(address)
        except Exception:
            log_failure(log, "could not tell whether anyone listens at %s; the deliverer tries", address)
            return False

    def wake(self, messages):
        try:
            self.keys.put_nowait(messages)
        except queue.Full:
            # Announced messages wait for the delivery pass; written ones, unrecorded, go out again after their claim.
            log.warning("%d messages not announced or recorded (delivery is behind)", len(messages))

    def run(self):
        period = resonate_settings.DELIVERY_PASS_MS / 1000 if self.embedded else float("inf")
        next_pass = time.monotonic() if self.embedded else float("inf")
        while not self.stopping():
            wake = min(next_pass, min(self.rechecks.values(), default=float("inf")))
            try:
                keys = self.keys.get(timeout=min(max(0.0, wake - time.monotonic()), self.fresh_pause_in(), 3600))
            except queue.Empty:
                keys = []
            while 0 < len(keys) < BATCH:  # take what else was announced meanwhile, in one go
                try:
                    keys = keys + self.keys.get_nowait()
                except queue.Empty:
                    break
            keys = self.linger(keys)
            try:
                close_old_connections()
                if written := [item for item in keys if isinstance(item, Written)]:
                    self.record_written(written)  # even while paused: the messages have gone out
                    keys = [item for item in keys if not isinstance(item, Written)]
                joined = self.joins_waiting | {item.group for item in keys if isinstance(item, Joined)}
                keys = [item for item in keys if not isinstance(item, Joined)] if joined else keys
                if self.paused():  # until the next pass or announcement: going round at once spun a core while paused
                    self.joins_waiting = joined  # heard once: a message waiting for one goes when delivery resumes
                    next_pass = time.monotonic() + period
                    continue
                self.joins_waiting = set()
                if self.make_due_on_join(joined) and self.embedded:
                    next_pass = time.monotonic()  # the pass below sends them
                if keys:
                    self.deliver_announced(keys)
                if time.monotonic() >= next_pass:  # even while announcements keep coming
                    deliver_due()
                    next_pass = time.monotonic() + period
            except Exception:
                log_failure(log, "delivery failed; the delivery pass will try again")
        connections.close_all()  # this thread's own

    def make_due_on_join(self, joined):
        """Make due what found no stream of the groups that streams have just joined, and of those whose second look
        (JOIN_RECHECK_S) has come; in production, send it (the embedded pass does, in batches its writer can take).
        How many messages were made due."""
        now = time.monotonic()
        rechecked = {group for group, at in self.rechecks.items() if at <= now}
        for group in rechecked:
            del self.rechecks[group]
        if self.rechecks_joins:
            self.rechecks.update(dict.fromkeys(joined, now + self.JOIN_RECHECK_S))
        groups = joined | rechecked
        if not groups:
            return 0
        try:
            due = due_on_join(sorted(groups), now_ms())
        except Exception:  # the database away: looked at again JOIN_RECHECK_S later
            self.rechecks.update(dict.fromkeys(groups, now + self.JOIN_RECHECK_S))
            raise
        if not self.embedded:
            for start in range(0, len(due), PASS_BATCH):
                chunk = due[start : start + PASS_BATCH]
                deliver(chunk, limit=len(chunk), only=Transport.POLL)
        return len(due)

    def hand_over(self, announced):
        """On the thread that committed them: hand the messages bound for a stream of this process to it at once, and
        return the others, for this thread (wake). Only poll:// messages claimed as they were written, with their
        claim still held, and only while the deliverer has seen delivery unpaused within PAUSE_TRUSTED_S.

        The stream is chosen as the deliverer would choose it, among the members of its group as last read
        (hub().take_here: no round trip). A message handed over is as one the deliverer found taken: nothing is
        recorded for it until its stream has written it (record_written). What this saves is the deliverer thread's
        wake-up and its contention with the request thread for the interpreter, on the path from a commit to its
        event, which is most of a workflow step's own delivery."""
        if not self.unpaused_lately():
            return announced
        now = now_ms()
        mine = [
            message
            for message in announced
            if claimed_on_write(message) and still_held(message, now) and parse_poll_address(message.address)
        ]
        if not mine:
            return announced
        server_url = resonate_settings.SERVER_URL
        taken = hub().take_here([(m.address, m.body(server_url), identity(m)) for m in mine])
        handed = [message for message, took in zip(mine, taken, strict=True) if took]
        if not handed:
            return announced
        messages_claimed(handed)
        if telemetry.tracer is not None:  # in the trace of the request that wrote them
            attributes = {"resonate.messages": len(handed), "resonate.transport": "stream"}
            with telemetry.span("resonate.deliver", **attributes) as current:
                telemetry.delivered(current, handed, [(Outcome.TAKEN, "")] * len(handed))
        gone = {id(message) for message in handed}
        return [message for message in announced if id(message) not in gone]

    def linger(self, items):
        """Receipts alone (no message to send) wait up to RECEIPTS_LINGER_S for more, to be recorded in one statement:
        a workflow step writes two messages, and each receipt's statement came as its worker sent its next request.
        Anything else that arrives meanwhile ends the wait. A receipt is only bookkeeping: its message has gone out,
        and one never recorded goes out again once its claim lapses (seconds, not milliseconds)."""
        until = time.monotonic() + self.RECEIPTS_LINGER_S
        while items and len(items) < BATCH and all(isinstance(item, Written) for item in items):
            left = until - time.monotonic()
            if left <= 0 or self.stopping():
                break
            try:
                items = items + self.keys.get(timeout=left)
            except queue.Empty:
                break
        return items

    def unpaused_lately(self):
        """Whether this thread has seen delivery unpaused within PAUSE_TRUSTED_S: what another thread may act on
        without asking the database (hand_over, nobody_listens)."""
        now = time.monotonic()
        self.asked_at = now
        at, paused = self.pause_read
        return not paused and now - at <= self.PAUSE_TRUSTED_S

    def fresh_pause_in(self):
        """Seconds until this thread reads the pause again by itself (run): while other threads ask about it, before
        their trust in its last read lapses. Every message written in the gap would come to this thread to be
        recorded, a statement and a wake-up (at 1,000 creates a second, one batch every 100 ms). Not while asked
        no more, nor after a read that failed (the database away: the next batch tries again)."""
        now = time.monotonic()
        at = self.pause_read[0]
        if now - self.asked_at > self.ASKED_S or at < self.pause_tried:
            return float("inf")
        return max(0.0, at + self.PAUSE_REREAD_S - now)

    def paused(self):
        at, paused = self.pause_read
        if (now := time.monotonic()) - at > self.PAUSE_REREAD_S:
            self.pause_tried = now
            try:
                paused = Pause.is_paused()
            except (OperationalError, InterfaceError):
                # This thread's kept connection died (the database restarted, a proxy cut it): this is the
                # batch's first statement, so ask again on a new one rather than drop the batch, whose
                # messages, claimed as they were written, would wait out their lease.
                connections.close_all()
                paused = Pause.is_paused()
            self.pause_read = (time.monotonic(), paused)
        return self.pause_read[1]

    def record_written(self, written):
        try:
            record_written_now(written)
        except Exception as error:  # the announcements of the batch still go out
            log.warning("could not record %d messages delivered (%r); they go out again", len(written), error)

    def deliver_announced(self, announced):
        """Messages claimed when they were written are sent as they are; the others (keys, or messages this
        process does not send itself) are claimed first, or handed to Celery."""
        now, claimed, keys = now_ms(), [], []
        for message in announced:
            if claimed_on_write(message) and still_held(message, now):
                claimed.append(message)
            else:
                keys.append(message.key if isinstance(message, Message) else message)
        send_claimed(claimed)
        if not keys:
            return
        if self.embedded:
            deliver(keys, limit=len(keys))
            return
        sent = deliver(keys, limit=len(keys), only=Transport.POLL)
        if rest := sorted(set(keys) - set(sent)):  # pushes, or messages another deliverer took
            self.handoff.put(rest)


def claimed_on_write(announced):
    """Whether an announcement is a message this process claimed as it wrote it (outbox.messages.message)."""
    return isinstance(announced, Message) and announced.attempts > 0


class Handoff(threading.Thread):
    """Production mode: hands a deliverer's HTTP pushes to Celery workers, off the deliverer's thread, so a
    stalled broker delays no poll:// message. With the broker away, Beat's pass sends them later."""

    def __init__(self):
        super().__init__(name="resonate-handoff", daemon=True)
        self.keys = queue.Queue(Deliverer.WAITING)

    def put(self, keys):
        try:
            self.keys.put_nowait(keys)
        except queue.Full:
            log.warning("%d messages not handed to Celery (the broker is slow); the delivery pass will", len(keys))

    def run(self):
        from outbox.tasks import deliver as deliver_task

        while True:
            keys = self.keys.get()
            try:
                deliver_task.delay(keys)
            except Exception as error:
                log.warning("could not hand %d messages to Celery (%s); the delivery pass will", len(keys), error)


def hears_every_join():
    """Whether every stream's connecting makes its group's waiting messages due (outbox.delivery.joins_heard): in
    production mode, where each server process's deliverer does so for its own streams (started by the first, see
    heard_join), and in the embedded mode while this process's deliverer runs."""
    if resonate_settings.BACKGROUND == "celery":
        return True
    pid, running = _deliverer
    return pid == _this_process and running.embedded and running.is_alive() and not running.stopped.is_set()


def heard_join(group):
    """A stream of `group` has connected to this process (outbox.hub, on its event loop): told to this process's
    deliverer, started by it in production mode. Nothing hears it where no deliverer runs (tests, commands)."""
    running = deliverer()
    if running is not None:
        running.joined(group)


hears_joins(hears_every_join)
joins_go_to(heard_join)

_deliverer = (None, None)  # (process id, Deliverer): a forked process (a Celery worker) starts its own
_deliverer_lock = threading.Lock()
_this_process = os.getpid()  # read once per process (every request asks for the deliverer; a getpid is a system call)


def _forked():
    global _this_process
    _this_process = os.getpid()


os.register_at_fork(after_in_child=_forked)


def deliverer():
    """This process's deliverer: the embedded one serve started, or in production one started on first use."""
    global _deliverer
    pid, running = _deliverer
    if pid == _this_process:  # started, in this process: no lock needed to read it
        return running
    with _deliverer_lock:
        pid, running = _deliverer
        if pid == _this_process:
            return running
        if resonate_settings.BACKGROUND != "celery":
            return None
        running = Deliverer(embedded=False)
        running.start()
        return running
