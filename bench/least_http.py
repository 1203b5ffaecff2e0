"""The least HTTP that wrk needs, and the socket it comes on, shared by the floors (floor.py, floor_sqlite.py).

The head is read up to its blank line, the body by its Content-Length; the envelope is decoded with orjson and
handed to handlers.answer(kind, data), whose answer goes back as a 200 envelope. Nothing is validated.
"""

import socket

import orjson


def listening(port):
    """A socket listening on 127.0.0.1:port."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    return listener


def answer_all(connection, handlers):
    """Answer a client's requests until it closes its connection; then close it."""
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        converse(connection, handlers)
    except (EOFError, ConnectionError):
        pass
    finally:
        connection.close()


def converse(connection, handlers):
    pending = b""
    while True:
        end = pending.find(b"\r\n\r\n")
        while end < 0:
            pending += receive(connection)
            end = pending.find(b"\r\n\r\n")
        head = pending[:end].lower()
        start = head.index(b"content-length:") + 15
        stop = head.find(b"\r\n", start)
        length = int(head[start : stop if stop > 0 else None])
        while len(pending) < end + 4 + length:
            pending += receive(connection)
        envelope = orjson.loads(pending[end + 4 : end + 4 + length])
        pending = pending[end + 4 + length :]
        kind = envelope["kind"]
        reply = orjson.dumps(
            {
                "kind": kind,
                "head": {"corrId": envelope["head"]["corrId"], "status": 200, "version": "2026-04-01"},
                "data": handlers.answer(kind, envelope["data"]),
            }
        )
        connection.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(reply), reply)
        )


def receive(connection):
    chunk = connection.recv(65536)
    if not chunk:
        raise EOFError
    return chunk
