"""Concurrent histories against production mode: clients in threads send random protocol requests on a small key
space, and every request's invocation, response time (monotonic) and reply is recorded as a checker.Op.

Time. Every request carries the same head["resonate:debug_time"], NOW, in the year 2100, and every deadline, lease
and retry lies after it: each op runs at the same instant, so the order the checker picks changes no projection,
and the real clock of the Celery sweep never reaches a timeout, so no background transition happens during a
history (the checker's model has no tick). Promises created already expired (timeoutAt before NOW) still take
the paths that create settled promises and fulfilled tasks.

Keys. Each history has its own ids: plain promises and tasks touched only one at a time (checked key by key), and
a family of two workflows and two children that register callbacks on each other, suspend, fence and settle each
other (checked as one window). In a branched history the family also shares a resonate:branch, so every task reply
carries the others' records as its preload (decision D6), read in the same instant as the task's own.
"""

import random
import threading
import time
from dataclasses import dataclass, field

import httpx
import orjson

from tests.linearizability.checker import Op, named_ids, shown_promise

NOW = 4_102_444_800_000  # 2100-01-01T00:00:00Z
LATER = NOW + 86_400_000
EARLIER = NOW - 60_000
VERSION = "2026-04-01"
DEBUG_TIME = "resonate:debug_time"
TARGET = "poll://any@lin"
PARAMS = [{}, {"data": "YQ=="}, {"headers": {"h": "1"}, "data": "Yg=="}]
STATES = ["resolved", "rejected", "rejected_canceled"]
READ_TIMEOUT_S = 10


@dataclass
class KeySpace:
    """The ids of one history."""

    prefix: str
    branched: bool = False

    def __post_init__(self):
        p = self.prefix
        self.promises = [f"{p}.p0", f"{p}.p1"]
        self.tasks = [f"{p}.t0", f"{p}.t1"]
        self.workflows = [f"{p}.w0", f"{p}.w1"]
        self.children = [f"{p}.c0", f"{p}.c1"]
        self.schedules = [f"{p}.s0"]
        self.branch = f"{p}.w"

    def keys(self, kind, data):
        """The checker's keys: the ids an op names; in a branched history the family's name stands for each of its
        members (a task's preload reads them all)."""
        family = {*self.workflows, *self.children} if self.branched else set()
        return frozenset(self.branch if id in family else id for id in named_ids(kind, data))

    def all_promises(self):
        return [*self.promises, *self.tasks, *self.workflows, *self.children]


def envelope(kind, data, corr_id="inner"):
    return {"kind": kind, "head": {"corrId": corr_id, "version": VERSION}, "data": data}


