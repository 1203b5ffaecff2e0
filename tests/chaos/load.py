"""Steady load on a running deployment, and a ledger of everything it must see happen.

Simulated workers speak the protocol as the SDKs do: an SSE stream each, `task.acquire` on execute, then
either `task.fulfill` (a plain workflow) or a child timer and `task.suspend` (a sleeping workflow, finished
on its next execute). A producer starts plain and sleeping workflows and timers with a listener. Every
request is retried until it succeeds (5xx, resets and timeouts are what the faults cause), and the ledger
records what each stream received, so that afterwards nothing may be missing, early or doubled.
"""

import contextlib
import itertools
import queue
import random
import socket
import struct
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import httpx
import orjson

VERSION = "2026-04-01"


def now_ms():
    return time.time_ns() // 1_000_000


class Unanswered(Exception):
    """A request that never got a non-5xx answer within its deadline."""


class Rpc:
    """POST / with retries: what a client does when the server, its database or the network has a fault."""

    def __init__(self, url, deadline_s=60):
        self.url, self.deadline_s = url, deadline_s
        self.http = httpx.Client(base_url=url, timeout=httpx.Timeout(10, connect=2))
        self.ids = itertools.count()
        self.retries = 0
        self.latencies = []  # seconds, of answered requests (retries included)

    def __call__(self, kind, data):
        started = time.monotonic()
        delay = 0.05
        while True:
            head = {"corrId": f"chaos-{next(self.ids)}", "version": VERSION}
            try:
                response = self.http.post("/", content=orjson.dumps({"kind": kind, "head": head, "data": data}))
                if response.status_code < 500:
                    envelope = response.json()
                    assert envelope["head"]["status"] == response.status_code, envelope
                    self.latencies.append(time.monotonic() - started)
                    return response.status_code, envelope["data"]
                assert response.headers["content-type"] == "application/json", response.text  # never an HTML page
            except httpx.HTTPError:
                pass
            self.retries += 1
            if time.monotonic() - started > self.deadline_s:
                raise Unanswered(f"{kind} {data} unanswered for {self.deadline_s} s")
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


class SseClient:
    """GET /poll/{group}/{id} on a raw socket, reconnecting after a second as the SDKs do; reset() cuts it with RST."""

    def __init__(self, host, port, group, id, on_event):
        self.host, self.port, self.group, self.id, self.on_event = host, port, group, id, on_event
        self.sock = None
        self.closing = False
        self.connects = 0
        self.history = []  # (ms, "open" | "reset" | "ended"): what a lost message's report shows beside its row
        self.connected = threading.Event()
        threading.Thread(target=self.run, daemon=True, name=f"sse-{id}").start()

    def run(self):
        while not self.closing:
            with contextlib.suppress(OSError):
                self.read()
            self.history.append((now_ms(), "ended"))
            self.connected.clear()
            if not self.closing:
                time.sleep(random.uniform(0.5, 1.0))

    def read(self):
        with socket.create_connection((self.host, self.port), timeout=5) as sock:
            self.sock = sock
            self.read_from(sock)

    def read_from(self, sock):
        sock.sendall(f"GET /poll/{self.group}/{self.id} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
        sock.settimeout(60)
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            if not chunk:
                return
            buffer += chunk
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        if b" 200 " not in head.split(b"\r\n", 1)[0]:
            return
        self.connects += 1
        self.history.append((now_ms(), "open"))
        self.connected.set()
        data = b""
        while True:
            # chunked transfer encoding: size line, data, CRLF
            while b"\r\n" not in buffer:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                buffer += chunk
            size_line, buffer = buffer.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                return
            while len(buffer) < size + 2:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                buffer += chunk
            data += buffer[:size]
            buffer = buffer[size + 2 :]
            while b"\n\n" in data:
                event, data = data.split(b"\n\n", 1)
                for line in event.split(b"\n"):
                    if line.startswith(b"data: "):
                        self.on_event(orjson.loads(line[6:]))

    def reset(self):
        """Cut the connection as a dying host or network does: RST, and whatever was in flight to us is lost."""
        sock = self.sock
        if sock is not None:
            self.history.append((now_ms(), "reset"))
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RDWR)  # wakes the reading thread, which closes it (close alone would not)

    def close(self):
        self.closing = True
        self.reset()


