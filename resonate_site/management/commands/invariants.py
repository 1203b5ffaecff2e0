"""manage.py invariants: the invariants of the stored protocol state, row by row (Django's `check` is left alone).

It reads every row, so it is run on purpose (after an incident, by the fault suite and the live tests), not on
every deploy.

The invariants are the single-state properties of the specification's catalogue (`well_formed_*` and
`consistent_*` in spec/02-abstract/properties.lean, its later history) that hold for this server (the
specification at 83d64c3 plus PROTOCOL.md's decisions), each under the catalogue's name, and this server's own
(the timeouts and the settlement of 83d64c3, how rows are stored). Each is one sentence and one predicate over a
row, with what the rows it refers to hold, read in the same query; a row on which a predicate fails, or cannot
even be evaluated (malformed JSON), violates it. Tables are read in id order, a batch at a time. `--help` lists
them, with the catalogue's properties the schema enforces and those 83d64c3 breaks on purpose.

The catalogue's outbox only ever grows (setMessage replaces a message by its key, nothing removes one), as this
outbox does: a delivered, dropped or failed message is still the catalogue's outbox entry, with bookkeeping the
catalogue does not have, and its invariants hold for every row whatever its delivery state (tasks and promises
are never removed but by prune, which removes their messages with them; versions only grow; tags never change;
a settled promise stays settled).
"""

from argparse import RawDescriptionHelpFormatter
from collections import defaultdict
from typing import NamedTuple

from django.core.management.base import CommandError, DjangoHelpFormatter
from django.db import DatabaseError, connection
from django.db.models import Case, F, JSONField, OuterRef, Q, Subquery, When
from django.db.models.fields.json import KT

from floor.clock import now_ms
from floor.protocol import BRANCH, TARGET
from outbox.models import DeliveryState, Message, MessageKind, message_key
from promises.models import Callback, Listener, Promise, PromiseState, is_external, is_timer, timeout_state
from resonate_site.management.cli import ResonateCommand, moment, positive
from resonate_site.protocol.fields import address_error
from schedules.cron import cron_error
from schedules.models import Schedule
from tasks.models import Task, TaskState, TimeoutKind

PENDING, REJECTED_TIMEDOUT = PromiseState.PENDING, PromiseState.REJECTED_TIMEDOUT
ACQUIRED, SUSPENDED, HALTED, FULFILLED = TaskState.ACQUIRED, TaskState.SUSPENDED, TaskState.HALTED, TaskState.FULFILLED
EXECUTE, UNBLOCK = MessageKind.EXECUTE, MessageKind.UNBLOCK
SHOWN = 20  # rows listed per violated invariant


class Invariant(NamedTuple):
    name: str  # the catalogue's identifier, or "" for this server's own
    sentence: str
    holds: object  # (row, now) -> bool; `_now` where the clock is not consulted, as the catalogue writes it


def own(sentence, holds):
    """An invariant of this server's own, not in the catalogue."""
    return Invariant("", sentence, holds)


def state_of_promise(column):
    """The state of the promise whose id is in `column`: None when there is no such promise."""
    return Subquery(Promise.objects.filter(pk=OuterRef(column)).values("state")[:1])


def state_of_task(column):
    return Subquery(Task.objects.filter(pk=OuterRef(column)).values("state")[:1])


def settled(state):
    return state is not None and state != PENDING


def no_value(value):
    """The catalogue's `value.data.isNone && value.headers.isEmpty`."""
    return isinstance(value, dict) and value.get("data") is None and not value.get("headers")


def address_valid(address):
    """The catalogue's addressValid (spec/01-protocol/validation.lean), as written: the scheme's case counts."""
    return address.startswith(("http://", "https://")) or (address.startswith("poll://") and "@" in address)


def deliverable(address):
    """The catalogue's addressValid, in the form decision D3's door gives it (poll://uni|any@group[/id] or
    http(s)://host)."""
    return address_valid(address) and address_error(address) is None


def settled_at_deadline(p):
    return p["settled_at"] is not None and p["settled_at"] == p["timeout_at"]


def cleared(t):
    """No lease (pid, ttl, expiresAt) and no retry: no timeout at all."""
    return t["pid"] is None and t["ttl"] is None and t["timeout_kind"] is None


def has_timeout(t, kind):
    return t["timeout_kind"] == kind and t["timeout_at"] is not None


