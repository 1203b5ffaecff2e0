"""manage.py invariants: the invariants of the stored protocol state, row by row (Django's `check` is left alone).

It reads every row, so it is run on purpose (after an incident, by the fault suite), not on every deploy.

Each invariant is one sentence and one predicate over a row (with the states of the rows it refers to),
listed per table below. A row on which a predicate fails, or cannot even be evaluated (malformed
JSON), violates that invariant. Tables are read in id order, a batch at a time.
"""

from collections import defaultdict
from typing import NamedTuple

from django.core.management.base import CommandError
from django.db import DatabaseError, connection
from django.db.models import Exists, OuterRef, Subquery

from floor.protocol import BRANCH, TARGET
from outbox.models import DeliveryState, Message, MessageKind, message_key
from promises.models import Callback, Listener, Promise, PromiseState, is_external, is_timer
from resonate_site.management.cli import ResonateCommand, positive
from schedules.cron import cron_error
from schedules.models import Schedule
from tasks.models import Task, TaskState, TimeoutKind

PENDING, FULFILLED, ACQUIRED = PromiseState.PENDING, TaskState.FULFILLED, TaskState.ACQUIRED
TIMEOUT_OF_STATE = {TaskState.PENDING: TimeoutKind.RETRY, TaskState.ACQUIRED: TimeoutKind.LEASE}
SHOWN = 20  # rows listed per violated invariant


def state_of_promise(column):
    """The state of the promise whose id is in `column`: None when there is no such promise."""
    return Subquery(Promise.objects.filter(pk=OuterRef(column)).values("state")[:1])


def state_of_task(column):
    return Subquery(Task.objects.filter(pk=OuterRef(column)).values("state")[:1])


def settled(state):
    return state is not None and state != PENDING


PROMISE_INVARIANTS = [
    ("its state is a promise state", lambda p: p["state"] in PromiseState.values),
    (
        "its tags are an object of strings",
        lambda p: isinstance(p["tags"], dict) and all(isinstance(v, str) for v in p["tags"].values()),
    ),
    ("it has settledAt exactly when it is settled", lambda p: (p["settled_at"] is not None) == settled(p["state"])),
    (
        "a timed-out promise settled at its deadline",
        lambda p: p["state"] != "rejected_timedout" or p["settled_at"] == p["timeout_at"],
    ),
    ("only a pending promise has an armed timeout", lambda p: not p["timeout_armed"] or p["state"] == PENDING),
    (
        "a pending external promise has an armed timeout",
        lambda p: p["state"] != PENDING or not is_external(p["tags"]) or p["timeout_armed"],
    ),
    (
        "a pending promise with a task has an armed timeout",
        lambda p: p["state"] != PENDING or p["task_state"] is None or p["timeout_armed"],
    ),
    ("a targeted promise has a task", lambda p: TARGET not in p["tags"] or p["task_state"] is not None),
    (
        "its timer and branch columns copy its tags",
        lambda p: p["timer"] == is_timer(p["tags"]) and p["branch"] == p["tags"].get(BRANCH),
    ),
]

TASK_INVARIANTS = [
    ("its state is a task state", lambda t: t["state"] in TaskState.values),
    ("it has its promise", lambda t: t["promise_state"] is not None),
    ("a fulfilled task's promise is settled", lambda t: t["state"] != FULFILLED or t["promise_state"] != PENDING),
    (
        "the task of a settled promise is fulfilled",
        lambda t: not settled(t["promise_state"]) or t["state"] == FULFILLED,
    ),
    (
        "it has a lease (pid and ttl) exactly when it is acquired",
        lambda t: (
            t["pid"] is not None and t["ttl"] is not None
            if t["state"] == ACQUIRED
            else t["pid"] is None and t["ttl"] is None
        ),
    ),
    (
        "it has one timeout, the one its state needs (retry if pending, lease if acquired), or none",
        lambda t: (
            t["timeout_kind"] == TIMEOUT_OF_STATE.get(t["state"])
            and (t["timeout_at"] is None) == (t["timeout_kind"] is None)
        ),
    ),
    ("its version is not negative", lambda t: t["version"] >= 0),
    (
        "a fulfilled task has no resumes",
        lambda t: isinstance(t["resumes"], list) and (t["state"] != FULFILLED or not t["resumes"]),
    ),
]

CALLBACK_INVARIANTS = [
    ("both its promises exist", lambda c: c["awaited_state"] is not None and c["awaiter_state"] is not None),
    ("its awaited promise is pending (no callbacks on settled promises)", lambda c: not settled(c["awaited_state"])),
    ("its awaiter is pending (the settlement scrub)", lambda c: not settled(c["awaiter_state"])),
    ("its awaiter has a task to resume", lambda c: c["awaiter_state"] is None or c["awaiter_task_state"] is not None),
]

LISTENER_INVARIANTS = [
    ("its promise exists", lambda listener: listener["promise_state"] is not None),
    (
        "its promise is pending (no listeners on settled promises)",
        lambda listener: not settled(listener["promise_state"]),
    ),
]

SCHEDULE_INVARIANTS = [
    ("its cron is valid", lambda s: cron_error(s["cron"]) is None),
    ("its promise timeout is not negative", lambda s: s["promise_timeout"] >= 0),
    ("its next run is after its last", lambda s: s["last_run_at"] is None or s["next_run_at"] > s["last_run_at"]),
]

