"""The schedule timeout with its catch-up, and sweep(now): every due timeout transition, in order."""

import time

from django.db import connection

from floor import rows
from floor.counters import schedule_promises_fired
from floor.protocol import later
from floor.transactions import run_atomically
from promises.engine import create, on_promise_timeout
from promises.models import Promise
from schedules.cron import NEVER, expand, next_cron
from schedules.models import Schedule
from tasks.engine import on_task_lease_timeout, on_task_retry_timeout
from tasks.models import Task, TimeoutKind


def catch_up(schedule, now):
    """Create the promise of every occurrence up to `now`, each as if created at its own cron time."""
    fired = 0
    while schedule.next_run_at <= now and schedule.next_run_at != NEVER:
        cron_time = schedule.next_run_at
        create(  # as promise.create would at the cron time
            expand(schedule.promise_id, schedule.id, cron_time),
            schedule.promise_param,
            schedule.promise_tags,
            later(cron_time, schedule.promise_timeout),
            cron_time,
        )
        schedule.last_run_at = cron_time
        schedule.next_run_at = next_cron(schedule.cron, cron_time)
        fired += 1
    schedule_promises_fired(fired)


def on_schedule_timeout(schedule_id, now):
    """A schedule's next run came due (02-timeouts.lean): catch up, and wait for the next run."""
    schedule = Schedule.objects.locked(schedule_id)
    if schedule is None:
        return
    catch_up(schedule, now)
    schedule.save(update_fields=["last_run_at", "next_run_at"])


def _due(table, deadline, where, lock_of=""):
    """SQL for due entries by (deadline, id); with `claim`, locked and skipping rows others hold."""
    sql = f"SELECT e.id FROM {table} WHERE {where} AND {deadline} <= %s ORDER BY {deadline}, e.id"

    def due(now, limit=None, claim=False):
        query = sql + (" LIMIT %s" if limit else "")
        if claim and connection.features.has_select_for_update_skip_locked:
            query += f" FOR UPDATE{lock_of} SKIP LOCKED"
        return [id for (id,) in rows.query(query, [now, limit] if limit else [now])]

    return due


PROMISES = rows.quote(Promise._meta.db_table)
TASKS = f"{rows.quote(Task._meta.db_table)} e JOIN {PROMISES} p ON p.id = e.id"


def each(transition):
    """A transition of one entry, applied to a batch of entries in order."""

    def all(ids, now):
        for id in ids:
            transition(id, now)

    return all


# Firing order (decision D15): promise timeouts, task retries, task leases, schedules; each by deadline, id.
# A task's timeout is claimed by locking its promise row, the lock that guards the task. Promise timeouts
# and task retries fire a batch at a time (on_promise_timeout settles them together when that gives the same result).
RETRY, LEASE = f"e.timeout_kind = {TimeoutKind.RETRY}", f"e.timeout_kind = {TimeoutKind.LEASE}"
TRANSITIONS = (
    ("promise", _due(f"{PROMISES} e", "e.timeout_at", "e.timeout_armed"), on_promise_timeout),
    ("retry", _due(TASKS, "e.timeout_at", RETRY, " OF p"), on_task_retry_timeout),
    ("lease", _due(TASKS, "e.timeout_at", LEASE, " OF p"), each(on_task_lease_timeout)),
    ("schedule", _due(f"{rows.quote(Schedule._meta.db_table)} e", "e.next_run_at", "TRUE"), each(on_schedule_timeout)),
)


def sweep(now, batch=None, clock=None, until=None):
    """Fire every timeout due at `now`, each at most once, until nothing due is left (decision D15).

    Without `batch` (debug.tick) everything runs in the caller's transaction. With `batch` (the
    background), each batch is its own transaction and claims its entries with SKIP LOCKED, so
    several sweepers share the work; every transition re-checks its guard, so nothing fires twice.

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
        for category, due, transition in TRANSITIONS:
            while fired_now := fire(category, due, transition, at, batch, fired):
                fired.update((category, id) for id in fired_now)
                fired_in_pass += len(fired_now)
                if batch is None:
                    break
        total += fired_in_pass
        if not fired_in_pass or (until is not None and time.monotonic() >= until):
            return total


def fire(category, due, transition, now, batch, fired):
    """Run the transition of due entries not yet fired in this sweep; the ids fired (committed, with `batch`)."""

    def run():
        ids = [id for id in due(now, limit=batch, claim=batch is not None) if (category, id) not in fired]
        if ids:
            transition(ids, now)
        return ids

    return run() if batch is None else run_atomically(run)
