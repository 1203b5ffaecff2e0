"""What is due: each timeout category once, in firing order (decision D15), for the sweep, the sweeper's wait
and /metrics.

An entry of a category has a timeout when `armed` holds, and it is due at `now` when its deadline is at or
before `now`. A task's timeout is claimed by locking its promise row, the lock that guards the task.
"""

from typing import NamedTuple

from django.db import connection

from floor import rows
from promises.models import Promise
from schedules.models import Schedule
from tasks.models import Task, TimeoutKind

PROMISES = rows.quote(Promise._meta.db_table)
TASKS_ALONE = f"{rows.quote(Task._meta.db_table)} e"
TASKS = f"{TASKS_ALONE} JOIN {PROMISES} p ON p.id = e.id"


class Category(NamedTuple):
    name: str
    table: str  # the entries' table, aliased e
    deadline: str
    armed: str
    lock_of: str = ""  # FOR UPDATE OF … when the claim locks another row than the entry's
    claimed: str = ""  # the claim's FROM clause, when it joins the locked row's table (else `table`)

    @property
    def entries(self):
        return self.claimed or self.table


CATEGORIES = (
    Category("promise", f"{PROMISES} e", "e.timeout_at", "e.timeout_armed"),
    Category("retry", TASKS_ALONE, "e.timeout_at", f"e.timeout_kind = {TimeoutKind.RETRY}", " OF p", TASKS),
    Category("lease", TASKS_ALONE, "e.timeout_at", f"e.timeout_kind = {TimeoutKind.LEASE}", " OF p", TASKS),
    Category("schedule", f"{rows.quote(Schedule._meta.db_table)} e", "e.next_run_at", "TRUE"),
)
BY_NAME = {category.name: category for category in CATEGORIES}


def due(name, now, limit=None, claim=False):
    """Ids of the category's entries due at `now`, by (deadline, id); `claim` locks them, skipping rows others hold."""
    category = BY_NAME[name]
    sql = (
        f"SELECT e.id FROM {category.entries} WHERE {category.armed} AND {category.deadline} <= %s"
        f" ORDER BY {category.deadline}, e.id" + (" LIMIT %s" if limit else "")
    )
    if claim and connection.features.has_select_for_update_skip_locked:
        sql += f" FOR UPDATE{category.lock_of} SKIP LOCKED"
    return [id for (id,) in rows.query(sql, [now, limit] if limit else [now])]


# Each category's earliest deadline is the first entry of its index (promise_timeout_due, task_timeouts, the
# schedules' next_run_at), read from the entries' table alone: a task's promise row always exists (its foreign key),
# and a MIN over a join is an aggregate over every row, where one over a table is a read of the index's first entry.
# The sweep asks several times a second: with 378,000 pending tasks, 1.8 s a time over the join, against under a
# millisecond (bench/HISTORY.md, 2026-12-06, "the sweep's reads").
NEXT_DUE = (
    "SELECT MIN(t) FROM ("
    + " UNION ALL ".join(f"SELECT MIN({c.deadline}) AS t FROM {c.table} WHERE {c.armed}" for c in CATEGORIES)
    + ") AS deadlines"
)


def next_due():
    """The earliest deadline of any timeout (ms), or None."""
    return rows.query(NEXT_DUE)[0][0]


COUNT_DUE = "SELECT " + ", ".join(
    f"(SELECT COUNT(*) FROM {c.table} WHERE {c.armed} AND {c.deadline} <= %s)" for c in CATEGORIES
)


def count_due(now):
    """{category: how many of its timeouts are due at `now` and not fired yet}."""
    counts = rows.query(COUNT_DUE, [now] * len(CATEGORIES))[0]
    return dict(zip(BY_NAME, counts, strict=True))
