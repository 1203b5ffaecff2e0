"""Where POST / is answered (resonate_site.serving.ProtocolThreads): inline on the loop's thread when the request is
alone (ProtocolRequests) or quick, as code with no running loop; otherwise on the protocol's threads, whose results
come back to the awaiting coroutine whatever the work does, and no thread is lost along the way."""

import asyncio
import threading

import pytest

from resonate_site.serving import ProtocolThreads

pytestmark = pytest.mark.filterwarnings("error")  # an exception nobody retrieved would only be a warning


def work(item):
    if isinstance(item, BaseException):
        raise item
    if isinstance(item, threading.Event):
        item.wait(5)
        return "released"
    return (item, threading.current_thread().name)


def test_each_awaited_item_gets_its_own_result_computed_on_the_protocol_threads():
    threads = ProtocolThreads(work, 3, "test-protocol")

    async def many():
        return await asyncio.gather(*(threads.run(n) for n in range(50)))

    results = asyncio.run(many())
    assert [n for n, _ in results] == list(range(50))
    assert {name for _, name in results} <= {"test-protocol_0", "test-protocol_1", "test-protocol_2"}


def test_an_exception_reaches_the_awaiting_coroutine_and_the_thread_keeps_serving():
    threads = ProtocolThreads(work, 1, "test-protocol")

    async def failing_then_fine():
        with pytest.raises(ValueError, match="bad item"):
            await threads.run(ValueError("bad item"))
        with pytest.raises(KeyboardInterrupt):  # not only Exception: what an executor would hand over too
            await threads.run(KeyboardInterrupt())
        return await threads.run(7)

    assert asyncio.run(failing_then_fine())[0] == 7


def test_a_result_for_a_cancelled_coroutine_or_a_closed_loop_is_dropped_and_the_thread_keeps_serving():
    threads = ProtocolThreads(work, 1, "test-protocol")
    gate = threading.Event()

    async def cancelled():
        waiting = asyncio.ensure_future(threads.run(gate))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    async def next_one():
        return await asyncio.wait_for(threads.run(8), 5)

    asyncio.run(cancelled())  # its loop is closed once run() returns: the thread's answer has nowhere to go
    gate.set()
    assert asyncio.run(next_one())[0] == 8  # the one thread is still there


def on_which_thread(item):
    """The work of the inline tests: where it ran, and whether it saw a running event loop there."""
    try:
        asyncio.get_running_loop()
        loop_seen = True
    except RuntimeError:
        loop_seen = False
    if isinstance(item, BaseException):
        raise item
    return threading.current_thread().name, loop_seen


def test_with_nothing_in_flight_a_request_runs_inline_seeing_no_running_loop_which_is_back_afterwards():
    threads = ProtocolThreads(on_which_thread, 2, "test-protocol")

    async def scenario():
        loop = asyncio.get_running_loop()
        assert threads.inline_now()
        answered = threads.inline("item")
        assert asyncio.get_running_loop() is loop
        with pytest.raises(ValueError, match="bad"):
            threads.inline(ValueError("bad"))
        assert asyncio.get_running_loop() is loop  # restored when the work raised too
        return answered

    name, loop_seen = asyncio.run(scenario())
    assert name == threading.current_thread().name  # the loop's own thread, no hand-off
    assert loop_seen is False  # as on a protocol thread: Django allows database work only there


def test_with_a_request_in_flight_the_next_goes_to_the_threads_and_idle_comes_back_however_each_ended():
    gate = threading.Event()

    def work(item):
        if item is gate:
            gate.wait(5)
        return on_which_thread(item)

    threads = ProtocolThreads(work, 2, "test-protocol")

    async def scenario():
        held = asyncio.ensure_future(threads.run(gate))
        assert not threads.inline_now()  # one in flight: the next request overlaps it on a thread
        failing = threads.run(KeyError("gone"))
        with pytest.raises(KeyError):
            await failing
        cancelled = asyncio.ensure_future(threads.run(gate))
        await asyncio.sleep(0.01)
        cancelled.cancel()
        gate.set()
        name, loop_seen = await held
        await asyncio.sleep(0.05)  # the cancelled one's answer comes back and is dropped
        assert threads.in_flight == 0 and threads.inline_now()
        return name, loop_seen

    name, loop_seen = asyncio.run(scenario())
    assert name.startswith("test-protocol_") and loop_seen is False


