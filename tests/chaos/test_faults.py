"""Faults injected into production mode under steady load: nothing lost, nothing early, nothing doubled, and every
part serving again within 10 s of the fault's end.

Each test runs its own load (plain and sleeping workflows, timers with a listener) on the shared deployment, injects
one fault, then checks the ledger and the protocol's invariants (`manage.py invariants`). The figures go to the table
printed at the end of the run (and var/chaos.jsonl); README.md shows one such table.
"""

import os
import random
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import psycopg
import pytest

from tests.chaos.conftest import LONG, record
from tests.chaos.load import Load, Rpc, SseClient, now_ms
from tests.e2e.servers import ROOT, assert_clean_logs

pytestmark = [pytest.mark.postgres, pytest.mark.chaos]

WARMUP_S = 6 if LONG else 2
AFTER_S = 20 if LONG else 2
RATE = 30 if LONG else 12  # things started per second
RECOVERY_BOUND_S = 10


@dataclass
class Fault:
    name: str
    inject: Callable  # inject(deployment, load): returns when the fault is over


def kill_a_server_process(deployment, load):
    deployment.kill(random.choice(deployment.server_processes()))  # uvicorn starts another


def kill_serve(deployment, load):
    """supervisord starts serve again; its server processes follow it out rather than hold the port as orphans."""
    orphans = deployment.server_processes()
    deployment.kill(deployment.pid("server"))
    assert_gone(orphans, within_s=10)


def freeze_then_kill_the_server_processes(deployment, load):
    """Every server process stopped for 2 s while timers fall due, then killed (uvicorn starts others). Their Redis
    subscriptions stayed open meanwhile, so the deliverers' publishes were heard by processes that never wrote a
    line: those messages must go out again, not count as delivered."""
    frozen = deployment.server_processes()
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    time.sleep(2)
    for pid in frozen:
        deployment.kill(pid)
    assert_gone(frozen, within_s=10)


def kill_the_worker_master(deployment, load):
    orphans = deployment.children(deployment.pid("worker"))
    deployment.kill(deployment.pid("worker"))
    assert_gone(orphans, within_s=10)


def assert_gone(pids, within_s):
    deadline = time.monotonic() + within_s
    while alive := [pid for pid in pids if os.path.exists(f"/proc/{pid}") and "Z" not in state(pid)]:
        assert time.monotonic() < deadline, f"processes {alive} outlived their parent"
        time.sleep(0.1)


