"""POST / answered directly (resonate_site.serving.GuardedHttpProtocol): a small body with its length declared goes
whole to the application's `direct.answer`, with no ASGI task, and its reply is written in one piece; anything else
takes the ASGI path. Driven over real sockets against uvicorn with the server's own protocol; the server's own
`answer_directly` (resonate_site/asgi.py) is checked against the ASGI path's answers at the end."""

import asyncio
import json
import logging
import socket
import time
import types

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resonate_site.protocol.dispatch import OPERATIONS
from resonate_site.serving import DIRECT_BODY_BYTES, ProtocolRequests
from tests.conftest import guarded_uvicorn
from tests.test_fuzz import one_of_weighted


class App:
    """An ASGI application that offers `direct`, as resonate_site.asgi's does, and records which path each POST took.

    Its answer echoes the body, with status 200; a body of b"raise" raises, and b"later" is answered 0.3 s later
    from the loop (as a request answered on the protocol's threads is)."""

    def __init__(self):
        self.asgi, self.direct_bodies, self.open_seen, self.replies = [], [], [], []
        self.direct = types.SimpleNamespace(answer=self.answer, refused=self.refused)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["method"] == "POST":  # other requests (a stream's GET from elsewhere) are no concern here
            self.asgi.append(body)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def answer(self, scope, body, reply):
        self.direct_bodies.append(body)
        self.open_seen.append(ProtocolRequests.open)
        if body == b"raise":
            raise RuntimeError("the application failed")
        if body == b"later":
            asyncio.get_running_loop().call_later(0.3, lambda: self.replies.append(reply(200, body)))
            return
        reply(200, body, close=body == b"close")

    @staticmethod
    def refused(status, message):
        return status, orjson.dumps({"refused": message})


