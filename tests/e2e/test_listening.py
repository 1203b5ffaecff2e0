"""serve --workers N gives each server process a listening socket of its own on the port (SO_REUSEPORT,
resonate_site.serving.listening_socket), so that new connections are spread over the processes; a process started in
another's place takes over its socket, SIGTTIN adds a socket with its process and SIGTTOU closes the one it takes away.
The sockets are read from /proc: which listening sockets the port has, and which process holds each connection."""

import os
import signal
import socket
import threading
import time

import pytest

from resonate_site.management.commands.serve import Command
from resonate_site.serving import RollingRestarts, listening_socket
from tests.e2e.conftest import production_env
from tests.e2e.servers import Process, eventually, free_port, runtime_python, server_processes, wait_ready

REDIS_URL = "redis://127.0.0.1:6379/9"
BODY = b'{"kind":"promise.get","head":{"corrId":"a","version":"2026-04-01"},"data":{"id":"none"}}'
REQUEST = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(BODY),
    BODY,
)
ANSWERED = b"HTTP/1.1 404 Not Found"  # the protocol's answer: no promise "none"


def tcp_sockets(port, state):
    """{inode} of this machine's IPv4 TCP sockets in `state` ("0A" listening, "01" established) on local `port`."""
    found = set()
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            if int(fields[1].split(":")[1], 16) == port and fields[3] == state:
                found.add(int(fields[9]))
    return found


def sockets_held(pid):
    """{inode} of the sockets a process holds open."""
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            found.add(int(target[8:-1]))
    return found


def listeners(serve_pid, port):
    """{listening socket: the server processes that hold it} for the port, once each is held by exactly one; None
    before (a process starting, or one gone that its replacement has not yet taken over)."""
    held = {pid: sockets_held(pid) for pid in server_processes(serve_pid)}
    found = {inode: {pid for pid, inodes in held.items() if inode in inodes} for inode in tcp_sockets(port, "0A")}
    return {inode: pids.pop() for inode, pids in found.items()} if all(len(p) == 1 for p in found.values()) else None


def listening(serve_pid, port, count=2, timeout=20):
    """listeners() once the port has `count` listening sockets, each held by one server process."""
    return eventually(lambda: (found := listeners(serve_pid, port)) and len(found) == count and found or None, timeout)