def state(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def kill_a_worker_child(deployment, load):
    deployment.kill(random.choice(deployment.children(deployment.pid("worker"))))


def kill_beat(deployment, load):
    deployment.kill(deployment.pid("beat"))


def redis_down(seconds):
    def inject(deployment, load):
        deployment.redis.kill()  # its data (broker queue, stream advertisements) is gone with it
        time.sleep(seconds)
        deployment.redis.start()

    return inject


def postgres(command, seconds=0, then="normal"):
    def inject(deployment, load):
        deployment.proxy(command)
        if seconds:
            time.sleep(seconds)
            deployment.proxy(then)

    return inject


def many_streams_reset(deployment, load):
    """A hundred more streams besides the load's, all cut at once (a proxy or a network between workers and us)."""
    others = [SseClient(load.host, load.port, load.group, f"idle-{n}", lambda event: None) for n in range(100)]
    for stream in others:
        stream.connected.wait(10)
    for stream in [*others, *load.streams()]:
        stream.reset()
    time.sleep(2)
    for stream in others:
        stream.close()


def streams_cut_as_they_open(deployment, load):
    """For 20 s, each of the load's streams is cut three times in a row within milliseconds of its reopening, while
    the server sets it up, then left open for 1 to 2 s (a message waits POLL_GRACE_MS, 10 s, for its stream; a
    stream cut for longer is a worker gone). Cut there, a stream used to stay registered, the oldest of its id, and
    took its worker's messages."""
    until = time.monotonic() + 20

    def cut_again_and_again(stream):
        while time.monotonic() < until:
            for _ in range(3):
                opened = stream.connects
                stream.reset()
                while stream.connects == opened and time.monotonic() < until:
                    time.sleep(0.0002)
                time.sleep(random.uniform(0, 0.003))  # the server subscribes and advertises the stream meanwhile
            time.sleep(random.uniform(1, 2))

    cutters = [threading.Thread(target=cut_again_and_again, args=(stream,)) for stream in load.streams()]
    for cutter in cutters:
        cutter.start()
    for cutter in cutters:
        cutter.join()


def slow_and_half_open_clients(deployment, load):
    """Bodies trickled a byte a second, headers never finished, connections never used, and clients that vanish
    mid-request; meanwhile /health and the load's own requests must stay fast."""
    sockets, stop = [], threading.Event()

    def connect(first):
        sock = socket.create_connection(("127.0.0.1", deployment.port))
        sockets.append(sock)
        if first:
            sock.sendall(first)
        return sock

    def trickle(sock):
        while not stop.wait(1):
            try:
                sock.sendall(b" ")
            except OSError:
                return

    post = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
    for _ in range(40):
        threading.Thread(target=trickle, args=(connect(post),), daemon=True).start()
        threading.Thread(target=trickle, args=(connect(b"POST / HTTP/1.1\r\nX-A: "),), daemon=True).start()
        connect(None)  # open, and never a byte
        connect(b"GET /health HTTP/1.1\r\n")  # half a request, then the client is gone (never closes)
    worst, until = 0.0, time.monotonic() + 10
    with httpx.Client(base_url=deployment.url, timeout=5) as http:
        while time.monotonic() < until:
            started = time.monotonic()
            assert http.get("/health").status_code == 200
            worst = max(worst, time.monotonic() - started)
            time.sleep(0.1)
    stop.set()
    for sock in sockets:
        sock.close()
    load.health_worst_s = worst


def rolling_restart(deployment, load):
    """`bin/production restart`, as an upgrade runs it: the server processes one at a time, then the worker, then
    Beat. Each server process is replaced by one that is ready first; the old one finishes what is in flight and
    ends its streams at once (their workers reconnect to the other)."""
    old = set(deployment.server_processes())
    restarted = subprocess.run(
        ["bin/production", "restart"], cwd=ROOT, env=deployment.env, capture_output=True, text=True, timeout=300
    )
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert old.isdisjoint(deployment.server_processes())


FAULTS = [
    Fault("kill -9 a server process", kill_a_server_process),
    Fault("kill -9 serve (all server processes)", kill_serve),
    Fault("server processes frozen 2 s, then killed", freeze_then_kill_the_server_processes),
    Fault("kill -9 the Celery worker master", kill_the_worker_master),
    Fault("kill -9 a Celery worker child", kill_a_worker_child),
    Fault("kill -9 Celery Beat", kill_beat),
    Fault("Redis down 2 s", redis_down(2)),
    Fault("Redis down 30 s", redis_down(30)),
    Fault("PostgreSQL connections dropped", postgres("drop")),
    Fault("PostgreSQL refusing 10 s", postgres("refuse", 10, then="accept")),
    Fault("PostgreSQL 200 ms slower for 10 s", postgres("delay 200", 10)),
    Fault("110 streams reset at once", many_streams_reset),
    Fault("streams cut as they open, 20 s", streams_cut_as_they_open),
    Fault("160 slow and half-open clients 10 s", slow_and_half_open_clients),
    Fault("rolling restart: servers, worker, Beat", rolling_restart),
]


@pytest.mark.parametrize("fault", FAULTS, ids=[fault.name for fault in FAULTS])
def test_production_mode_rides_out_the_fault_and_loses_nothing(deployment, fault):
    recovery, verdict, load, marks = ride_out(deployment, f"chaos-{uuid.uuid4().hex[:8]}", fault.inject)
    worst = round(getattr(load, "health_worst_s", 0) * 1000, 1) or None
    record(fault.name, recovery, verdict, worst, load.recovery_phases)

    assert verdict["errors"] == []
    assert verdict["lost"] == [], lost_report(deployment, load, verdict["lost"])
    assert verdict["early"] == []
    assert verdict["doubled"] == []
    # When each step of the recovery came, and the logs, say what took so long.
    steps = f"steps, s after the fault: {load.recovery_phases}"
    assert recovery <= RECOVERY_BOUND_S, f"{steps}\n{deployment.logs_since(marks)}"
    assert getattr(load, "health_worst_s", 0) < 1


def test_after_every_fault_the_state_keeps_the_protocols_invariants(deployment):
    """manage.py invariants over every row (at most one timeout per task, no callbacks on settled promises, …)."""
    checked = deployment.check()  # raises CalledProcessError on a violation
    assert "Invariants hold over" in checked.stdout


def lost_report(deployment, load, lost):
    """For each lost id, its messages as the outbox has them and, for a timer, the listener's connects and resets
    around its deadline: whether the server wrote it to a stream, and what the stream was doing then."""
    lines = []
    with psycopg.connect(deployment.direct_url, autocommit=True) as connection:
        for entry in lost:
            id = entry.split(" ")[0]
            rows = connection.execute(
                "SELECT kind, address, state, attempts, created_at, delivered_at, unreached_since, last_error"
                " FROM outbox_message WHERE subject = %s ORDER BY created_at",
                [id],
            ).fetchall()
            lines.append(f"{entry}: {rows or 'no message'}")
            if id in load.ledger.timers:
                deadline = load.ledger.timers[id]
                near = [(at - deadline, what) for at, what in load.listener.history if abs(at - deadline) < 5000]
                lines.append(f"  the listener, ms from its deadline: {near}")
    return "\n".join(lines)


def ride_out(deployment, group, inject, from_its_start=False):
    """Steady load, then inject(deployment, load), then the time until every part serves again (recovered_after,
    counted from the fault's end, or from its start), a little more load, and the ledger's verdict:
    (recovery s, verdict, load, the logs' marks from before the fault)."""
    load = Load(deployment.url, group, rate=RATE)
    try:
        load.start()
        time.sleep(WARMUP_S)
        marks = deployment.log_marks()
        started = time.monotonic()
        inject(deployment, load)
        recovery = recovered_after(deployment, load, started if from_its_start else time.monotonic())
        time.sleep(AFTER_S)
        load.stop()
        load.settle(timeout=60)
        return recovery, load.verdict(), load, marks
    finally:
        load.close()


def recovered_after(deployment, load, ended):
    """Seconds from the fault's end until every process runs, /health answers, a new workflow is executed and
    finished, and a new timer's unblock arrives (counted from its deadline). When each step came, in seconds from
    the fault's end, is left in load.recovery_phases, for a failure's message."""
    rpc = Rpc(deployment.url, deadline_s=60)
    phases = load.recovery_phases = {}

    def reached(phase):
        phases.setdefault(phase, round(time.monotonic() - ended, 2))

    while time.monotonic() - ended < 60:
        try:
            if deployment.all_running() and httpx.get(f"{deployment.url}/health", timeout=1).status_code == 200:
                break
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.1)
    reached("serving")
    probe = f"{load.group}-probe-{uuid.uuid4().hex[:6]}"
    rpc(
        "promise.create",
        {
            "id": probe,
            "timeoutAt": now_ms() + 600_000,
            "param": {"data": "plain"},
            "tags": {"resonate:target": f"poll://any@{load.group}"},
        },
    )
    while True:
        timer = f"{probe}-timer-{uuid.uuid4().hex[:4]}"
        deadline = now_ms() + 300
        rpc("promise.create", {"id": timer, "timeoutAt": deadline, "tags": {"resonate:timer": "true"}})
        _, data = rpc("promise.register_listener", {"awaited": timer, "address": f"poll://uni@{load.group}/timers"})
        if data["promise"]["state"] == "pending":
            break  # otherwise registering took past its deadline (a slow database): try another
    reached("probe and timer created")
    while time.monotonic() - ended < 60:
        with load.ledger.lock:
            executed = any(task == probe for task, _ in load.ledger.executes)
            fulfilled, unblocked = load.ledger.fulfilled[probe], load.ledger.unblocks[timer]
        if executed:
            reached("probe's execute taken up by a worker")  # its worker's thread got to it (behind a backlog)
        if fulfilled:
            reached("probe fulfilled")
        if unblocked:
            reached("timer's unblock received")
        if fulfilled and unblocked:
            return max(0.0, time.monotonic() - ended - 0.3)  # less the timer's own 300 ms
        time.sleep(0.02)
    pytest.fail(f"the deployment did not recover within 60 s (steps reached, s after the fault: {phases})")