def test_with_another_request_open_only_a_quick_one_runs_inline_and_none_while_one_is_on_the_threads(monkeypatch):
    from resonate_site.serving import ProtocolRequests

    threads = ProtocolThreads(on_which_thread, 1, "test-protocol")
    gate = threading.Event()

    async def scenario():
        seen = {"alone": (threads.inline_now(), threads.inline_now(quick=True))}
        monkeypatch.setattr(ProtocolRequests, "open", 2)  # this one and another, read in the same turn of the loop
        seen["another open"] = (threads.inline_now(), threads.inline_now(quick=True))
        held = asyncio.ensure_future(threads.run(gate))
        seen["one on the threads"] = (threads.inline_now(), threads.inline_now(quick=True))
        gate.set()
        await held
        return seen

    assert asyncio.run(scenario()) == {
        "alone": (True, True),
        "another open": (False, True),  # a write goes to the threads, to overlap its round trips
        "one on the threads": (False, False),
    }


def test_the_server_counts_its_open_protocol_requests_from_when_it_reads_them_to_when_they_end():
    """Requests read in one turn of the loop count before any of them runs: the first does not find itself alone.
    GET and other paths do not count; a request whose client leaves mid-body stops counting too."""
    import socket
    import time

    from resonate_site.serving import ProtocolRequests
    from tests.conftest import guarded_uvicorn

    seen = []

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        seen.append((scope["method"], scope["path"], ProtocolRequests.open))
        while (await receive()).get("more_body"):
            pass
        if scope["method"] == "POST" and len(seen) == 2:
            time.sleep(0.3)  # holds the loop, as an inline request does, while the others arrive
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"{}"})

    post = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"
    with guarded_uvicorn(app) as port:
        deadline = time.monotonic() + 10
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        clients[0].sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answered(clients[0])
        clients[0].sendall(post)
        time.sleep(0.1)  # the first POST is holding the loop
        clients[1].sendall(post)
        clients[2].sendall(post)
        for client in clients:
            answered(client)
        cut = socket.create_connection(("127.0.0.1", port))  # a body that never comes: the client leaves
        cut.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n{}")
        while len(seen) < 5:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        cut.close()
        while ProtocolRequests.open:
            assert time.monotonic() < deadline, "a request that ended still counts"
            time.sleep(0.01)
        for client in clients:
            client.close()
    health, alone, read_together, read_with_it, cut_short = seen
    assert health == ("GET", "/health", 0)  # not a protocol request
    assert alone == ("POST", "/", 1)
    assert read_together == ("POST", "/", 2)  # the other, read in the same turn, not run yet, already counts
    assert read_with_it[:2] == ("POST", "/")
    assert cut_short == ("POST", "/", 1)


def answered(client):
    client.settimeout(5)
    assert client.recv(1000).startswith(b"HTTP/1.1 200")


def test_while_the_database_is_troubled_a_request_goes_to_the_threads_even_with_nothing_in_flight():
    troubled = [True]
    threads = ProtocolThreads(on_which_thread, 1, "test-protocol", troubled=lambda: troubled[0])

    async def scenario():
        seen = [threads.inline_now()]
        troubled[0] = False
        seen.append(threads.inline_now())
        return seen

    assert asyncio.run(scenario()) == [False, True]  # the loop stays free while requests may wait for seconds
    no_threads = ProtocolThreads(on_which_thread, 0, "test-protocol", troubled=lambda: True)
    assert no_threads.inline_now()  # no threads: inline


def test_after_a_slow_inline_request_the_next_ones_go_to_the_threads_for_a_while(monkeypatch):
    import time

    def slow(item):
        time.sleep(ProtocolThreads.SLOW_S + 0.02)
        return item

    threads = ProtocolThreads(slow, 1, "test-protocol")

    async def scenario():
        assert threads.inline_now()
        threads.inline(1)  # slow: under a slow database the loop must not run requests one after another
        seen = [threads.inline_now()]
        later = time.monotonic() + ProtocolThreads.THREADS_FOR_S
        monkeypatch.setattr(time, "monotonic", lambda: later)
        seen.append(threads.inline_now())
        return seen

    assert asyncio.run(scenario()) == [False, True]