PROMISE_INVARIANTS = [
    own("its state is a promise state", lambda p, _now: p["state"] in PromiseState.values),
    own(
        "its tags are an object of strings",
        lambda p, _now: isinstance(p["tags"], dict) and all(isinstance(v, str) for v in p["tags"].values()),
    ),
    Invariant(
        "well_formed_promise_created_at_lte_timeout_at",
        "it was created at or before its deadline",
        lambda p, _now: p["created_at"] <= p["timeout_at"],
    ),
    Invariant(
        "well_formed_promise_pending_created_before_deadline",
        "a pending promise was created before its deadline",
        lambda p, _now: p["state"] != PENDING or p["created_at"] < p["timeout_at"],
    ),
    Invariant(
        "well_formed_promise_settled_at_lte_timeout_at",
        "it was settled at or before its deadline",
        lambda p, _now: p["settled_at"] is None or p["settled_at"] <= p["timeout_at"],
    ),
    Invariant(
        "well_formed_promise_created_at_lte_settled_at",
        "it was settled at or after its creation (the server's clock never runs backwards)",
        lambda p, _now: p["settled_at"] is None or p["created_at"] <= p["settled_at"],
    ),
    Invariant(
        "well_formed_promise_settled_at_iff_not_pending",
        "it has settledAt exactly when it is settled",
        lambda p, _now: (p["settled_at"] is not None) == settled(p["state"]),
    ),
    Invariant(
        "well_formed_promise_pending_has_no_value",
        "a pending promise has no value (no data, no headers)",
        lambda p, _now: p["state"] != PENDING or no_value(p["value_that_must_be_empty"]),
    ),
    Invariant(
        "well_formed_promise_deadline_verdict_matches_timer_tag",
        "a promise settled at its deadline is resolved if it is a timer, rejected_timedout otherwise",
        lambda p, _now: not settled_at_deadline(p) or p["state"] == timeout_state(p["tags"]),
    ),
    Invariant(
        "well_formed_promise_deadline_settlement_has_no_value",
        "a promise settled at its deadline has no value",
        lambda p, _now: not settled_at_deadline(p) or no_value(p["value_that_must_be_empty"]),
    ),
    Invariant(
        "well_formed_promise_timedout_is_server_owned",
        "a timed-out promise was settled at its deadline",
        lambda p, _now: p["state"] != REJECTED_TIMEDOUT or settled_at_deadline(p),
    ),
    Invariant(
        "well_formed_promise_created_at_lte_now",
        "it was created no later than now",
        lambda p, now: p["created_at"] <= now,
    ),
    Invariant(
        "well_formed_promise_settled_at_lte_now",
        "it was settled no later than now",
        lambda p, now: p["settled_at"] is None or p["settled_at"] <= now,
    ),
    Invariant(
        "consistent_task_iff_targeted_promise",
        "a targeted promise has a task (the promise half; 83d64c3 breaks the task half)",
        lambda p, _now: TARGET not in p["tags"] or p["task_state"] is not None,
    ),
    own("only a pending promise has an armed timeout", lambda p, _now: not p["timeout_armed"] or p["state"] == PENDING),
    own(
        "a pending external promise has an armed timeout",
        lambda p, _now: p["state"] != PENDING or not is_external(p["tags"]) or p["timeout_armed"],
    ),
    own(
        "a pending promise with a task has an armed timeout",
        lambda p, _now: p["state"] != PENDING or p["task_state"] is None or p["timeout_armed"],
    ),
    own(
        "its timer and branch columns copy its tags",
        lambda p, _now: p["timer"] == is_timer(p["tags"]) and p["branch"] == p["tags"].get(BRANCH),
    ),
]