@dataclass
class Ledger:
    """What was started, and what the streams and answers showed."""

    workflows: dict = field(default_factory=dict)  # id → kind ("plain" or "sleep")
    timers: dict = field(default_factory=dict)  # id → timeoutAt, for timers whose listener was registered in time
    executes: Counter = field(default_factory=Counter)  # (task id, version) → times received
    unblocks: dict = field(default_factory=lambda: defaultdict(list))  # promise id → [(settledAt, state, received)]
    fulfilled: Counter = field(default_factory=Counter)  # workflow id → successful task.fulfill answers
    lock: threading.Lock = field(default_factory=threading.Lock)


class Worker:
    """A simulated SDK worker of a group: its own stream, and a thread that runs its tasks."""

    def __init__(self, load, id):
        self.load, self.id = load, id
        self.rpc = Rpc(load.url)
        self.events = queue.Queue()
        self.stream = SseClient(load.host, load.port, load.group, id, self.events.put)
        threading.Thread(target=self.run, daemon=True, name=f"worker-{id}").start()

    def run(self):
        while True:
            event = self.events.get()
            if event is None:
                return
            try:
                if event["kind"] == "execute":
                    self.execute(event["data"]["task"])
            except Exception as error:  # reported as itself, not as the work it left undone
                self.load.errors.append(repr(error))

    def execute(self, task):
        ledger = self.load.ledger
        with ledger.lock:
            ledger.executes[(task["id"], task["version"])] += 1
        status, data = self.rpc("task.acquire", {**task, "pid": self.id, "ttl": 10_000})
        if status != 200:
            return  # another worker has it, or it is done: a re-sent execute
        version, promise = data["task"]["version"], data["promise"]
        kind = promise["param"].get("data", "plain")
        if kind.startswith("sleep:"):
            child = f"{task['id']}.sleep"
            wake = int(kind.split(":")[1])
            self.rpc("promise.create", {"id": child, "timeoutAt": wake, "tags": {"resonate:timer": "true"}})
            callback = {
                "kind": "promise.register_callback",
                "head": {},
                "data": {"awaited": child, "awaiter": task["id"]},
            }
            status, _ = self.rpc("task.suspend", {"id": task["id"], "version": version, "actions": [callback]})
            if status != 300:
                return  # suspended (200), or the lease was lost meanwhile (409): the next execute finishes it
        settle = {"id": task["id"], "state": "resolved", "value": {"data": f"done:{task['id']}"}}
        status, _ = self.rpc(
            "task.fulfill",
            {"id": task["id"], "version": version, "action": {"kind": "promise.settle", "head": {}, "data": settle}},
        )
        if status == 200:
            with ledger.lock:
                ledger.fulfilled[task["id"]] += 1

    def close(self):
        self.stream.close()
        self.events.put(None)