def test_a_server_process_killed_right_after_its_commit_loses_no_message(deployment):
    """The committing process delivers its own messages; killed before it could, Beat's delivery pass sends them.

    An unblock, because nothing sends one again (an execute's retry timer would hide a loss). Redis is paused so
    that the committing process's deliverer cannot finish; every server process is then killed, and Redis
    resumed: the unblock must still reach the listener once serve is back.
    """
    group = f"commit-{uuid.uuid4().hex[:6]}"
    received = []
    stream = SseClient("127.0.0.1", deployment.port, group, "w", received.append)
    assert stream.connected.wait(20)
    rpc = Rpc(deployment.url)
    id = f"{group}-p"
    rpc("promise.create", {"id": id, "timeoutAt": now_ms() + 600_000})
    rpc("promise.register_listener", {"awaited": id, "address": f"poll://uni@{group}/w"})
    try:
        deployment.redis.pause()
        try:
            status, _ = rpc("promise.settle", {"id": id, "state": "resolved"})
            assert status == 200  # committed, with its unblock; the delivery is stuck behind the paused hub
            for pid in [*deployment.server_processes(), deployment.pid("server")]:
                deployment.kill(pid)
        finally:
            deployment.redis.resume()
        deadline = time.monotonic() + 30
        while not any(e["kind"] == "unblock" and e["data"]["promise"]["id"] == id for e in received):
            assert time.monotonic() < deadline, "the committed unblock never arrived"
            time.sleep(0.05)
    finally:
        stream.close()