TASK_INVARIANTS = [
    own("its state is a task state", lambda t, _now: t["state"] in TaskState.values),
    own("it has its promise", lambda t, _now: t["promise_state"] is not None),
    Invariant(
        "consistent_settled_task_promise_settled",
        "a fulfilled task's promise is settled",
        lambda t, _now: t["state"] != FULFILLED or t["promise_state"] != PENDING,
    ),
    Invariant(
        "consistent_settled_promise_has_fulfilled_task",
        "the task of a settled promise is fulfilled",
        lambda t, _now: not settled(t["promise_state"]) or t["state"] == FULFILLED,
    ),
    Invariant(
        "well_formed_task_acquired_iff_has_pid",
        "it has a pid exactly when it is acquired",
        lambda t, _now: (t["state"] == ACQUIRED) == (t["pid"] is not None),
    ),
    Invariant(
        "well_formed_task_acquired_iff_has_ttl",
        "it has a ttl exactly when it is acquired",
        lambda t, _now: (t["state"] == ACQUIRED) == (t["ttl"] is not None),
    ),
    Invariant(
        "well_formed_task_acquired_iff_has_expires_at",
        "it has a lease timeout (expiresAt) exactly when it is acquired",
        lambda t, _now: (t["state"] == ACQUIRED) == has_timeout(t, TimeoutKind.LEASE),
    ),
    Invariant(
        "well_formed_task_pending_iff_has_retry_at",
        "it has a retry timeout (retryAt) exactly when it is pending",
        lambda t, _now: (t["state"] == TaskState.PENDING) == has_timeout(t, TimeoutKind.RETRY),
    ),
    own(
        "its one timeout has both a kind and a time, or neither",
        lambda t, _now: (
            t["timeout_kind"] in (None, *TimeoutKind.values)
            and (t["timeout_kind"] is None) == (t["timeout_at"] is None)
        ),
    ),
    Invariant(
        "well_formed_task_fulfilled_is_cleared",
        "a fulfilled task has no lease, no timeout and no resumes",
        lambda t, _now: t["state"] != FULFILLED or (cleared(t) and t["resumes"] == []),
    ),
    Invariant(
        "well_formed_task_suspended_is_cleared",
        "a suspended task has no lease and no timeout",
        lambda t, _now: t["state"] != SUSPENDED or cleared(t),
    ),
    Invariant(
        "well_formed_task_halted_is_cleared",
        "a halted task has no lease and no timeout",
        lambda t, _now: t["state"] != HALTED or cleared(t),
    ),
    Invariant(
        "well_formed_task_suspended_has_no_resumes",
        "a suspended task has no resumes",
        lambda t, _now: t["state"] != SUSPENDED or t["resumes"] == [],
    ),
    Invariant(
        "well_formed_task_resumes_unique",
        "its resumes are a list of distinct promise ids",
        lambda t, _now: isinstance(t["resumes"], list) and len(set(t["resumes"])) == len(t["resumes"]),
    ),
    own("its version is not negative", lambda t, _now: t["version"] >= 0),
    Invariant(
        "well_formed_task_acquired_version_positive",
        "an acquired task's version is at least 1",
        lambda t, _now: t["state"] != ACQUIRED or t["version"] >= 1,
    ),
]

CALLBACK_INVARIANTS = [
    own("both its promises exist", lambda c, _now: c["awaited_state"] is not None and c["awaiter_state"] is not None),
    own(
        "its awaited promise is pending (settling it takes its callbacks)",
        lambda c, _now: not settled(c["awaited_state"]),
    ),
    own("its awaiter is pending (the settlement scrub)", lambda c, _now: not settled(c["awaiter_state"])),
    own(
        "its awaiter has a task to resume",
        lambda c, _now: c["awaiter_state"] is None or c["awaiter_task_state"] is not None,
    ),
]

LISTENER_INVARIANTS = [
    own("its promise exists", lambda listener, _now: listener["promise_state"] is not None),
    own(
        "its promise is pending (settling it takes its listeners)",
        lambda listener, _now: not settled(listener["promise_state"]),
    ),
    Invariant(
        "consistent_listener_addresses_deliverable",
        "its address is deliverable: addressValid, in D3's form poll://uni|any@group[/id] or http(s)://host",
        lambda listener, _now: deliverable(listener["address"]),
    ),
]

SCHEDULE_INVARIANTS = [
    own("its cron is valid", lambda s, _now: cron_error(s["cron"]) is None),
    own("its promise timeout is not negative", lambda s, _now: s["promise_timeout"] >= 0),
    Invariant(
        "well_formed_schedule_created_at_lte_next_run_at",
        "its next run is not before its creation",
        lambda s, _now: s["created_at"] <= s["next_run_at"],
    ),
    Invariant(
        "well_formed_schedule_created_at_lte_last_run_at",
        "its last run is not before its creation",
        lambda s, _now: s["last_run_at"] is None or s["created_at"] <= s["last_run_at"],
    ),
    Invariant(
        "well_formed_schedule_last_run_at_lt_next_run_at",
        "its next run is after its last",
        lambda s, _now: s["last_run_at"] is None or s["last_run_at"] < s["next_run_at"],
    ),
]


def names_its_subject(m):
    if m["kind"] == EXECUTE:
        return m["execute_task"] == m["subject"] and int(m["execute_version"]) >= 0
    return m["unblock_id"] == m["subject"]