class Load:
    """Workers, a timer listener and a producer on one deployment, for one fault."""

    def __init__(self, url, group, workers=4, rate=12):
        self.url, self.group, self.rate = url, group, rate
        self.host, self.port = url.removeprefix("http://").split(":")
        self.port = int(self.port)
        self.ledger = Ledger()
        self.errors = []
        self.rpc = Rpc(url)
        self.workers = [Worker(self, f"w{n}") for n in range(workers)]
        self.listener = SseClient(self.host, self.port, group, "timers", self.unblocked)
        self.producing = False
        for stream in self.streams():
            assert stream.connected.wait(20), f"stream {stream.id} did not open"

    def streams(self):
        return [self.listener, *(worker.stream for worker in self.workers)]

    def unblocked(self, event):
        if event["kind"] == "unblock":
            promise = event["data"]["promise"]
            with self.ledger.lock:
                self.ledger.unblocks[promise["id"]].append((promise.get("settledAt"), promise["state"], now_ms()))

    def start(self):
        self.producing = True
        self.thread = threading.Thread(target=self.produce, daemon=True, name="producer")
        self.thread.start()

    def stop(self):
        self.producing = False
        self.thread.join(120)

    def produce(self):
        for n in itertools.count():
            if not self.producing:
                return
            started = time.monotonic()
            try:
                self.start_one(n)
            except Exception as error:
                self.errors.append(repr(error))
            time.sleep(max(0.0, 1 / self.rate - (time.monotonic() - started)))

    def start_one(self, n):
        kind = ("plain", "sleep", "timer")[n % 3]
        id = f"{self.group}-{kind}-{n}"
        target = {"resonate:target": f"poll://any@{self.group}"}
        if kind == "timer":
            deadline = now_ms() + random.randint(500, 1500)
            self.rpc("promise.create", {"id": id, "timeoutAt": deadline, "tags": {"resonate:timer": "true"}})
            listener = {"awaited": id, "address": f"poll://uni@{self.group}/timers"}
            _, data = self.rpc("promise.register_listener", listener)
            if data["promise"]["state"] == "pending":  # registered in time (P-05): its unblock is due
                self.ledger.timers[id] = deadline
            return
        param = {"data": "plain"} if kind == "plain" else {"data": f"sleep:{now_ms() + 1000}"}
        self.rpc("promise.create", {"id": id, "timeoutAt": now_ms() + 600_000, "param": param, "tags": target})
        self.ledger.workflows[id] = kind

    def settle(self, timeout=60):
        """Wait until every workflow is finished and every timer's unblock arrived, or `timeout` passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.missing():
                return
            time.sleep(0.2)

    def missing(self):
        ledger = self.ledger
        with ledger.lock:
            return [id for id in ledger.workflows if not ledger.fulfilled[id]] + [
                id for id in ledger.timers if not ledger.unblocks[id]
            ]

    def close(self):
        for worker in self.workers:
            worker.close()
        self.listener.close()

    def verdict(self):
        """What the ledger shows: lost, duplicated, doubled, early, and how late the timers were."""
        ledger, rpc = self.ledger, Rpc(self.url)
        lost = self.missing()
        doubled = [id for id, count in ledger.fulfilled.items() if count > 1]
        for id, kind in ledger.workflows.items():  # the record agrees with what the worker did, exactly once
            status, data = rpc("promise.get", {"id": id})
            if status == 404:  # acknowledged, then gone (a failover to a standby that never received it)
                lost.append(f"{id} ({kind}): gone")
                continue
            if data["promise"]["state"] != "resolved" or data["promise"]["value"].get("data") != f"done:{id}":
                lost.append(f"{id} ({kind}): {data['promise']['state']}")
        duplicated, early, lateness = [], [], []
        for id, deadline in ledger.timers.items():
            received = ledger.unblocks.get(id, [])
            if len(received) > 1:
                duplicated.append(id)
            settlements = {(settled_at, state) for settled_at, state, _ in received}
            if len(settlements) > 1:
                doubled.append(id)
            for settled_at, state, at in received:
                if state != "resolved" or settled_at != deadline or at < deadline:
                    early.append((id, deadline, settled_at, state, at))
            if received:
                lateness.append(received[0][2] - deadline)
        resent = sum(count - 1 for count in ledger.executes.values() if count > 1)
        return {
            "workflows": len(ledger.workflows),
            "timers": len(ledger.timers),
            "lost": lost,
            "duplicated": duplicated,
            "doubled": doubled,
            "early": early,
            "executes re-sent": resent,
            "timer lateness p99 ms": percentile(lateness, 99),
            "errors": self.errors,
            "retries": sum(r.retries for r in [self.rpc, *(w.rpc for w in self.workers)]),
        }


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]
