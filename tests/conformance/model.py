"""Executable model of the Resonate server: the Lean specification at 83d64c3 plus the project's decisions.

Each public handler mirrors one Lean file (spec/02-actions/*.lean) and is named after it; the
deviations are the Decisions table of /work/shared/PROTOCOL.md (E1, E2, D5, D6, D8, D15) and
saturating time arithmetic. Requests and responses are wire-format dicts (camelCase keys,
optional keys omitted), so a test can compare them byte for byte with the real server.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from croniter import croniter

from floor.conf import DEFAULTS

CATCH_UP_MAX = DEFAULTS["SCHEDULE_CATCH_UP_MAX"]  # the server's bound on one catch-up (schedules/engine.py)

I64_MAX = 2**63 - 1

PROTOCOL_VERSION = "2026-04-01"
RETRY, LEASE = 0, 1  # TaskTimeout.kind
PENDING = "pending"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
TEMPLATE_FIELD = re.compile(r"\{\{\.id\}\}|\{\{\.timestamp\}\}")


# ---------------------------------------------------------------- pure helpers


def sat_add(a: int, b: int) -> int:
    return min(a + b, I64_MAX)


def is_timer(tags: dict) -> bool:
    return tags.get("resonate:timer") == "true"


def is_external(tags: dict) -> bool:
    # state.lean `external`, widened by E2 (resonate:external = "true").
    return "resonate:target" in tags or is_timer(tags) or tags.get("resonate:external") == "true"


def timeout_state(tags: dict) -> str:
    return "resolved" if is_timer(tags) else "rejected_timedout"


def to_nat(text: str) -> int:
    # Lean's String.toNat! panics on non-digits, and a panic yields the default 0.
    return int(text) if text.isascii() and text.isdigit() else 0


def as_value(value: dict | None) -> dict:
    value = value or {}
    return {k: copy.deepcopy(value[k]) for k in ("headers", "data") if k in value}


def next_cron(cron: str, after_ms: int) -> int:
    """Smallest whole second (in ms) of `cron`, in UTC, strictly after `after_ms`; I64_MAX if none."""
    six_fields = len(cron.split()) == 6
    try:
        start = EPOCH + timedelta(seconds=after_ms // 1000)
        it = croniter(cron, start, second_at_beginning=six_fields)
        return (it.get_next(datetime) - EPOCH) // timedelta(seconds=1) * 1000
    except (ValueError, OverflowError, ArithmeticError):
        return I64_MAX


def expand(template: str, schedule_id: str, ts: int) -> str:
    # One pass, so text inserted for one placeholder is never expanded again.
    return TEMPLATE_FIELD.sub(lambda m: schedule_id if m.group() == "{{.id}}" else str(ts), template)


def contains(tags: dict, wanted: dict | None) -> bool:
    return all(tags.get(k) == v for k, v in (wanted or {}).items())


def page(rows: list[tuple[str, object]], limit: int, cursor: str | None, key: str) -> dict:
    """D5 paging over (id, record) rows: id order, rows after `cursor`, `cursor` only if more remain."""
    rows = sorted((r for r in rows if cursor is None or r[0] > cursor), key=lambda r: r[0])
    out = {key: [rec for _, rec in rows[:limit]]}
    if len(rows) > limit:
        out["cursor"] = rows[limit - 1][0]
    return out


# ---------------------------------------------------------------- objects (state.lean)


@dataclass(frozen=True)
class Promise:
    id: str
    state: str
    param: dict
    tags: dict
    timeout_at: int
    created_at: int
    value: dict = field(default_factory=dict)
    settled_at: int | None = None
    callbacks: tuple[str, ...] = ()
    listeners: tuple[str, ...] = ()

    def add_callback(self, awaiter_id: str) -> Promise:
        if awaiter_id in self.callbacks:
            return self
        return replace(self, callbacks=self.callbacks + (awaiter_id,))

    def add_listener(self, address: str) -> Promise:
        if address in self.listeners:
            return self
        return replace(self, listeners=self.listeners + (address,))

    def expired(self, now: int) -> bool:
        return self.state == PENDING and self.timeout_at <= now

    def live(self, now: int) -> bool:
        return self.state == PENDING and self.timeout_at > now

    def projected(self, now: int) -> Promise:
        if not self.expired(now):
            return self
        return replace(self, state=timeout_state(self.tags), settled_at=self.timeout_at)

    def record(self) -> dict:
        rec = {
            "id": self.id,
            "state": self.state,
            "param": copy.deepcopy(self.param),
            "value": copy.deepcopy(self.value),
            "tags": dict(self.tags),
            "timeoutAt": self.timeout_at,
            "createdAt": self.created_at,
        }
        if self.settled_at is not None:
            rec["settledAt"] = self.settled_at
        return rec


@dataclass(frozen=True)
class Task:
    id: str
    state: str
    version: int
    ttl: int | None = None
    pid: str | None = None
    resumes: tuple[str, ...] = ()

    def fulfilled(self) -> Task:
        return replace(self, state="fulfilled", pid=None, ttl=None, resumes=())

    def record(self) -> dict:
        rec = {"id": self.id, "state": self.state, "version": self.version, "resumes": len(self.resumes)}
        if self.ttl is not None:
            rec["ttl"] = self.ttl
        if self.pid is not None:
            rec["pid"] = self.pid
        return rec


@dataclass(frozen=True)
class Schedule:
    id: str
    cron: str
    promise_id: str
    promise_timeout: int
    promise_param: dict
    promise_tags: dict
    next_run_at: int
    created_at: int
    last_run_at: int | None = None

    def record(self) -> dict:
        rec = {
            "id": self.id,
            "cron": self.cron,
            "promiseId": self.promise_id,
            "promiseTimeout": self.promise_timeout,
            "promiseParam": copy.deepcopy(self.promise_param),
            "promiseTags": dict(self.promise_tags),
            "createdAt": self.created_at,
            "nextRunAt": self.next_run_at,
        }
        if self.last_run_at is not None:
            rec["lastRunAt"] = self.last_run_at
        return rec


def execute_message(task: Task) -> dict:
    return {"kind": "execute", "head": {}, "data": {"task": {"id": task.id, "version": task.version}}}


def unblock_message(promise: Promise) -> dict:
    return {"kind": "unblock", "head": {}, "data": {"promise": promise.record()}}


# ---------------------------------------------------------------- the server


class SpecModel:
    def __init__(self, retry_timeout: int = 5000) -> None:
        self.retry_timeout = retry_timeout
        self.reset()

    def reset(self) -> None:
        self.promises: dict[str, Promise] = {}
        self.tasks: dict[str, Task] = {}
        self.schedules: dict[str, Schedule] = {}
        self.promise_timeouts: dict[str, int] = {}
        self.task_timeouts: dict[tuple[str, int], int] = {}
        self.schedule_timeouts: dict[str, int] = {}
        # Keys: ("execute", task id) or ("unblock", promise id, address); value (address, message).
        self.outbox: dict[tuple, tuple[str, dict]] = {}

    # ------------------------------------------------------------ entry points

    def handle(self, kind: str, data: dict, now: int, corr_id: str = "c") -> tuple[int, object]:
        handler = getattr(self, kind.replace(".", "_"))
        if kind == "task.fence":
            return handler(data, now, corr_id)
        return handler(data, now)

    def tick(self, time: int) -> None:
        """D15 sweep: fire due entries one at a time, in (category, deadline, id) order, each once."""
        fired: set[tuple[int, str]] = set()
        while entry := self._first_due(time, fired):
            category, _, id = entry
            fired.add((category, id))
            fire = (
                self.on_promise_timeout,
                self.on_task_retry_timeout,
                self.on_task_lease_timeout,
                self.on_schedule_timeout,
            )[category]
            fire(id, time)

    def _first_due(self, time: int, fired: set) -> tuple[int, int, str] | None:
        due = [(0, to, id) for id, to in self.promise_timeouts.items()]
        due += [(1 + kind, to, id) for (id, kind), to in self.task_timeouts.items()]
        due += [(3, to, id) for id, to in self.schedule_timeouts.items()]
        due = [e for e in due if e[1] <= time and (e[0], e[2]) not in fired]
        return min(due, default=None)

    def snap(self) -> dict:
        promises = sorted(self.promises.values(), key=lambda p: p.id)
        executes = sorted((k[1], v) for k, v in self.outbox.items() if k[0] == "execute")
        unblocks = sorted((k[1:], v) for k, v in self.outbox.items() if k[0] == "unblock")
        return {
            "promises": [p.record() for p in promises],
            "promiseTimeouts": [{"id": id, "timeout": to} for id, to in sorted(self.promise_timeouts.items())],
            "callbacks": [
                {"awaiter": a, "awaited": b} for a, b in sorted((a, p.id) for p in promises for a in p.callbacks)
            ],
            "listeners": [{"id": i, "address": a} for i, a in sorted((p.id, a) for p in promises for a in p.listeners)],
            "tasks": [t.record() for t in sorted(self.tasks.values(), key=lambda t: t.id)],
            "taskTimeouts": [
                {"id": id, "type": kind, "timeout": to} for (id, kind), to in sorted(self.task_timeouts.items())
            ],
            "messages": [{"address": addr, "message": copy.deepcopy(msg)} for _, (addr, msg) in executes + unblocks],
        }

    def invariant_violations(self) -> list[str]:
        out = []
        timed_ids = [id for id, _ in self.task_timeouts]
        for id in sorted(set(timed_ids)):
            if timed_ids.count(id) > 1:
                out.append(f"task {id} has more than one task timeout")
            if id not in self.tasks:
                out.append(f"task timeout {id} has no task")
        for p in self.promises.values():
            out += self._promise_violations(p)
        for t in self.tasks.values():
            out += self._task_violations(t)
        for s in self.schedules.values():
            if self.schedule_timeouts.get(s.id) != s.next_run_at:
                out.append(f"schedule {s.id} timeout is not its nextRunAt")
        out += [
            f"promise timeout {id} is not for a pending promise"
            for id in self.promise_timeouts
            if id not in self.promises or self.promises[id].state != PENDING
        ]
        return out

    def _promise_violations(self, p: Promise) -> list[str]:
        out = []
        if p.state != PENDING and (p.callbacks or p.listeners):
            out.append(f"settled promise {p.id} keeps callbacks or listeners")
        if "resonate:target" in p.tags and p.id not in self.tasks:
            out.append(f"promise {p.id} has a target but no task")
        if (p.state == PENDING) == (p.settled_at is not None):
            out.append(f"promise {p.id} settledAt does not match its state")
        return out

    def _task_violations(self, t: Task) -> list[str]:
        out = []
        p = self.promises.get(t.id)
        kinds = sorted(kind for (id, kind) in self.task_timeouts if id == t.id)
        expected = {"pending": [RETRY], "acquired": [LEASE]}.get(t.state, [])
        if p is None:
            out.append(f"task {t.id} has no promise")
        elif (t.state == "fulfilled") != (p.state != PENDING):
            out.append(f"task {t.id} is {t.state} but its promise is {p.state}")
        if kinds != expected:
            out.append(f"task {t.id} ({t.state}) has timeouts of kinds {kinds}")
        leased = (t.pid is not None, t.ttl is not None)
        if leased != ((True, True) if t.state == "acquired" else (False, False)):
            out.append(f"task {t.id} ({t.state}) lease fields are inconsistent")
        return out

    # ------------------------------------------------------------ state.lean setters

    def set_promise_timeout(self, id: str, timeout: int) -> None:
        self.promise_timeouts[id] = timeout

    def del_promise_timeout(self, id: str) -> None:
        self.promise_timeouts.pop(id, None)

    def set_task_timeout(self, id: str, kind: int, timeout: int) -> None:
        self.task_timeouts[(id, kind)] = timeout

    def del_task_timeout(self, id: str) -> None:
        for key in [k for k in self.task_timeouts if k[0] == id]:
            del self.task_timeouts[key]

    def set_schedule_timeout(self, id: str, timeout: int) -> None:
        self.schedule_timeouts[id] = timeout

    def del_schedule_timeout(self, id: str) -> None:
        self.schedule_timeouts.pop(id, None)

    def set_execute(self, address: str, task: Task) -> None:
        self.outbox[("execute", task.id)] = (address, execute_message(task))

    def set_unblock(self, address: str, promise: Promise) -> None:
        self.outbox[("unblock", promise.id, address)] = (address, unblock_message(promise))

    def put_promise(self, p: Promise) -> None:
        self.promises[p.id] = p

    def put_task(self, t: Task) -> None:
        self.tasks[t.id] = t

    # ------------------------------------------------------------ shared rules

    def target_of(self, id: str) -> str:
        p = self.promises.get(id)
        return p.tags.get("resonate:target", "") if p else ""

    def settle(self, p: Promise, state: str, value: dict, settled_at: int, now: int) -> Promise:
        """The settlement block shared by P-03, T-07 and onPromiseTimeout: write, fulfil, scrub, notify."""
        listeners, callbacks = p.listeners, p.callbacks
        p = replace(p, state=state, value=value, settled_at=settled_at, callbacks=(), listeners=())
        self.put_promise(p)
        self.del_promise_timeout(p.id)
        if (t := self.tasks.get(p.id)) is not None:
            self.put_task(t.fulfilled())
            self.del_task_timeout(t.id)
        self.scrub(p.id)
        for address in listeners:
            self.set_unblock(address, p)
        for awaiter_id in callbacks:
            self.enqueue_resume(p.id, awaiter_id, now)
        return p

    def scrub(self, settled_id: str) -> None:
        for q in list(self.promises.values()):
            if q.state == PENDING and settled_id in q.callbacks:
                self.put_promise(replace(q, callbacks=tuple(c for c in q.callbacks if c != settled_id)))

    def preload(self, task_id: str, now: int) -> list[dict]:
        """D6: projected records of the other promises on the task promise's resonate:branch, by id."""
        own = self.promises.get(task_id)
        branch = own.tags.get("resonate:branch") if own else None
        if branch is None:
            return []
        same = [q for q in self.promises.values() if q.id != task_id and q.tags.get("resonate:branch") == branch]
        return [q.projected(now).record() for q in sorted(same, key=lambda q: q.id)]

    def fencing_conflict(self, t: Task, p: Promise, version: int, now: int) -> bool:
        # The guard T-04, T-06, T-07 and T-08 share after their 404/409 lookups.
        return t.state != "acquired" or not p.live(now) or t.version != version

    # ------------------------------------------------------------ 00-resume.lean

    def enqueue_resume(self, awaited_id: str, awaiter_id: str, now: int) -> None:
        t = self.tasks.get(awaiter_id)
        if t is None or t.state == "fulfilled":
            return
        if t.state == "suspended":
            t = replace(t, state=PENDING, resumes=(awaited_id,))
            self.put_task(t)
            self.set_task_timeout(t.id, RETRY, sat_add(now, self.retry_timeout))
            if target := self.target_of(awaiter_id):
                self.set_execute(target, t)
        elif awaited_id not in t.resumes:
            self.put_task(replace(t, resumes=t.resumes + (awaited_id,)))

    # ------------------------------------------------------------ 02-timeouts.lean

    def on_promise_timeout(self, id: str, now: int) -> None:
        p = self.promises.get(id)
        if p is not None and p.state == PENDING:
            self.settle(p, timeout_state(p.tags), p.value, p.timeout_at, now)

    def on_task_retry_timeout(self, id: str, now: int) -> None:
        t = self.tasks.get(id)
        if t is None or t.state != PENDING:
            return
        self.del_task_timeout(t.id)
        self.set_task_timeout(t.id, RETRY, sat_add(now, self.retry_timeout))
        if t.id in self.promises:
            self.set_execute(self.target_of(t.id), t)

    def on_task_lease_timeout(self, id: str, now: int) -> None:
        t = self.tasks.get(id)
        if t is None or t.state != "acquired":
            return
        t = replace(t, state=PENDING, pid=None, ttl=None)
        self.put_task(t)
        self.del_task_timeout(t.id)
        self.set_task_timeout(t.id, RETRY, sat_add(now, self.retry_timeout))
        if t.id in self.promises:
            self.set_execute(self.target_of(t.id), t)

    def catch_up(self, now: int, s: Schedule) -> Schedule:
        # I64_MAX means "no next occurrence" (not a whole second), so it never fires; the Lean
        # recursion would otherwise never end once now reached it. The server stops after
        # SCHEDULE_CATCH_UP_MAX occurrences in one transition (schedules/engine.py), the Lean does not.
        fired = 0
        while s.next_run_at <= now and s.next_run_at != I64_MAX and fired < CATCH_UP_MAX:
            fired += 1
            cron_time = s.next_run_at
            self.promise_create(
                {
                    "id": expand(s.promise_id, s.id, cron_time),
                    "timeoutAt": sat_add(cron_time, s.promise_timeout),
                    "param": s.promise_param,
                    "tags": s.promise_tags,
                },
                cron_time,
            )
            s = replace(s, last_run_at=cron_time, next_run_at=next_cron(s.cron, cron_time))
        return s

    def on_schedule_timeout(self, id: str, now: int) -> None:
        s0 = self.schedules.get(id)
        if s0 is None:
            return
        s = self.catch_up(now, s0)
        self.schedules[s.id] = s
        self.del_schedule_timeout(s.id)
        self.set_schedule_timeout(s.id, s.next_run_at)

    # ------------------------------------------------------------ P-01 .. P-06

    def promise_get(self, req: dict, now: int) -> tuple[int, object]:
        p = self.promises.get(req["id"])
        if p is None:
            return 404, None
        return 200, {"promise": p.projected(now).record()}

    def promise_create(self, req: dict, now: int) -> tuple[int, object]:
        p = self.promises.get(req["id"])
        if p is not None:
            return 200, {"promise": p.projected(now).record()}
        tags = dict(req.get("tags") or {})
        param = as_value(req.get("param"))
        if req["timeoutAt"] > now:
            p = self._create_pending(req["id"], param, tags, req["timeoutAt"], now)
        else:
            p = self._create_expired(req["id"], param, tags, req["timeoutAt"])
        return 200, {"promise": p.record()}

    def _create_pending(self, id: str, param: dict, tags: dict, timeout_at: int, now: int) -> Promise:
        p = Promise(id=id, state=PENDING, param=param, tags=tags, timeout_at=timeout_at, created_at=now)
        self.put_promise(p)
        if is_external(tags):
            self.set_promise_timeout(p.id, p.timeout_at)
        target = tags.get("resonate:target")
        if target is None:
            return p
        t = Task(id=p.id, state=PENDING, version=0)
        self.put_task(t)
        delay = tags.get("resonate:delay")
        if delay is not None and to_nat(delay) > now:
            self.set_task_timeout(t.id, RETRY, to_nat(delay))
        else:
            self.set_task_timeout(t.id, RETRY, sat_add(now, self.retry_timeout))
            self.set_execute(target, t)
        return p

    def _create_expired(self, id: str, param: dict, tags: dict, timeout_at: int) -> Promise:
        p = Promise(
            id=id,
            state=timeout_state(tags),
            param=param,
            tags=tags,
            timeout_at=timeout_at,
            created_at=timeout_at,
            settled_at=timeout_at,
        )
        self.put_promise(p)
        if "resonate:target" in tags:
            self.put_task(Task(id=p.id, state="fulfilled", version=0))
        return p

    def promise_settle(self, req: dict, now: int) -> tuple[int, object]:
        p = self.promises.get(req["id"])
        if p is None:
            return 404, None
        if p.live(now):
            p = self.settle(p, req["state"], as_value(req.get("value")), now, now)
        return 200, {"promise": p.projected(now).record()}

    def promise_register_callback(self, req: dict, now: int) -> tuple[int, object]:
        awaited = self.promises.get(req["awaited"])
        if awaited is None:
            return 404, None
        awaiter = self.promises.get(req["awaiter"])
        if awaiter is None or "resonate:target" not in awaiter.tags:
            return 422, None
        if awaited.live(now) and awaiter.live(now):
            self.put_promise(awaited.add_callback(awaiter.id))
        return 200, {"promise": awaited.projected(now).record()}

    def promise_register_listener(self, req: dict, now: int) -> tuple[int, object]:
        awaited = self.promises.get(req["awaited"])
        if awaited is None:
            return 404, None
        if awaited.live(now):
            self.put_promise(awaited.add_listener(req["address"]))
        return 200, {"promise": awaited.projected(now).record()}

    def promise_search(self, req: dict, now: int) -> tuple[int, object]:
        rows = []
        for p in self.promises.values():
            q = p.projected(now)
            if req.get("state") in (None, q.state) and contains(q.tags, req.get("tags")):
                rows.append((q.id, q.record()))
        return 200, page(rows, req.get("limit", 100), req.get("cursor"), "promises")

    # ------------------------------------------------------------ T-01 .. T-11

    def task_get(self, req: dict, now: int) -> tuple[int, object]:
        t = self.tasks.get(req["id"])
        if t is None or t.id not in self.promises:
            return 404, None
        return 200, {"task": self._projected_task(t, now).record()}

    def _projected_task(self, t: Task, now: int) -> Task:
        p = self.promises.get(t.id)
        return t if p is None or p.live(now) else t.fulfilled()

    def task_create(self, req: dict, now: int) -> tuple[int, object]:
        a = req["action"]["data"]
        p = self.promises.get(a["id"])
        if p is None:
            return 200, self._task_create_fresh(req, a, now)
        if "resonate:target" not in p.tags:
            return 422, None
        t = self.tasks.get(p.id)
        if t is None or t.state not in ("fulfilled", PENDING):
            return 409, None
        if t.state == "fulfilled":
            return 200, {"task": t.record(), "promise": p.record(), "preload": []}
        t = self._acquire(t, req["pid"], req["ttl"], now)
        return 200, {"task": t.record(), "promise": p.record(), "preload": self.preload(t.id, now)}

    def _task_create_fresh(self, req: dict, a: dict, now: int) -> dict:
        tags, param = dict(a.get("tags") or {}), as_value(a.get("param"))
        if a["timeoutAt"] <= now:
            p = self._create_expired(a["id"], param, tags, a["timeoutAt"])
            # T-02 creates the fulfilled task even without a target.
            t = Task(id=p.id, state="fulfilled", version=0)
            self.put_task(t)
            return {"task": t.record(), "promise": p.record(), "preload": []}
        p = Promise(id=a["id"], state=PENDING, param=param, tags=tags, timeout_at=a["timeoutAt"], created_at=now)
        self.put_promise(p)
        self.set_promise_timeout(p.id, p.timeout_at)
        t = Task(id=p.id, state="acquired", version=1, ttl=req["ttl"], pid=req["pid"])
        self.put_task(t)
        self.set_task_timeout(t.id, LEASE, sat_add(now, req["ttl"]))
        return {"task": t.record(), "promise": p.record(), "preload": self.preload(t.id, now)}

    def _acquire(self, t: Task, pid: str, ttl: int, now: int) -> Task:
        t = replace(t, state="acquired", version=t.version + 1, ttl=ttl, pid=pid, resumes=())
        self.put_task(t)
        self.del_task_timeout(t.id)
        self.set_task_timeout(t.id, LEASE, sat_add(now, ttl))
        return t

    def task_acquire(self, req: dict, now: int) -> tuple[int, object]:
        t = self.tasks.get(req["id"])
        if t is None:
            return 404, None
        p = self.promises.get(t.id)
        if p is None or t.state != PENDING or not p.live(now) or t.version != req["version"]:
            return 409, None
        t = self._acquire(t, req["pid"], req["ttl"], now)
        return 200, {"task": t.record(), "promise": p.record(), "preload": self.preload(t.id, now)}

    def task_fence(self, req: dict, now: int, corr_id: str = "c") -> tuple[int, object]:
        t = self.tasks.get(req["id"])
        if t is None:
            return 404, None
        p = self.promises.get(t.id)
        if p is None or self.fencing_conflict(t, p, req["version"], now):
            return 409, None
        action = req["action"]
        inner = self.promise_create if action["kind"] == "promise.create" else self.promise_settle
        status, data = inner(action["data"], now)
        head = {"corrId": corr_id, "status": status, "version": PROTOCOL_VERSION}
        result = {"kind": action["kind"], "head": head, "data": data if status == 200 else "Promise not found"}
        return 200, {"action": result, "preload": self.preload(t.id, now)}

    def task_heartbeat(self, req: dict, now: int) -> tuple[int, object]:
        if req["tasks"]:
            refs = [(r["id"], r["version"]) for r in req["tasks"]]
        else:  # E1: an empty list renews every lease this pid holds.
            refs = [(t.id, t.version) for t in self.tasks.values()]
        for id, version in refs:
            t = self.tasks.get(id)
            if t is None or t.state != "acquired" or t.version != version or t.pid != req["pid"]:
                continue
            p = self.promises.get(t.id)
            if p is not None and p.live(now):
                self.del_task_timeout(t.id)
                self.set_task_timeout(t.id, LEASE, sat_add(now, t.ttl or 0))
        return 200, {}

    def task_suspend(self, req: dict, now: int) -> tuple[int, object]:
        t = self.tasks.get(req["id"])
        if t is None:
            return 404, None
        tp = self.promises.get(t.id)
        if tp is None or self.fencing_conflict(t, tp, req["version"], now):
            return 409, None
        awaited_ids = [action["data"]["awaited"] for action in req["actions"]]
        if any(id not in self.promises for id in awaited_ids):
            return 422, None
        if any(not self.promises[id].live(now) for id in awaited_ids):
            self.put_task(replace(t, resumes=()))
            return 300, {"preload": self.preload(t.id, now)}
        for id in awaited_ids:
            # T-06 registers req.id as the awaiter; the action's own awaiter field is ignored.
            self.put_promise(self.promises[id].add_callback(req["id"]))
        self.put_task(replace(t, state="suspended", pid=None, ttl=None, resumes=()))
        self.del_task_timeout(t.id)
        return 200, {}

    def task_fulfill(self, req: dict, now: int) -> tuple[int, object]:
        t = self.tasks.get(req["id"])
        if t is None:
            return 404, None
        p = self.promises.get(t.id)
        if p is None or self.fencing_conflict(t, p, req["version"], now):
            return 409, None
        # T-07 settles the task's own promise; action.data.id is not consulted.
        a = req["action"]["data"]
        p = self.settle(p, a["state"], as_value(a.get("value")), now, now)
        return 200, {"promise": p.record()}

    def task_release(self, req: dict, now: int) -> tuple[int, object]:
        t = self.tasks.get(req["id"])
        if t is None:
            return 404, None
        p = self.promises.get(t.id)
        if p is None or self.fencing_conflict(t, p, req["version"], now):
            return 409, None
        t = replace(t, state=PENDING, pid=None, ttl=None)
        self.put_task(t)
        self.del_task_timeout(t.id)
        self.set_task_timeout(t.id, RETRY, sat_add(now, self.retry_timeout))
        self.set_execute(self.target_of(t.id), t)
        return 200, {}

    def task_halt(self, req: dict, now: int) -> tuple[int, object]:
        t = self.tasks.get(req["id"])
        if t is None:
            return 404, None
        if t.state == "fulfilled":
            return 409, None
        if t.state != "halted":
            self.put_task(replace(t, state="halted", pid=None, ttl=None))
            self.del_task_timeout(t.id)
        return 200, {}

    def task_continue(self, req: dict, now: int) -> tuple[int, object]:
        t = self.tasks.get(req["id"])
        if t is None:
            return 404, None
        if t.state != "halted":
            return 409, None
        if t.id not in self.promises:
            return 404, None
        t = replace(t, state=PENDING)
        self.put_task(t)
        self.set_task_timeout(t.id, RETRY, sat_add(now, self.retry_timeout))
        self.set_execute(self.target_of(t.id), t)
        return 200, {}

    def task_search(self, req: dict, now: int) -> tuple[int, object]:
        rows = []
        for t in self.tasks.values():
            shown = self._projected_task(t, now)
            if req.get("state") in (None, shown.state):
                rows.append((t.id, shown.record()))
        return 200, page(rows, req.get("limit", 100), req.get("cursor"), "tasks")

    # ------------------------------------------------------------ S-01 .. S-04

    def schedule_get(self, req: dict, now: int) -> tuple[int, object]:
        s = self.schedules.get(req["id"])
        if s is None:
            return 404, None
        return 200, {"schedule": s.record()}

    def schedule_create(self, req: dict, now: int) -> tuple[int, object]:
        s = self.schedules.get(req["id"])
        if s is None:
            s = Schedule(
                id=req["id"],
                cron=req["cron"],
                promise_id=req["promiseId"],
                promise_timeout=req["promiseTimeout"],
                promise_param=as_value(req.get("promiseParam")),
                promise_tags=dict(req.get("promiseTags") or {}),
                next_run_at=next_cron(req["cron"], now),
                created_at=now,
            )
            self.schedules[s.id] = s
            self.set_schedule_timeout(s.id, s.next_run_at)
        return 200, {"schedule": s.record()}

    def schedule_delete(self, req: dict, now: int) -> tuple[int, object]:
        if req["id"] not in self.schedules:
            return 404, None
        del self.schedules[req["id"]]
        self.del_schedule_timeout(req["id"])
        return 200, {}

    def schedule_search(self, req: dict, now: int) -> tuple[int, object]:
        rows = [(s.id, s.record()) for s in self.schedules.values() if contains(s.promise_tags, req.get("tags"))]
        return 200, page(rows, req.get("limit", 10), req.get("cursor"), "schedules")