def test_with_no_threads_every_request_runs_inline():
    threads = ProtocolThreads(on_which_thread, 0, "test-protocol")

    async def scenario():
        return [threads.inline_now() for _ in range(3)], threads.inline(1)

    idle, (name, _) = asyncio.run(scenario())
    assert idle == [True, True, True]
    assert name == threading.current_thread().name


def test_a_read_deadline_fires_once_after_its_time_unless_stopped_first():
    from resonate_site.serving import Deadlines, deadlines

    fired = []

    async def scenario():
        loop = asyncio.get_running_loop()
        reading = deadlines(loop)
        assert deadlines(loop) is reading  # one per event loop
        reading.start("late", 0.1, lambda: fired.append(("late", loop.time() - started)))
        reading.start("on time", 0.1, lambda: fired.append("on time"))
        started = loop.time()
        beating = asyncio.create_task(heartbeat())
        await asyncio.sleep(0.05)
        assert reading.stop("on time") is False  # stopped before its deadline: it never fires
        await asyncio.sleep(0.1 + 2 * Deadlines.SWEEP_S)
        beating.cancel()
        return reading.stop("late"), reading.stop("late")

    stalls = [0.0]  # how late the loop woke up, beyond what it slept: a machine busy with other work stalls it

    async def heartbeat():
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(0.01)
            stalls.append(loop.time() - before - 0.01)

    assert asyncio.run(scenario()) == (True, False)  # stop() tells, once, that the deadline had fired
    assert [name for name, _ in fired] == ["late"]
    assert 0.1 <= fired[0][1] <= 0.1 + Deadlines.SWEEP_S + 0.1 + max(stalls)


def stalled_body_reader(sent):
    """On the running loop: a task reading a POST / body that never comes; what it answers goes to `sent`."""
    from resonate_site.asgi import read_body

    never = asyncio.Event()

    async def receive():
        await never.wait()

    async def send(message):
        sent.append(message)

    return asyncio.create_task(read_body({"headers": [], "path": "/"}, receive, send))


def test_a_body_read_cancelled_for_another_reason_than_its_deadline_stays_cancelled():
    """A server stopping cancels the request's task: that is not the client's slowness, and no 408 goes out."""
    sent = []

    async def scenario():
        reader = stalled_body_reader(sent)
        await asyncio.sleep(0.01)
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader

    asyncio.run(scenario())
    assert sent == []


def test_the_read_deadlines_of_an_event_loop_do_not_keep_it_alive():
    import gc
    import weakref

    from resonate_site.serving import deadlines

    async def read_briefly():
        reading = deadlines(asyncio.get_running_loop())
        reading.start("key", 0.01, lambda: None)
        await asyncio.sleep(0.3)  # swept: fired, and no sweep left scheduled
        reading.stop("key")

    loop = asyncio.new_event_loop()
    loop.run_until_complete(read_briefly())
    loop.close()
    gone = weakref.ref(loop)
    del loop
    gc.collect()

    assert gone() is None


def test_a_body_read_cancelled_by_its_deadline_and_by_the_server_at_once_stays_cancelled(settings):
    """The deadline's cancel and another (a server stopping) in the same pass of the loop: one CancelledError
    arrives; it must not be taken for the deadline's alone and answered with a 408."""
    from resonate_site.serving import deadlines

    settings.RESONATE = {**settings.RESONATE, "READ_TIMEOUT_MS": 10}
    sent = []

    async def scenario():
        reader = stalled_body_reader(sent)
        await asyncio.sleep(0.02)  # reading, and past its deadline (not yet swept)
        loop = asyncio.get_running_loop()
        deadlines(loop)._sweep(loop)  # the deadline fires: it cancels the reader
        reader.cancel()  # and the server cancels it too, before it runs again
        with pytest.raises(asyncio.CancelledError):
            await reader

    asyncio.run(scenario())
    assert sent == []


def answer_together(batches):
    """A stand-in for serve_together, noting each batch it is handed in `batches`."""

    def together(items):
        batches.append(list(items))
        return [(item, "together", asyncio._get_running_loop() is None) for item in items]

    return together


