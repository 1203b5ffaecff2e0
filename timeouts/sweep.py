"""sweep(now): every due timeout transition, each at most once, in the order of decision D15."""

import time

from floor.transactions import run_atomically
from outbox.models import Pause
from promises.engine import on_promise_timeout
from schedules.engine import on_schedule_timeout
from tasks.engine import on_task_lease_timeout, on_task_retry_timeout
from timeouts.due import CATEGORIES, due


def each(transition):
    """A transition of one entry, applied to a batch of entries in order."""

    def all(ids, now):
        for id in ids:
            transition(id, now)

    return all


# The transition of each category of timeouts/due.py (which gives the firing order). Promise timeouts and task
# retries fire a batch at a time (on_promise_timeout settles them together when that gives the same result).
TRANSITIONS = {
    "promise": on_promise_timeout,
    "retry": on_task_retry_timeout,
    "lease": each(on_task_lease_timeout),
    "schedule": each(on_schedule_timeout),
}


def sweep(now, batch=None, clock=None, until=None):
    """Fire every timeout due at `now`, each at most once, until nothing due is left (decision D15).

    Without `batch` (debug.tick) everything runs in the caller's transaction. With `batch` (the
    background), each batch is its own transaction and claims its entries with SKIP LOCKED, so
    several sweepers share the work; every transition re-checks its guard, so nothing fires twice. Each batch
    reads debug.start's pause first (Pause.held_paused): none fires once debug.start has answered.

    A promise timeout cannot make another timeout due, nor can a retry or a lease (the retry timeout is
    at least 1 ms); only a schedule's catch-up can (its promises may be born with due timeouts). So one
    pass over the categories in order, repeated while schedules create work, fires entries in the order
    D15 gives. A background sweep passes a `clock` instead of living at one instant: each pass then fires
    what is due at its own start, category after category, and passes repeat while they find work (until
    `until`, a time.monotonic() deadline). So a category that keeps getting new entries (a thousand timers
    a second) cannot hold back the next one's. Returns how many transitions ran.
    """
    total, fired = 0, set()
    while True:
        at = clock() if clock else now
        if clock:
            fired = set()  # a new instant: what a transition re-armed for it may be due again
        fired_in_pass = 0
        for category in CATEGORIES:
            while fired_now := fire(category.name, TRANSITIONS[category.name], at, batch, fired):
                fired.update((category.name, id) for id in fired_now)
                fired_in_pass += len(fired_now)
                if batch is None:
                    break
        total += fired_in_pass
        if not fired_in_pass or (until is not None and time.monotonic() >= until):
            return total


def fire(category, transition, now, batch, fired):
    """Run the transition of due entries not yet fired in this sweep; the ids fired (committed, with `batch`)."""

    def run():
        if batch is not None and Pause.held_paused():  # debug.start came during the sweep: no batch after it
            return []
        ids = [id for id in due(category, now, limit=batch, claim=batch is not None) if (category, id) not in fired]
        if ids:
            transition(ids, now)
        return ids

    return run() if batch is None else run_atomically(run)
