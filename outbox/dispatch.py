"""Who delivers a committed message: a Celery worker (production) or this process's deliverer thread (embedded)."""

import logging
import queue
import threading
import time

from django.db import close_old_connections, transaction

from outbox.delivery import deliver, deliver_due
from outbox.models import Pause
from resonate_site.conf import resonate_settings

log = logging.getLogger(__name__)

_deliverer = None  # the embedded Deliverer, in the process that runs one


def announce(key):
    """Deliver the message with this key once the transaction that wrote it commits.

    The keys of one transaction go out together: one notification (one Celery task) per commit.
    """
    connection = transaction.get_connection()
    pending = getattr(connection, "_announced", None)
    if pending is None or not any(callback is pending for _, callback, _ in connection.run_on_commit):
        pending = Announcement()  # the first of this transaction (or the last one's callback was rolled back)
        connection._announced = pending
        transaction.on_commit(pending, robust=True)
    pending.keys.append(key)


class Announcement:
    """The keys a transaction wrote; called on commit, it notifies the deliverer of all of them."""

    def __init__(self):
        self.keys = []

    def __call__(self):
        notify(self.keys)


def notify(keys):
    if resonate_settings.BACKGROUND == "celery":
        from outbox.tasks import deliver as deliver_task

        deliver_task.delay(keys)
    elif _deliverer is not None:
        _deliverer.wake(keys)
    # Otherwise nobody delivers in this process (tests, commands): the message waits in the outbox.


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