def test_without_threads_the_requests_open_at_once_are_answered_together_and_one_alone_inline(monkeypatch):
    from resonate_site.serving import ProtocolRequests

    batches = []
    threads = ProtocolThreads(on_which_thread, 0, "test-protocol", together=answer_together(batches))

    async def scenario():
        alone = await threads.answer("alone")
        monkeypatch.setattr(ProtocolRequests, "open", 3)  # read in one turn of the loop
        gathered = await asyncio.gather(*(threads.answer(n) for n in range(3)))
        quick = await asyncio.gather(threads.answer("get", quick=True), threads.answer("create"))
        return alone, gathered, quick

    alone, gathered, quick = asyncio.run(scenario())
    assert alone == (threading.current_thread().name, False)  # inline, as before, with no running loop
    assert gathered == [(n, "together", True) for n in range(3)]  # each its own result, with no running loop
    assert quick == [("get", "together", True), ("create", "together", True)]  # a read joins a batch too
    assert batches == [[0, 1, 2], ["get", "create"]]


def test_a_batch_larger_than_the_most_answered_together_is_answered_in_several():
    from resonate_site.serving import ProtocolRequests

    batches = []
    threads = ProtocolThreads(on_which_thread, 0, "test-protocol", together=answer_together(batches))
    count = ProtocolThreads.TOGETHER_MAX * 2 + 1

    async def scenario():
        ProtocolRequests.open += count
        try:
            return await asyncio.gather(*(threads.answer(n) for n in range(count)))
        finally:
            ProtocolRequests.open -= count

    results = asyncio.run(scenario())
    assert [item for item, _, _ in results] == list(range(count))
    assert [len(batch) for batch in batches] == [ProtocolThreads.TOGETHER_MAX] * 2 + [1]
    assert not threads.gathering


def test_when_answering_together_fails_each_request_of_the_batch_hears_it_and_the_next_batch_is_served(monkeypatch):
    from resonate_site.serving import ProtocolRequests

    def together(items):
        if "bad" in items:
            raise RuntimeError("the database went away")
        return list(items)

    threads = ProtocolThreads(on_which_thread, 0, "test-protocol", together=together)

    async def scenario():
        monkeypatch.setattr(ProtocolRequests, "open", 2)
        failed = await asyncio.gather(threads.answer("bad"), threads.answer("fine"), return_exceptions=True)
        return failed, await asyncio.gather(threads.answer(1), threads.answer(2))

    failed, served = asyncio.run(scenario())
    assert [str(error) for error in failed] == ["the database went away"] * 2
    assert served == [1, 2]


def test_a_gathered_request_cancelled_before_its_batch_ran_is_skipped_by_its_answer(monkeypatch):
    from resonate_site.serving import ProtocolRequests

    batches = []
    threads = ProtocolThreads(on_which_thread, 0, "test-protocol", together=answer_together(batches))

    async def scenario():
        monkeypatch.setattr(ProtocolRequests, "open", 2)
        gone = asyncio.ensure_future(threads.answer("gone"))
        kept = asyncio.ensure_future(threads.answer("kept"))
        await asyncio.sleep(0)  # both have joined the batch
        gone.cancel()
        return await kept, gone.cancelled()

    assert asyncio.run(scenario()) == (("kept", "together", True), True)
    assert batches == [["gone", "kept"]]  # its work was done: the client had gone, as with a thread


def test_a_server_process_leaves_what_its_start_up_built_out_of_garbage_collection():
    """resonate_site.asgi's lifespan freezes the start-up heap once the hub is started (freeze_startup_heap): a full
    collection then walks only what came after, not the 100,000 objects of Django and the libraries."""
    import gc

    from resonate_site.asgi import lifespan

    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent = []

    async def receive():
        return messages.pop(0)

    async def send(message):
        if message["type"] == "lifespan.startup.complete":
            sent.append(gc.get_freeze_count())
        else:
            sent.append(message["type"])

    gc.unfreeze()
    try:
        asyncio.run(lifespan(receive, send))
        assert sent[1] == "lifespan.shutdown.complete"
        assert sent[0] > 10_000  # frozen by the time the server says it has started
        garbage = [[]]
        garbage[0].append(garbage)  # a cycle made after start-up is still collected
        del garbage
        assert gc.collect() >= 1
    finally:
        gc.unfreeze()