MESSAGE_INVARIANTS = [
    own(
        "its key is made of its kind, subject and address",
        lambda m, _now: m["key"] == message_key(m["kind"], m["subject"], m["address"]),
    ),
    own(
        "its kind and delivery state are known",
        lambda m, _now: m["kind"] in MessageKind.values and m["state"] in DeliveryState.values,
    ),
    own(
        "it carries its subject: an execute its task's id and a version, an unblock its promise's record",
        lambda m, _now: names_its_subject(m),
    ),
    Invariant(
        "consistent_outbox_execute_names_existing_task",
        "an execute's task exists",
        lambda m, _now: m["kind"] != EXECUTE or m["task_version"] is not None,
    ),
    Invariant(
        "consistent_outbox_never_ahead",
        "an execute's version is not ahead of its task's",
        lambda m, _now: (
            m["kind"] != EXECUTE or m["task_version"] is None or int(m["execute_version"]) <= m["task_version"]
        ),
    ),
    Invariant(
        "consistent_outbox_execute_address_is_target_tag",
        'an execute goes to its task\'s resonate:target ("" when its promise has none)',
        lambda m, _now: m["kind"] != EXECUTE or m["promise_state"] is None or m["address"] == (m["target"] or ""),
    ),
    Invariant(
        "consistent_outbox_unblock_names_settled_promise",
        "an unblock carries a settled record, of a promise that is settled",
        lambda m, _now: m["kind"] != UNBLOCK or (settled(m["unblock_state"]) and settled(m["promise_state"])),
    ),
    Invariant(
        "consistent_outbox_unblock_address_deliverable",
        "an unblock's address is deliverable: addressValid, in D3's form poll://uni|any@group[/id] or http(s)://host",
        lambda m, _now: m["kind"] != UNBLOCK or deliverable(m["address"]),
    ),
]

# The catalogue's single-state properties that the schema enforces: not read again row by row.
ENFORCED_BY_SCHEMA = [
    ("well_formed_promise_callbacks_unique", "callbacks: unique (awaited, awaiter)"),
    ("well_formed_promise_listeners_unique", "listeners: unique (promise, address)"),
    ("well_formed_store_promise_ids_unique", "promises: primary key id"),
    ("well_formed_store_task_ids_unique", "tasks: primary key id (a task's id is its promise's)"),
    ("well_formed_store_schedule_ids_unique", "schedules: primary key id"),
    (
        "well_formed_store_outbox_keys_unique",
        "messages: unique key (an execute by task, an unblock by promise+address)",
    ),
]

# The catalogue's single-state properties that the specification at 83d64c3 breaks on purpose (doors the
# catalogue's later history added), and that are therefore not checked.
BROKEN_AT_83D64C3 = [
    (
        "well_formed_promise_timer_not_targeted",
        "promise.create and task.create accept a promise tagged both resonate:timer and resonate:target",
    ),
    (
        "well_formed_promise_obligations_require_external",
        "promise.register_callback and register_listener accept an internal promise (no target, timer or "
        "resonate:external tag), and so does task.suspend",
    ),
    (
        "well_formed_promise_awaiter_is_not_self",
        "promise.register_callback with awaiter = awaited, and task.suspend awaiting its own promise, register a "
        "self-callback",
    ),
    (
        "well_formed_schedule_promise_tags_not_timer_targeted",
        "schedule.create accepts promiseTags with both resonate:timer and resonate:target",
    ),
    (
        "consistent_task_iff_targeted_promise (the task half)",
        "task.create of a new promise makes a task whatever its tags (T-02); the promise half is checked",
    ),
    (
        "consistent_callback_awaiter_is_targeted",
        "task.suspend registers its task as awaiter, and that task may be one task.create made for an untargeted "
        "promise (checked instead: the awaiter has a task)",
    ),
    (
        "consistent_suspended_task_holds_rung",
        "task.suspend with an empty list of actions suspends a task with nothing to resume it (T-06)",
    ),
]


class Table(NamedTuple):
    name: str
    rows: object  # the queryset of rows as dicts, with the states of the rows they refer to
    key: str  # the column rows are read in order of
    label: object  # row -> how the report names it
    invariants: list


def the_promise(column, **value):
    """One value (an expression over the promise's columns) of the promise whose id is in `column`."""
    return Subquery(Promise.objects.filter(pk=OuterRef(column)).values(**value)[:1])