def answer_all(serve_pid, port, count):
    """Open `count` connections at once, then ask promise.get on each: [the answer's first line] and {server process:
    connections it holds} while they are still open."""
    connections = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]
    try:
        replies = [None] * count

        def ask(index):
            connections[index].sendall(REQUEST)
            replies[index] = connections[index].recv(65536).split(b"\r\n", 1)[0]

        threads = [threading.Thread(target=ask, args=(index,)) for index in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        return replies, held_connections(serve_pid, port)
    finally:
        for connection in connections:
            connection.close()


def held_connections(serve_pid, port):
    """{server process: connections accepted on the port that it holds}, for each that holds one."""
    established = tcp_sockets(port, "01")
    held = {pid: len(sockets_held(pid) & established) for pid in server_processes(serve_pid)}
    return {pid: count for pid, count in held.items() if count}


@pytest.fixture
def serve(database_url, tmp_path):
    """manage.py serve --workers 2 in production mode: (its process, its port)."""
    port = free_port()
    env = production_env(database_url, REDIS_URL, RESONATE_AUTH_DISABLED="true")
    command = ["manage.py", "serve", "--port", str(port), "--workers", "2", "--log-level", "warning"]
    process = Process(command, env, tmp_path / "serve.log", python=runtime_python())
    wait_ready(f"http://127.0.0.1:{port}", process)
    yield process, port
    process.stop()


@pytest.mark.postgres
def test_each_server_process_accepts_on_a_socket_of_its_own_and_connections_opened_at_once_are_spread(serve):
    process, port = serve
    sockets = listening(process.popen.pid, port)
    assert sorted(sockets.values()) == sorted(server_processes(process.popen.pid))
    replies, held = answer_all(process.popen.pid, port, 32)
    assert replies == [ANSWERED] * 32
    assert set(held) == set(sockets.values())
    # The kernel picks a socket by a hash of each connection's addresses: fewer than 5 of 32 for one process comes
    # about once in 50,000 runs. With one socket for both, the process that woke first took most of a burst.
    assert min(held.values()) >= 5, held


@pytest.mark.postgres
def test_a_process_started_in_place_of_one_that_died_takes_over_its_socket(serve):
    process, port = serve
    first = listening(process.popen.pid, port)
    crashed = next(iter(first.values()))
    os.kill(crashed, signal.SIGKILL)

    def replaced():
        found = listeners(process.popen.pid, port)
        return found if found and crashed not in found.values() else None

    again = eventually(replaced, timeout=60)
    assert set(again) == set(first)  # the same two sockets, the crashed one's now held by its replacement
    replies, held = answer_all(process.popen.pid, port, 16)
    assert replies == [ANSWERED] * 16
    assert set(held) <= set(again.values())


def started_instead(serve_pid, before, timeout=20):
    """(the server process not among `before`, the time.monotonic() it was first seen), looked for every 5 ms."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = set(server_processes(serve_pid)) - before
        if new:
            return new.pop(), time.monotonic()
        time.sleep(0.005)
    raise AssertionError(f"no process started within {timeout} s")


@pytest.mark.postgres
def test_a_process_that_dies_is_replaced_at_once_and_one_that_dies_as_it_starts_only_after_restart_s(serve):
    process, port = serve
    serve_pid = process.popen.pid
    listening(serve_pid, port)
    # Each process of the two, twice: uvicorn's supervisor looked every 0.5 s, and a replacement came 0-0.5 s after
    # the death (all four within 0.25 s about one run in 16).
    waits = []
    for _ in range(2):
        time.sleep(RollingRestarts.RESTART_S)  # each process started at least that long ago: none waits to start again
        for crashed in server_processes(serve_pid):
            before = set(server_processes(serve_pid))
            killed = time.monotonic()
            os.kill(crashed, signal.SIGKILL)
            waits.append(started_instead(serve_pid, before)[1] - killed)
        listening(serve_pid, port, timeout=60)
    assert max(waits) < 0.25, waits
    # One that dies as it starts is started again RESTART_S after its last start, not in a loop.
    before = set(server_processes(serve_pid))
    os.kill(before.pop(), signal.SIGKILL)
    starting, seen = started_instead(serve_pid, set(server_processes(serve_pid)) | before)
    os.kill(starting, signal.SIGKILL)
    _, again = started_instead(serve_pid, set(server_processes(serve_pid)) | {starting})
    assert again - seen >= RollingRestarts.RESTART_S - 0.1, again - seen
    sockets = listening(serve_pid, port, timeout=60)
    replies, held = answer_all(serve_pid, port, 16)
    assert replies == [ANSWERED] * 16
    assert set(held) <= set(sockets.values())


@pytest.mark.postgres
def test_a_process_that_hangs_is_replaced_once_it_has_not_answered_its_health_check_for_5_s(serve):
    process, port = serve
    serve_pid = process.popen.pid
    first = listening(serve_pid, port)
    time.sleep(RollingRestarts.STARTING_S)  # asked its health from then on
    hung = next(iter(first.values()))
    before = set(server_processes(serve_pid))
    stopped = time.monotonic()
    os.kill(hung, signal.SIGSTOP)
    _, seen = started_instead(serve_pid, before, timeout=30)
    # Asked within CHECK_S, then 5 s to answer (uvicorn's timeout_worker_healthcheck).
    assert 5 <= seen - stopped < 5 + RollingRestarts.CHECK_S + 2, seen - stopped
    assert hung not in server_processes(serve_pid)  # killed, not left stopped
    again = listening(serve_pid, port, timeout=60)
    assert set(again) == set(first) and hung not in again.values()
    replies, _ = answer_all(serve_pid, port, 16)
    assert replies == [ANSWERED] * 16


@pytest.mark.postgres
def test_sigttin_adds_a_process_with_a_socket_of_its_own_and_sigttou_closes_the_socket_of_the_one_it_stops(serve):
    process, port = serve
    first = listening(process.popen.pid, port)
    os.kill(process.popen.pid, signal.SIGTTIN)
    three = listening(process.popen.pid, port, 3)
    assert set(first) < set(three)
    assert len(set(three.values())) == 3
    os.kill(process.popen.pid, signal.SIGTTOU)
    again = listening(process.popen.pid, port)
    assert again == first
    # No connection goes to the closed socket, where nobody would accept it: each is answered.
    replies, _ = answer_all(process.popen.pid, port, 16)
    assert replies == [ANSWERED] * 16


def test_serve_does_not_take_a_port_another_holds_even_one_that_its_sockets_could_share():
    port = free_port()
    held = listening_socket("127.0.0.1", port)  # as another serve's server process holds it
    held.listen()
    try:
        assert Command().wait_for_the_port("127.0.0.1", port, timeout_s=0.3) is False
    finally:
        held.close()
    assert Command().wait_for_the_port("127.0.0.1", port, timeout_s=0.3) is True


@pytest.fixture
def signals_kept():
    """uvicorn's supervisor takes over the process's signal handlers as it is made: they are put back."""
    from uvicorn.supervisors.multiprocess import SIGNALS

    kept = {number: signal.getsignal(number) for number in SIGNALS}
    yield
    for number, handler in kept.items():
        signal.signal(number, handler)


@pytest.mark.parametrize("spreads", [True, False])
def test_the_supervisor_binds_a_socket_per_process_where_the_kernel_spreads_connections_and_one_elsewhere(
    signals_kept, monkeypatch, spreads
):
    import uvicorn

    from resonate_site import serving

    monkeypatch.setattr(serving, "SPREADS_CONNECTIONS", spreads)
    config = uvicorn.Config("resonate_site.asgi:application", host="127.0.0.1", port=free_port(), workers=3)
    supervisor = serving.RollingRestarts(config)
    try:
        assert len(supervisor.slots) == 3
        assert {sock.getsockname() for sock in supervisor.slots} == {("127.0.0.1", config.port)}
        assert len({id(sock) for sock in supervisor.slots}) == (3 if spreads else 1)
    finally:
        for sock in {id(sock): sock for sock in supervisor.slots}.values():
            sock.close()