class Chooser:
    """One client's random requests. It works as a worker does, and competes with the others for the same tasks:
    it reads a task (task.get), then acts on it as its state calls for, at the version it read; meanwhile others act
    too, so many of its versions are stale by the time they arrive. It also sends requests blind: creates of ids
    that may exist, settles, callbacks, versions one off."""

    def __init__(self, name, space, rng):
        self.name, self.space, self.rng = name, space, rng
        self.pid = f"{space.prefix}-{name}"
        self.versions, self.states = {}, {}  # of the tasks it has heard of
        self.seen = set()  # ids some reply showed to exist: requests on others mostly create them first
        self.then = []  # what to send next, chosen once the reply before it is in (a worker's next step)

    def next(self):
        if self.then:
            return self.then.pop(0)()
        family = self.rng.choices(["promise", "task", "branch", "schedule"], [3, 5, 6, 1])[0]
        return getattr(self, f"on_{family}")()

    def on_promise(self):
        id = self.rng.choice(self.space.promises)
        if id not in self.seen and self.rng.random() < 0.4:
            return self.create(id)
        return self.pick(
            (2, lambda: self.create(id)),
            (2, lambda: self.settle(id)),
            (2, lambda: ("promise.get", {"id": id})),
            (1, lambda: self.listen(id)),
        )

    def on_task(self):
        r, id = self.rng, self.rng.choice(self.space.tasks)
        if id not in self.seen and r.random() < 0.4:
            return self.task_create(id, {}) if r.random() < 0.5 else self.create(id, {"resonate:target": TARGET})
        return self.pick(
            (4, lambda: self.work_on(id, {})),
            (1, lambda: self.create(id, {"resonate:target": TARGET})),
            (1, lambda: self.task_create(id, {})),
            (1, lambda: self.acquire(id)),
            (1, lambda: ("task.release", {"id": id, "version": self.version(id)})),
            (1, lambda: self.fulfill(id)),
            (0.5, lambda: ("task.heartbeat", {"pid": self.pid, "tasks": [{"id": id, "version": self.version(id)}]})),
            (0.3, lambda: ("task.halt", {"id": id})),
            (0.3, lambda: ("task.continue", {"id": id})),
            (0.3, lambda: self.settle(id)),
            (0.5, lambda: ("promise.get", {"id": id})),
        )

    def on_branch(self):
        s, r = self.space, self.rng
        w, child = r.choice(s.workflows), r.choice(s.children)
        branch = {"resonate:branch": s.branch} if s.branched else {}
        if w not in self.seen and r.random() < 0.4:
            if r.random() < 0.5:
                return self.task_create(w, branch)
            return self.create(w, {"resonate:target": TARGET, **branch})
        if child not in self.seen and r.random() < 0.3:
            return self.create(child, branch)
        others = [id for id in (*s.children, *s.workflows) if id != w]
        return self.pick(
            (4, lambda: self.work_on(w, branch)),
            (1, lambda: self.create(child, branch)),
            (0.5, lambda: self.task_create(w, branch)),
            (1, lambda: ("promise.register_callback", {"awaited": r.choice(others), "awaiter": w})),
            (0.5, lambda: self.suspend(w, r.sample(others, r.choice([1, 1, 2])))),
            (0.5, lambda: self.fence(w, child, branch)),
            (1.5, lambda: self.settle(child)),
            (0.3, lambda: self.settle(w)),
            (1, lambda: ("promise.get", {"id": r.choice(others)})),
            (0.5, lambda: self.listen(child)),
        )

    def work_on(self, id, branch):
        """Read the task, then take the step its state calls for (next())."""
        self.then.append(lambda: self.step(id, branch))
        return "task.get", {"id": id}

    def step(self, id, branch):
        """A worker's step on a task as it last read it: acquire a pending one; finish, give back, wait on others or
        make a child of an acquired one (the last read's version: stale if another got there first)."""
        r, s = self.rng, self.space
        state = self.states.get(id)
        if state == "pending":
            return self.acquire(id)
        if state != "acquired":
            return ("task.continue", {"id": id}) if state == "halted" and r.random() < 0.5 else ("task.get", {"id": id})
        others = [other for other in (*s.children, *s.workflows) if other != id]
        family = id in s.workflows
        return self.pick(
            (2, lambda: self.fulfill(id)),
            (1.5, lambda: ("task.release", {"id": id, "version": self.version(id)})),
            (1, lambda: ("task.heartbeat", {"pid": self.pid, "tasks": [{"id": id, "version": self.version(id)}]})),
            (3 if family else 0, lambda: self.suspend(id, r.sample(others, r.choice([1, 1, 2])))),
            (2 if family else 0, lambda: self.fence(id, r.choice(s.children), branch)),
        )

    def on_schedule(self):
        id = self.rng.choice(self.space.schedules)
        return self.pick(
            (2, lambda: self.schedule_create(id)),
            (2, lambda: ("schedule.get", {"id": id})),
            (1, lambda: ("schedule.delete", {"id": id})),
        )

    def pick(self, *choices):
        weights, makers = zip(*choices, strict=True)
        return self.rng.choices(makers, weights)[0]()

    # requests

    def create(self, id, tags=None):
        r = self.rng
        timeout = r.choices([LATER, LATER + 1000, EARLIER], [6, 2, 1])[0]
        tags = {**r.choice([{}, {}, {"resonate:timer": "true"}, {"k": "v"}]), **(tags or {})}
        return "promise.create", {"id": id, "timeoutAt": timeout, "param": r.choice(PARAMS), "tags": tags}

    def task_create(self, id, tags):
        _, data = self.create(id, {"resonate:target": TARGET, **tags})
        if data["timeoutAt"] == EARLIER and self.rng.random() < 0.7:
            data["timeoutAt"] = LATER
        action = envelope("promise.create", data)
        return "task.create", {"pid": self.pid, "ttl": self.rng.choice([30_000, 60_000]), "action": action}

    def acquire(self, id):
        return "task.acquire", {"id": id, "version": self.version(id), "pid": self.pid, "ttl": 60_000}

    def settle(self, id):
        return "promise.settle", {"id": id, "state": self.rng.choice(STATES), "value": self.rng.choice(PARAMS)}

    def fulfill(self, id):
        _, settle = self.settle(id)
        return "task.fulfill", {"id": id, "version": self.version(id), "action": envelope("promise.settle", settle)}

    def suspend(self, id, awaited):
        actions = [envelope("promise.register_callback", {"awaited": a, "awaiter": id}) for a in awaited]
        return "task.suspend", {"id": id, "version": self.version(id), "actions": actions}

    def fence(self, id, child, tags):
        inner = self.create(child, tags) if self.rng.random() < 0.5 else self.settle(child)
        return "task.fence", {"id": id, "version": self.version(id), "action": envelope(*inner)}

    def listen(self, id):
        return "promise.register_listener", {"awaited": id, "address": f"poll://uni@lin/{self.name}"}

    def schedule_create(self, id):
        r = self.rng
        return "schedule.create", {
            "id": id,
            "cron": r.choice(["0 0 1 1 *", "*/5 * * * *"]),
            "promiseId": "{{.id}}.{{.timestamp}}",
            "promiseTimeout": r.choice([60_000, 120_000]),
            "promiseParam": r.choice(PARAMS),
            "promiseTags": {},
        }

    def version(self, id):
        """Mostly the version last heard of; sometimes one off, as a worker whose lease was taken over sends."""
        heard = self.versions.get(id, 0)
        return self.rng.choices([heard, heard + 1, max(heard - 1, 0)], [10, 1, 1])[0]

    def heard(self, op):
        """Learn which ids exist and the task versions a reply shows."""
        if op.known and op.status == 409:  # a task (and its promise) that is there, in another state
            self.seen.update(named_ids(op.kind, op.data))
        if not (op.known and op.status == 200 and isinstance(op.reply, dict)):
            return
        self.seen.update(id for id in named_ids(op.kind, op.data) if shown_promise(op.reply, id) is not None)
        if isinstance(op.reply.get("task"), dict):
            task = op.reply["task"]
            self.versions[task["id"]], self.states[task["id"]] = task["version"], task["state"]
            self.seen.add(task["id"])


