"""Who delivers a committed message: a Celery worker (production) or this process's deliverer thread (embedded)."""

import logging
import os
import queue
import threading
import time

from django.db import close_old_connections

from outbox.delivery import deliver, deliver_due
from outbox.delivery import requeue as requeue_messages
from outbox.models import Pause
from promises.transactions import after_commit, run_atomically
from resonate_site.clock import now_ms
from resonate_site.conf import resonate_settings

log = logging.getLogger(__name__)

_deliverer = None  # the embedded Deliverer, in the process that runs one


def announce(*keys):
    """Deliver the messages with these keys once the transaction that wrote them commits.

    The keys of one operation go out together: one notice per commit.
    """
    after_commit(notify, *keys)


def notify(keys):
    """Have these committed messages delivered now, from another thread: a request never waits on delivery or
    on the broker. Whatever this misses, the periodic delivery pass sends."""
    if _deliverer is not None:
        _deliverer.wake(keys)
    elif resonate_settings.BACKGROUND == "celery":
        announcer().wake(keys)
    # Otherwise nobody delivers in this process (tests, commands): the message waits in the outbox.


class Announcer(threading.Thread):
    """Production mode: hands the keys committed in this process to Celery workers, a task per batch.

    Keys announced while a publish is under way go out together in the next one. With the broker down
    or stalled, publishing fails after its short timeouts and the keys are left to Beat's delivery pass.
    """

    WAITING = 10_000  # batches of keys held while the broker is slow; beyond that, the delivery pass has them

    def __init__(self):
        super().__init__(name="resonate-announcer", daemon=True)
        self.keys = queue.Queue(self.WAITING)

    def wake(self, keys):
        try:
            self.keys.put_nowait(keys)
        except queue.Full:
            log.warning("%d messages not announced (the broker is slow); the delivery pass will send them", len(keys))

    def run(self):
        from outbox.delivery import BATCH
        from outbox.tasks import deliver as deliver_task

        while True:
            keys = self.keys.get()
            while len(keys) < BATCH:
                try:
                    keys = keys + self.keys.get_nowait()
                except queue.Empty:
                    break
            for start in range(0, len(keys), BATCH):
                try:
                    deliver_task.delay(keys[start : start + BATCH])
                except Exception as error:
                    log.warning(
                        "could not announce %d messages (%s); the delivery pass will send them", len(keys), error
                    )


_announcer = (None, None)  # (process id, Announcer): a forked process starts its own
_announcer_lock = threading.Lock()


def announcer():
    global _announcer
    with _announcer_lock:
        pid, running = _announcer
        if pid != os.getpid():
            running = Announcer()
            running.start()
            _announcer = (os.getpid(), running)
        return running


def requeue(identities, delay_ms=0):
    """Put messages that reached a stream but not its client back in the outbox: due at once and announced, or
    after `delay_ms` for the periodic pass (a stream that is full). Runs on a thread of an event loop's executor,
    which the loop waits for when it closes; retried while the database is away, for about a minute."""
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


class Deliverer(threading.Thread):
    """Embedded mode: delivers announced messages at once, and everything due every DELIVERY_PASS_MS."""

    def __init__(self, stopping):
        super().__init__(name="resonate-deliverer", daemon=True)
        self.stopping = stopping
        self.keys = queue.SimpleQueue()

    def start(self):
        global _deliverer
        _deliverer = self
        super().start()

    def wake(self, keys):
        self.keys.put(keys)

    def run(self):
        period = resonate_settings.DELIVERY_PASS_MS / 1000
        next_pass = time.monotonic()
        while not self.stopping():
            try:
                keys = self.keys.get(timeout=max(0.0, next_pass - time.monotonic()))
            except queue.Empty:
                keys = []
            try:
                close_old_connections()
                if Pause.is_paused():
                    continue
                if keys:
                    self.deliver_announced(keys)
                if time.monotonic() >= next_pass:  # even while announcements keep coming
                    deliver_due()
                    next_pass = time.monotonic() + period
            except Exception:
                log.exception("delivery failed; trying again")

    def deliver_announced(self, keys):
        while True:  # take what else was announced meanwhile, in one go
            try:
                keys = keys + self.keys.get_nowait()
            except queue.Empty:
                break
        deliver(keys, limit=len(keys))
