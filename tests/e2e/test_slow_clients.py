"""Slow and idle clients cannot starve the server: bodies and headers have a deadline, and neither /health nor the
protocol waits behind them (resonate_site/asgi.py, resonate_site/serving.py)."""

import socket
import threading
import time

import httpx
import orjson
import pytest

from tests.e2e.conftest import FAST

READ_TIMEOUT_S = 1.5


@pytest.fixture(scope="module")
def server_settings():
    return {**FAST, "RESONATE_READ_TIMEOUT_MS": str(int(READ_TIMEOUT_S * 1000))}


def connect(server):
    host, port = server.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def outcome(sock):
    """(what the server sent, seconds until it answered or closed)."""
    started, received = time.monotonic(), b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except OSError:
        pass
    return received, time.monotonic() - started


def trickle(sock, first, stop):
    sock.sendall(first)
    while not stop.wait(0.3):
        try:
            sock.sendall(b" ")
        except OSError:
            return


def test_slow_bodies_and_headers_hold_no_thread_and_are_cut_at_the_read_timeout(embedded):
    stop, results = threading.Event(), {}
    slow_body = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"
    slow_headers = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    clients = [("body", n, slow_body) for n in range(8)] + [("headers", n, slow_headers) for n in range(8)]
    clients += [("idle", n, None) for n in range(8)]  # connected, and never a byte

    def client(kind, n, first):
        sock = connect(embedded)
        if first is not None:
            threading.Thread(target=trickle, args=(sock, first, stop), daemon=True).start()
        results[(kind, n)] = outcome(sock)

    threads = [threading.Thread(target=client, args=spec, daemon=True) for spec in clients]
    for thread in threads:
        thread.start()
    time.sleep(0.3)  # every slow client is connected: more than the server has threads (RESONATE_WSGI_THREADS)

    worst_health, worst_protocol = 0.0, 0.0
    envelope = {"kind": "promise.get", "head": {"corrId": "1", "version": "2026-04-01"}, "data": {"id": "nothing"}}
    with httpx.Client(base_url=embedded.url, timeout=5) as http:
        while any(thread.is_alive() for thread in threads):
            started = time.monotonic()
            assert http.get("/health").status_code == 200
            worst_health = max(worst_health, time.monotonic() - started)
            started = time.monotonic()
            assert http.post("/", content=orjson.dumps(envelope)).status_code == 404
            worst_protocol = max(worst_protocol, time.monotonic() - started)
            time.sleep(0.05)
    stop.set()

    assert worst_health < 1 and worst_protocol < 1  # held up, they would wait out the read timeout (1.5 s)
    for (kind, _), (received, seconds) in results.items():
        assert seconds < READ_TIMEOUT_S + 1.5, (kind, seconds)
        if kind == "body":
            assert received.startswith(b"HTTP/1.1 408")
            body = received.split(b"\r\n\r\n", 1)[1]
            assert orjson.loads(body)["head"]["status"] == 408  # an envelope, as on every answer of POST /
        else:
            assert received == b""  # closed: nothing to answer to a request that never arrived


def test_a_body_declared_larger_than_the_limit_is_refused_before_it_is_read(embedded):
    sock = connect(embedded)
    sock.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 999999999999\r\n\r\n")
    received, seconds = outcome(sock)
    assert received.startswith(b"HTTP/1.1 413") and seconds < 1