@dataclass
class History:
    """One concurrent run: its ops (the final reads included), and what went wrong on the wire."""

    space: KeySpace
    ops: list = field(default_factory=list)
    refused: int = 0  # requests whose connection was refused: never sent, so left out of the history
    server_errors: list = field(default_factory=list)  # 5xx other than 503: a defect whatever the checker says
    crashed: list = field(default_factory=list)  # what made a client thread stop early
    started: int = 0
    ended: int = 0

    @property
    def unknown(self):
        return sum(1 for op in self.ops if not op.known)


class Runner:
    """Sends histories to the servers at `urls`: `clients` threads, each `ops` requests, then the final reads."""

    def __init__(self, urls, clients=8, ops=12, branched=False):
        self.urls, self.clients, self.ops_per_client, self.branched = list(urls), clients, ops, branched
        self.down_until = {url: 0.0 for url in self.urls}
        self.lock = threading.Lock()

    def run(self, prefix, seed):
        space = KeySpace(prefix, self.branched)
        history = History(space, started=time.monotonic_ns())
        start = threading.Barrier(self.clients)
        threads = [
            threading.Thread(target=self._client, args=(history, start, f"c{n}", random.Random(f"{seed}-{n}")))
            for n in range(self.clients)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if history.crashed:
            raise history.crashed[0]
        self._final_reads(history)
        history.ended = time.monotonic_ns()
        return history

    def script(self, prefix, steps, branched=False):
        """A history of chosen requests: steps are (seconds after the start, client, kind, data), each client's sent
        in order, each not before its time; then the final reads. For reproductions that need requests to meet."""
        space = KeySpace(prefix, branched)
        history = History(space, started=time.monotonic_ns())
        start = time.monotonic()

        def client(name):
            with httpx.Client(timeout=httpx.Timeout(READ_TIMEOUT_S, connect=2)) as http:
                for n, (at, _, kind, data) in enumerate(step for step in steps if step[1] == name):
                    time.sleep(max(0.0, start + at - time.monotonic()))
                    self._send(http, history, name, f"{prefix}-{name}-{n}", kind, data)

        threads = [threading.Thread(target=client, args=(name,)) for name in dict.fromkeys(s[1] for s in steps)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self._final_reads(history)
        history.ended = time.monotonic_ns()
        return history

    def _client(self, history, start, name, rng):
        chooser = Chooser(name, history.space, rng)
        with httpx.Client(timeout=httpx.Timeout(READ_TIMEOUT_S, connect=2)) as http:
            start.wait()
            try:
                for n in range(self.ops_per_client):
                    kind, data = chooser.next()
                    op = self._send(http, history, name, f"{history.space.prefix}-{name}-{n}", kind, data)
                    chooser.heard(op)
            except Exception as error:  # a reply that is no envelope, say: run() raises it, never a shorter history
                history.crashed.append(error)

    def _final_reads(self, history):
        """Read back every key once the clients are done; part of the history, so the checker holds them to
        everything acknowledged before. Retried until answered (a fault may still be under way)."""
        space = history.space
        reads = [("promise.get", {"id": id}) for id in space.all_promises()]
        reads += [("task.get", {"id": id}) for id in [*space.tasks, *space.workflows]]
        reads += [("schedule.get", {"id": id}) for id in space.schedules]
        deadline = time.monotonic() + 60
        with httpx.Client(timeout=httpx.Timeout(READ_TIMEOUT_S, connect=2)) as http:
            for n, (kind, data) in enumerate(reads):
                attempt = 0
                while not self._send(http, history, "final", f"{space.prefix}-final-{n}-{attempt}", kind, data).known:
                    assert time.monotonic() < deadline, f"{kind} {data} got no answer for 60 s"
                    attempt += 1
                    time.sleep(0.1)

    def _url(self):
        with self.lock:
            up = [url for url in self.urls if self.down_until[url] <= time.monotonic()]
            return random.choice(up or self.urls)

    def _send(self, http, history, client, corr_id, kind, data):
        """Send one request, retrying on another server only when the connection was refused (nothing was sent);
        record and return its Op."""
        body = orjson.dumps(
            {"kind": kind, "head": {"corrId": corr_id, "version": VERSION, DEBUG_TIME: NOW}, "data": data}
        )
        while True:
            url = self._url()
            invoked = time.monotonic_ns()
            try:
                response = http.post(f"{url}/", content=body)
                returned = time.monotonic_ns()
            except httpx.ConnectError:
                with self.lock:
                    history.refused += 1
                    self.down_until[url] = time.monotonic() + 0.5
                time.sleep(0.01)
                continue
            except httpx.HTTPError as error:  # sent, and then cut off or timed out: it may have taken effect
                return self._record(history, client, corr_id, kind, data, invoked, None, seen=(None, repr(error)))
            break
        answer = orjson.loads(response.content)
        status = answer["head"]["status"]
        assert status == response.status_code, answer
        if status >= 500:  # 503: a lost race or the database out of reach; the outcome is unknown either way
            if status != 503:
                with self.lock:
                    history.server_errors.append(f"{kind} {orjson.dumps(data).decode()} -> {status} {answer['data']}")
            return self._record(history, client, corr_id, kind, data, invoked, None, seen=(status, answer["data"]))
        return self._record(history, client, corr_id, kind, data, invoked, returned, status, answer["data"])

    def _record(self, history, client, corr_id, kind, data, invoked, returned, status=None, reply=None, seen=None):
        op = Op(
            client=client,
            kind=kind,
            data=data,
            now=NOW,
            invoked=invoked,
            returned=returned,
            status=status,
            reply=reply,
            keys=history.space.keys(kind, data),
            corr_id=corr_id,
            seen=seen,
        )
        with self.lock:
            history.ops.append(op)
        return op


def lost_writes(history):
    """Acknowledged writes the final reads do not show: a created promise missing, a settled one pending again, a
    task's version lower than one a worker was granted. (The checker finds these too; this says it plainly.)"""
    final = {}
    for op in history.ops:
        if op.client == "final" and op.known and op.status == 200:
            final[(op.kind, op.data["id"])] = op.reply
    lost = []
    for op in history.ops:
        if op.client == "final" or not op.known or op.status != 200:
            continue
        for id in named_ids(op.kind, op.data):
            shown = shown_promise(op.reply, id)
            if shown is None:
                continue
            now = final.get(("promise.get", id))
            if now is None:
                lost.append(f"{op.kind} {op.corr_id} acknowledged {id}, which the final read does not find")
            elif shown["state"] != "pending" and now["promise"]["state"] != shown["state"]:
                lost.append(f"{op.kind} {op.corr_id} saw {id} {shown['state']}, the final read {now['promise']}")
        task = op.reply.get("task") if isinstance(op.reply, dict) else None
        if isinstance(task, dict):
            now = final.get(("task.get", task["id"]))
            if now is None or now["task"]["version"] < task["version"]:
                lost.append(f"{op.kind} {op.corr_id} granted {task['id']} v{task['version']}, the final read {now}")
    return lost