def test_no_500_and_no_traceback_in_any_log_after_every_fault(deployment):
    """Faults are the world's: each is logged as one line saying what was out of reach (floor.outages). A traceback
    is a bug, and so is a 500 (a lost race or an unreachable database answers 503). A serve started while its killed
    predecessor's processes still held the port waits for it rather than fail to bind."""
    assert_clean_logs(*deployment.logs())
    assert "address already in use" not in (deployment.directory / "run" / "server.log").read_text().lower()


def test_stopping_production_mode_is_warm_and_leaves_no_traceback(deployment):
    """`bin/production ctl shutdown`, last in this module (it stops the deployment): the servers finish their requests
    and end their streams, the worker finishes its tasks (warm: its pool is not signalled), Beat stops; each exits 0
    within its stop timeout, and no log holds a traceback (pool children killed mid-task logged WorkerLostError)."""
    subprocess.run(["bin/production", "ctl", "shutdown"], cwd=ROOT, env=deployment.env, check=True, timeout=60)
    deployment.supervisord.wait(90)
    log = (deployment.directory / "run" / "supervisord.log").read_text()
    stopped = dict(re.findall(r"stopped: (\w+) \((.*?)\)", log))  # each program's last stop: this one
    assert stopped == {"server": "exit status 0", "worker": "exit status 0", "beat": "exit status 0"}
    assert_clean_logs(*deployment.logs())