TABLES = [
    Table(
        "promises",
        Promise.objects.values(
            "id",
            "state",
            "created_at",
            "settled_at",
            "timeout_at",
            "timeout_armed",
            "tags",
            "timer",
            "branch",
            task_state=state_of_task("id"),
            # Read only where it must be empty: payloads can be large.
            value_that_must_be_empty=Case(
                When(Q(state=PENDING) | Q(settled_at=F("timeout_at")), then="value"), output_field=JSONField()
            ),
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
        Schedule.objects.values("id", "cron", "promise_timeout", "created_at", "next_run_at", "last_run_at"),
        "id",
        lambda s: f"schedule {s['id']}",
        SCHEDULE_INVARIANTS,
    ),
    Table(
        "messages",
        # The message's data is not read whole (an unblock carries its promise's payloads): only what is checked.
        Message.objects.values(
            "id",
            "key",
            "kind",
            "subject",
            "address",
            "state",
            execute_task=KT("data__task__id"),
            execute_version=KT("data__task__version"),
            unblock_id=KT("data__promise__id"),
            unblock_state=KT("data__promise__state"),
            task_version=Subquery(Task.objects.filter(pk=OuterRef("subject")).values("version")[:1]),
            promise_state=state_of_promise("subject"),
            target=the_promise("subject", target=KT(f"tags__{TARGET}")),
        ),
        "id",
        lambda m: f"message {m['key']}",
        MESSAGE_INVARIANTS,
    ),
]


def holds(invariant, row, now):
    try:
        return bool(invariant.holds(row, now))
    except (KeyError, TypeError, AttributeError, ValueError):  # malformed JSON in the row
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


def named(invariant):
    return f"{invariant.sentence} [{invariant.name}]" if invariant.name else invariant.sentence


def listing():
    """What --help shows after the options: every invariant checked, what the schema enforces, what is not checked."""
    lines = ["checked, row by row ([the catalogue's name]; the others are this server's own):"]
    for table in TABLES:
        lines += [f"  {table.name}: {named(invariant)}" for invariant in table.invariants]
    lines += ["", "enforced by the schema, not read again:"]
    lines += [f"  {name}: {how}" for name, how in ENFORCED_BY_SCHEMA]
    lines += ["", "not checked: the specification at 83d64c3 breaks them on purpose:"]
    lines += [f"  {name}: {why}" for name, why in BROKEN_AT_83D64C3]
    return "\n".join(lines)


class ListingFormatter(DjangoHelpFormatter, RawDescriptionHelpFormatter):
    """Django's order of options, and the listing's lines as written."""


class Command(ResonateCommand):
    help = (
        "Check the invariants of the protocol state in the database, row by row; fails if any row violates one.\n"
        "They are the single-state properties of the specification's catalogue (spec/02-abstract/properties.lean)\n"
        "that hold at 83d64c3 with PROTOCOL.md's decisions, and this server's own."
    )

    def create_parser(self, prog_name, subcommand, **kwargs):
        return super().create_parser(prog_name, subcommand, formatter_class=ListingFormatter, epilog=listing())

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=positive, default=5000, help="rows read per query (default 5000)")
        parser.add_argument(
            "--now",
            type=moment,
            help="the time the clock-relative invariants (created or settled no later than now) are read at: a ms"
            " timestamp, an ISO date or a duration ago (default: the clock; a run that used debug times ahead of the"
            " clock gives its last one)",
        )
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
        now = now_ms() if options["now"] is None else options["now"]
        total = sum(table.rows.count() for table in TABLES)
        with self.progress(options, total=total, desc="invariants", unit=" rows") as bar:
            for table in TABLES:
                for batch in batches(table, options["batch"]):
                    for row in batch:
                        for invariant in table.invariants:
                            if not holds(invariant, row, now):
                                found = violations[(table.name, invariant)]
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
                {"table": table, "invariant": invariant.sentence, "count": n, "rows": rows}
                | ({"property": invariant.name} if invariant.name else {})
                for (table, invariant), (n, rows) in violations.items()
            ]
            self.write_json({"checked": checked, "violations": found})
            return
        if not violations:
            self.stdout.write(f"Invariants hold over {checked} rows.")
        for (table, invariant), (n, rows) in violations.items():
            shown = f"the first {SHOWN}" if n > SHOWN else "listed"
            self.stdout.write(self.style.ERROR(f"{table}: {named(invariant)}; violated by {n} ({shown}):"))
            self.write_lines(f"  {row}" for row in rows)