class Client:
    """A raw HTTP/1.1 client on one connection: what is sent is exactly what the test writes."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buffer = b""

    def post(self, body, extra=b"", host=b"127.0.0.1"):
        self.sock.sendall(request(body, extra, host))

    def response(self):
        """(status, headers as a dict, body) of the next response on the connection."""
        while b"\r\n\r\n" not in self.buffer:
            self._more()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *lines = head.split(b"\r\n")
        if status_line.split()[1] == b"100":  # the interim answer to Expect: 100-continue: the answer follows
            return self.response()
        headers = dict(line.lower().split(b": ", 1) for line in lines)
        length = int(headers[b"content-length"])
        while len(self.buffer) < length:
            self._more()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(status_line.split()[1]), headers, body

    def closed_by_the_server(self):
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _more(self):
        chunk = self.sock.recv(65536)
        assert chunk, "the server closed the connection"
        self.buffer += chunk

    def close(self):
        self.sock.close()


def request(body, extra=b"", host=b"127.0.0.1"):
    return b"POST / HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n%s\r\n%s" % (host, len(body), extra, body)


def wait_until(condition, message, seconds=5):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(0.01)


@pytest.fixture
def served():
    app = App()
    with guarded_uvicorn(app) as port:
        yield app, port
    wait_until(lambda: ProtocolRequests.open == 0, "a request still counts as open after the test")


def test_a_small_post_is_answered_directly_with_the_headers_the_asgi_path_sends(served):
    app, port = served
    client = Client(port)
    client.post(b'{"kind":"promise.get"}')
    status, headers, body = client.response()
    assert (status, body) == (200, b'{"kind":"promise.get"}')
    assert app.direct_bodies == [b'{"kind":"promise.get"}'] and app.asgi == []
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"x-content-type-options"] == b"nosniff"
    assert {b"date", b"server"} <= headers.keys()  # uvicorn's default headers, as on the ASGI path
    assert b"connection" not in headers  # kept alive
    client.close()


def test_requests_kept_alive_and_pipelined_are_each_answered_in_order(served):
    app, port = served
    client = Client(port)
    for n in range(3):
        client.post(b"%d" % n)
        assert client.response()[2] == b"%d" % n
    client.sock.sendall(request(b"a") + request(b"b") + request(b"c"))  # one write: the last two wait their turn
    assert [client.response()[2] for _ in range(3)] == [b"a", b"b", b"c"]
    assert app.direct_bodies == [b"0", b"1", b"2", b"a", b"b", b"c"] and app.asgi == []
    client.close()


def test_a_body_that_arrives_in_pieces_is_answered_once_it_is_whole(served):
    app, port = served
    client = Client(port)
    body = b'{"kind": "promise.create", "data": {"id": "pieces"}}'
    client.sock.sendall(request(body)[: -len(body)])
    for start in range(0, len(body), 20):
        time.sleep(0.05)
        assert app.direct_bodies == []
        client.sock.sendall(body[start : start + 20])
    assert client.response()[2] == body
    assert app.direct_bodies == [body]
    client.close()


@pytest.mark.parametrize(
    "raw",
    [
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n{}",
        request(b"x" * (DIRECT_BODY_BYTES + 1)),
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",  # no length declared: no body
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 00000000000000000002\r\n\r\n{}",
    ],
    ids=["chunked", "100-continue", "larger than the direct limit", "no content-length", "a length of 20 digits"],
)
def test_what_the_direct_path_does_not_take_is_answered_on_the_asgi_path(served, raw):
    app, port = served
    client = Client(port)
    client.sock.sendall(raw)
    status, _, body = client.response()
    assert status == 200 and app.asgi == [body] and app.direct_bodies == []
    client.close()


def test_a_client_that_asks_to_close_or_speaks_http_1_0_is_answered_and_closed(served):
    app, port = served
    for raw in (request(b"1", b"Connection: close\r\n"), request(b"2").replace(b"HTTP/1.1", b"HTTP/1.0")):
        client = Client(port)
        client.sock.sendall(raw)
        status, headers, _ = client.response()
        assert (status, headers[b"connection"]) == (200, b"close")
        assert client.closed_by_the_server()
        client.close()
    assert app.direct_bodies == [b"1", b"2"]


def test_an_answer_that_asks_to_close_closes_the_connection(served):
    app, port = served
    client = Client(port)
    client.post(b"close")
    status, headers, _ = client.response()
    assert (status, headers[b"connection"]) == (200, b"close")
    assert client.closed_by_the_server()
    client.close()


def test_requests_count_as_open_from_their_headers_to_their_answer(served):
    app, port = served
    first, second = Client(port), Client(port)
    first.post(b"later")  # open until answered, 0.3 s from now
    wait_until(lambda: app.direct_bodies == [b"later"], "the first request was not answered")
    second.post(b"now")
    assert second.response()[2] == b"now"
    assert first.response()[2] == b"later"
    assert app.open_seen == [1, 2]  # the second found the first still open
    assert ProtocolRequests.open == 0
    first.close()
    second.close()


def test_a_request_counts_as_open_while_its_body_is_still_coming(served):
    app, port = served
    coming, whole = Client(port), Client(port)
    coming.sock.sendall(request(b"first")[:-2])
    wait_until(lambda: ProtocolRequests.open == 1, "a request with its headers read does not count")
    whole.post(b"second")
    assert whole.response()[2] == b"second"
    coming.sock.sendall(b"st")
    assert coming.response()[2] == b"first"
    assert app.open_seen == [2, 1]  # the second found the first open; the first, once whole, found itself alone
    coming.close()
    whole.close()


def test_a_body_that_does_not_arrive_in_time_is_refused_with_408_and_the_connection_closed(served, settings):
    settings.RESONATE = {**settings.RESONATE, "READ_TIMEOUT_MS": 300}
    app, port = served
    client = Client(port)
    client.sock.sendall(request(b"{}")[:-1])  # one byte short
    started = time.monotonic()
    status, headers, body = client.response()
    assert status == 408 and headers[b"connection"] == b"close"
    assert orjson.loads(body) == {"refused": "Request body not received within 0.3 s"}
    assert 0.3 <= time.monotonic() - started < 2
    assert client.closed_by_the_server()
    assert app.direct_bodies == []
    client.close()


def test_a_client_that_leaves_mid_body_stops_counting_and_is_never_answered(served):
    app, port = served
    client = Client(port)
    client.sock.sendall(request(b"{}")[:-1])
    wait_until(lambda: ProtocolRequests.open == 1, "the request does not count")
    client.close()
    wait_until(lambda: ProtocolRequests.open == 0, "a request whose client left still counts")
    time.sleep(0.1)
    assert app.direct_bodies == []


def test_a_client_that_leaves_before_its_answer_stops_counting_and_its_late_answer_is_dropped(served, caplog):
    app, port = served
    client = Client(port)
    client.post(b"later")
    wait_until(lambda: app.direct_bodies == [b"later"], "the request was not answered")
    client.close()
    wait_until(lambda: app.replies == [None], "the late answer was not given")
    assert ProtocolRequests.open == 0
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    again = Client(port)  # the server goes on
    again.post(b"next")
    assert again.response()[2] == b"next"
    again.close()


def test_an_application_that_raises_answers_500_closes_the_connection_and_says_why_in_the_log(served, caplog):
    app, port = served
    client = Client(port)
    with caplog.at_level(logging.ERROR, logger="resonate_site.serving"):
        client.post(b"raise")
        status, headers, body = client.response()
    assert (status, headers[b"connection"]) == (500, b"close")
    assert orjson.loads(body) == {"refused": "Internal server error"}
    assert client.closed_by_the_server()
    assert any("the application failed" in str(record.exc_info[1]) for record in caplog.records if record.exc_info)
    client.close()


def test_an_application_without_direct_is_served_on_the_asgi_path():
    app = App()
    del app.direct

    async def plain(scope, receive, send):
        await app(scope, receive, send)

    with guarded_uvicorn(plain) as port:
        client = Client(port)
        client.post(b"asgi")
        assert client.response()[:1] == (200,)
        client.close()
    assert app.asgi == [b"asgi"]


# The server's own answer_directly, against what its ASGI path answers for the same bodies.

BODIES = [
    b'{"kind": "promise.get", "head": {"corrId": "c1", "version": "2026-04-01"}, "data": {"id": "nowhere"}}',
    b'{"kind": "promise.get", "head": {"corrId": "c2"}, "data": {"id": "nowhere"}}',
    b"not json",
    b"[]",
]


def asgi_answer(application, body, host=b"127.0.0.1"):
    sent = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return messages.pop() if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [(b"host", host)], "query_string": b""}
    asyncio.run(application(scope, receive, send))
    headers = dict(sent[0]["headers"])
    return sent[0]["status"], sent[1]["body"], headers.get(b"connection") == b"close"


def direct_answer(application, body, host=b"127.0.0.1", open_besides=0):
    replies = []

    async def run():
        ProtocolRequests.open += 1 + open_besides  # as the protocol counts it; others open: not inline
        try:
            done = asyncio.get_running_loop().create_future()
            scope = {"type": "http", "method": "POST", "path": "/", "headers": [(b"host", host)]}

            def reply(status, answer, close=False):
                replies.append((status, answer, close))
                done.set_result(None)

            application.direct.answer(scope, body, reply)
            await asyncio.wait_for(done, 10)
        finally:
            ProtocolRequests.open -= 1 + open_besides

    asyncio.run(run())
    assert len(replies) == 1
    return replies[0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("open_besides", [0, 3], ids=["alone: inline", "with others open: elsewhere"])
def test_the_servers_direct_answers_are_its_asgi_answers(open_besides):
    from resonate_site.asgi import application

    assert application.direct is not None  # not traced: the direct path is on
    for body in BODIES:
        assert direct_answer(application, body, open_besides=open_besides) == asgi_answer(application, body)
    refused = direct_answer(application, BODIES[0], host=b"evil.example")
    assert refused == asgi_answer(application, BODIES[0], host=b"evil.example")
    assert refused[0] == 400 and refused[2] is True


READS = ["promise.get", "task.get", "schedule.get", "promise.search", "task.search", "schedule.search"]


def read_envelopes():
    """Envelopes of the read operations (nothing they do is written): mostly well formed, with data that may not be,
    and now and then any head, kind or shape."""
    from tests.test_fuzz import JSON, TEXT

    good_head = st.fixed_dictionaries({"corrId": TEXT, "version": st.just("2026-04-01")})
    head = one_of_weighted((4, good_head), (1, JSON))
    kind = one_of_weighted((6, st.sampled_from(READS)), (1, TEXT.filter(lambda kind: kind not in OPERATIONS)))
    data = one_of_weighted(
        (4, st.fixed_dictionaries({"id": one_of_weighted((4, st.sampled_from(["a", "b"])), (1, TEXT))})),
        (2, st.fixed_dictionaries({}, optional={"id": TEXT | JSON, "limit": JSON, "tags": JSON, "state": JSON})),
        (1, JSON),
    )
    return one_of_weighted(
        (8, st.fixed_dictionaries({"kind": kind, "head": head, "data": data})),
        (1, st.fixed_dictionaries({}, optional={"kind": kind | JSON, "head": head, "data": data})),
    )


@pytest.mark.django_db(transaction=True)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.one_of(
        st.binary(max_size=64),
        st.builds(lambda value: json.dumps(value).encode(), read_envelopes()),
        st.builds(lambda value: json.dumps(value).encode(), st.from_regex(r"\A[ -~]{0,20}\Z") | st.integers()),
    ),
    open_besides=st.sampled_from([0, 3]),
)
def test_any_body_gets_the_same_answer_directly_as_through_asgi(body, open_besides):
    from resonate_site.asgi import application

    assert direct_answer(application, body, open_besides=open_besides) == asgi_answer(application, body)
