"""The protocol's threads (resonate_site.serving.ProtocolThreads): what an event loop awaits comes back from them,
whatever the work does, and no thread is lost along the way."""

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