MESSAGE_INVARIANTS = [
    (
        "its key is made of its kind, subject and address",
        lambda m: m["key"] == message_key(m["kind"], m["subject"], m["address"]),
    ),
    (
        "its kind and delivery state are known",
        lambda m: m["kind"] in MessageKind.values and m["state"] in DeliveryState.values,
    ),
    ("an execute's task exists", lambda m: m["kind"] != MessageKind.EXECUTE or m["task_exists"]),
    ("an unblock's promise exists", lambda m: m["kind"] != MessageKind.UNBLOCK or m["promise_exists"]),
]


class Table(NamedTuple):
    name: str
    rows: object  # the queryset of rows as dicts, with the states of the rows they refer to
    key: str  # the column rows are read in order of
    label: object  # row -> how the report names it
    invariants: list


TABLES = [
    Table(
        "promises",
        Promise.objects.values(
            "id",
            "state",
            "settled_at",
            "timeout_at",
            "timeout_armed",
            "tags",
            "timer",
            "branch",
            task_state=state_of_task("id"),
        ),
        "id",
        lambda p: f"promise {p['id']}",
        PROMISE_INVARIANTS,
    ),
    Table(
        "tasks",
        Task.objects.values(
            "promise_id",
            "state",
            "version",
            "pid",
            "ttl",
            "timeout_kind",
            "timeout_at",
            "resumes",
            promise_state=state_of_promise("promise_id"),
        ),
        "promise_id",
        lambda t: f"task {t['promise_id']}",
        TASK_INVARIANTS,
    ),
    Table(
        "callbacks",
        Callback.objects.values(
            "id",
            "awaited_id",
            "awaiter_id",
            awaited_state=state_of_promise("awaited_id"),
            awaiter_state=state_of_promise("awaiter_id"),
            awaiter_task_state=state_of_task("awaiter_id"),
        ),
        "id",
        lambda c: f"callback {c['awaiter_id']} awaits {c['awaited_id']}",
        CALLBACK_INVARIANTS,
    ),
    Table(
        "listeners",
        Listener.objects.values("id", "promise_id", "address", promise_state=state_of_promise("promise_id")),
        "id",
        lambda listener: f"listener {listener['address']} on {listener['promise_id']}",
        LISTENER_INVARIANTS,
    ),
    Table(
        "schedules",
        Schedule.objects.values("id", "cron", "promise_timeout", "next_run_at", "last_run_at"),
        "id",
        lambda s: f"schedule {s['id']}",
        SCHEDULE_INVARIANTS,
    ),
    Table(
        "messages",
        Message.objects.values(
            "id",
            "key",
            "kind",
            "subject",
            "address",
            "state",
            task_exists=Exists(Task.objects.filter(pk=OuterRef("subject"))),
            promise_exists=Exists(Promise.objects.filter(pk=OuterRef("subject"))),
        ),
        "id",
        lambda m: f"message {m['key']}",
        MESSAGE_INVARIANTS,
    ),
]


def holds(invariant, row):
    try:
        return bool(invariant(row))
    except (KeyError, TypeError, AttributeError):  # malformed JSON in the row
        return False


def batches(table, size):
    """The table's rows, `size` at a time, in key order."""
    rows, last = table.rows.order_by(table.key), None
    while batch := list((rows if last is None else rows.filter(**{f"{table.key}__gt": last}))[:size]):
        yield batch
        last = batch[-1][table.key]


def migrated():
    tables = set(connection.introspection.table_names())
    return all(table.rows.model._meta.db_table in tables for table in TABLES)


class Command(ResonateCommand):
    help = "Check the invariants of the protocol state in the database, row by row; fails if any row violates one."

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=positive, default=5000, help="rows read per query (default 5000)")
        self.add_output_arguments(parser, progress=True)

    def handle(self, **options):
        try:
            ready = migrated()
        except DatabaseError as error:
            raise CommandError(f"The database cannot be reached: {error}") from error
        if not ready:
            raise CommandError("The database is not migrated (manage.py migrate).")
        self.check_invariants(options)

    def check_invariants(self, options):
        violations, checked = defaultdict(lambda: [0, []]), 0  # (table, invariant) -> [rows, the first SHOWN]
        total = sum(table.rows.count() for table in TABLES)
        with self.progress(options, total=total, desc="invariants", unit=" rows") as bar:
            for table in TABLES:
                for batch in batches(table, options["batch"]):
                    for row in batch:
                        for sentence, invariant in table.invariants:
                            if not holds(invariant, row):
                                found = violations[(table.name, sentence)]
                                found[0] += 1
                                if found[0] <= SHOWN:
                                    found[1].append(table.label(row))
                    checked += len(batch)
                    bar.update(len(batch))
        self.report(violations, checked, options["json"])
        if violations:
            count = sum(n for n, _ in violations.values())
            raise CommandError(f"{count} row(s) violate {len(violations)} invariant(s) of the protocol state.")

    def report(self, violations, checked, json):
        if json:
            found = [
                {"table": table, "invariant": sentence, "count": n, "rows": rows}
                for (table, sentence), (n, rows) in violations.items()
            ]
            self.write_json({"checked": checked, "violations": found})
            return
        if not violations:
            self.stdout.write(f"Invariants hold over {checked} rows.")
        for (table, sentence), (n, rows) in violations.items():
            shown = f"the first {SHOWN}" if n > SHOWN else "listed"
            self.stdout.write(self.style.ERROR(f"{table}: {sentence}; violated by {n} ({shown}):"))
            self.write_lines(f"  {row}" for row in rows)
