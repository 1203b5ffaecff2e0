"""What `manage.py serve` adds to uvicorn so that clients and crashes cannot take a server process down.

- A deadline on request headers: uvicorn closes idle kept-alive connections, but a connection that
  never sends a byte, or trickles its headers, is otherwise held for as long as the client likes.
- Streams that can tell their client has gone before they write to it (`CLOSING`): uvicorn drops a write to
  a connection it knows is closed without a word, and a stream that believed it had sent a message would
  lose it.
- Server processes (uvicorn workers) that exit when the process that started them is gone: a
  supervisor restarting `serve` after a SIGKILL must find the port free, not held by orphans.
- Where POST / is answered (`ProtocolThreads`): on the event loop's thread when nothing else is in flight, on
  the protocol's threads otherwise (or, with none, together with the other requests open at once).
- POST / answered directly (`GuardedHttpProtocol._start_direct`): a small body with its length declared goes to the
  application's `direct.answer` once it is in, with no ASGI task, receive or send, and its reply is written in
  one piece.
- What start-up built left out of garbage collection (`freeze_startup_heap`): no pause of tens of milliseconds.
- Server processes kept each on a CPU of its own when there is one per CPU (`pin_processes`).
"""

import asyncio
import contextlib
import gc
import logging
import multiprocessing.connection
import os
import pickle
import queue
import signal
import socket
import sys
import threading
import time
import weakref

from uvicorn.config import STARTUP_FAILURE
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.supervisors.multiprocess import Multiprocess, Process

from floor.conf import resonate_settings
from outbox.hub import end_streams

log = logging.getLogger(__name__)

PARENT = "RESONATE_SERVE_PARENT"  # set by serve for the worker processes it starts
# The scope extension holding a callable that says whether the request's connection is closing (the client sent
# FIN or was reset). A stream asks it before each write: the message is then kept for the outbox, not dropped.
CLOSING = "resonate.closing"
# On every answer of the protocol, as Django's SecurityMiddleware sends.
NOSNIFF = (b"x-content-type-options", b"nosniff")


class Deadlines:
    """The read deadlines of one event loop (a request's headers, its body), checked every SWEEP_S by one timer.

    A timer per request costs more: asyncio.timeout() 4.4-4.9 µs of CPU a request, call_later and its cancel
    2.4-3.4, an entry here 0.7 (uvloop and asyncio, measured on this VM). A deadline fires up to SWEEP_S late.
    """

    SWEEP_S = 0.25

    def __init__(self, loop):
        # Not the loop itself: _deadlines is keyed by the loop, weakly, and a value holding it would keep it alive.
        self.loop, self.due, self.fired, self.sweeping = weakref.ref(loop), {}, set(), False

    def start(self, key, seconds, expire):
        """Call expire() once `seconds` have passed, unless stop(key) comes first."""
        loop = self.loop()
        self.due[key] = (loop.time() + seconds, expire)
        if not self.sweeping:
            self.sweeping = True
            loop.call_later(self.SWEEP_S, self._sweep, loop)

    def stop(self, key):
        """No deadline for key any more. Whether it had fired."""
        self.due.pop(key, None)
        if key in self.fired:
            self.fired.discard(key)
            return True
        return False

    def _sweep(self, loop):
        now = loop.time()
        for key, (deadline, expire) in list(self.due.items()):
            if deadline <= now:
                del self.due[key]
                self.fired.add(key)
                expire()
        self.sweeping = bool(self.due)
        if self.sweeping:
            loop.call_later(self.SWEEP_S, self._sweep, loop)


_deadlines = weakref.WeakKeyDictionary()  # event loop -> its Deadlines


def deadlines(loop):
    found = _deadlines.get(loop)
    if found is None:
        found = _deadlines[loop] = Deadlines(loop)
    return found


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing a connection whose request headers do not arrive within
    READ_TIMEOUT_MS of its opening or of the request's first byte, and ending streams when the server stops."""

    deadlines = None
    draining = False  # the server is stopping: this connection's next request is its last (shutdown)
    DRAIN_S = 1.0

    def _start_asgi_task(self, cycle, app):
        if cycle.scope["path"] == "/" and cycle.scope["method"] == "POST":
            direct = _direct_of(app)
            if direct is not None and self._direct_allowed(cycle):
                self._start_direct(cycle, direct)
                return
            app = ProtocolRequests.counted(app)
        super()._start_asgi_task(cycle, app)

    # POST / answered directly. An ASGI request costs a task, a receive and two sends, each a coroutine, an Event for
    # the body, and two writes to the socket, head then body: 42 µs of CPU more per promise.get under load than the
    # path here (bench/HISTORY.md, 2026-12-06, "POST / direct"). A body small enough to be held whole without pausing
    # the reads (HIGH_WATER_LIMIT), with its length declared and no 100-continue awaited, is instead collected by
    # uvicorn's own on_body; once it is complete, the application's `direct.answer(scope, body, reply)` answers it and
    # reply() writes the answer, head and body, in one write. Anything else (chunked, large, 100-continue, an access
    # log to write, a client not reading its answers) takes the ASGI path, which handles them. The request counts as
    # open (ProtocolRequests) from its headers to its answer or its client's leaving, as on the ASGI path.

    def _direct_allowed(self, cycle):
        length = header(cycle.scope, b"content-length")
        return (
            length is not None
            and length.isdigit()
            and len(length) <= 9  # what int() of it costs stays small, whatever the client sends
            and int(length) <= min(DIRECT_BODY_BYTES, resonate_settings.MAX_BODY_BYTES)
            and header(cycle.scope, b"transfer-encoding") is None
            and not cycle.waiting_for_100_continue
            and not cycle.access_log
            and not self.flow.write_paused
        )

    def _start_direct(self, cycle, direct):
        ProtocolRequests.open += 1
        cycle.direct, cycle.direct_open = direct, True
        if cycle.more_body:  # the usual case: the body is still to come (on_message_complete)
            self.deadlines.start(cycle, resonate_settings.READ_TIMEOUT_MS / 1000, lambda: self._body_too_slow(cycle))
        else:  # a pipelined request, read whole while the one before it was answered
            self.loop.call_soon(self._answer_direct, cycle)

    def on_message_complete(self):
        cycle = self.cycle
        if getattr(cycle, "direct_open", False) and cycle.more_body and not cycle.response_complete:
            cycle.more_body = False
            self.deadlines.stop(cycle)
            # On the next turn of the loop, as a task would start: the requests read in this turn all count first.
            self.loop.call_soon(self._answer_direct, cycle)
            return
        super().on_message_complete()

    def _answer_direct(self, cycle):
        if cycle.disconnected:  # its client left before it could be answered
            self._direct_done(cycle)
            return
        try:
            cycle.direct.answer(
                cycle.scope,
                bytes(cycle.body),
                lambda status, body, close=False: self._reply_direct(cycle, status, body, close),
            )
        except Exception:  # the protocol's respond() never raises; what surrounds it (a connection's close) may
            log.exception("POST / failed")
            self._reply_direct(cycle, *cycle.direct.refused(500, "Internal server error"), True)

    def _body_too_slow(self, cycle):
        seconds = resonate_settings.READ_TIMEOUT_MS / 1000
        self._reply_direct(cycle, *cycle.direct.refused(408, f"Request body not received within {seconds:g} s"), True)

    def _reply_direct(self, cycle, status, body, close=False):
        """The answer to a direct request, head and body in one write; on the event loop's thread. Once only."""
        if not cycle.direct_open:
            return
        self._direct_done(cycle)
        cycle.response_started = cycle.response_complete = True
        if cycle.disconnected or self.transport.is_closing():
            return
        if close:  # a client that sent too slowly or to the wrong host is not kept
            cycle.keep_alive = False
        head = [STATUS_LINE[status]]
        for name, value in (*cycle.default_headers, *DIRECT_HEADERS):
            head += (name, b": ", value, b"\r\n")
        head += (b"content-length: ", str(len(body)).encode(), b"\r\n")
        if not cycle.keep_alive:
            head.append(b"connection: close\r\n")
        head += (b"\r\n", body)
        self.transport.write(b"".join(head))
        if not cycle.keep_alive:
            self.transport.close()
        cycle.on_response()

    def _direct_done(self, cycle):
        if cycle.direct_open:
            cycle.direct_open = False
            ProtocolRequests.open -= 1
            self.deadlines.stop(cycle)

    def connection_made(self, transport):
        super().connection_made(transport)
        self._expect_headers()

    def on_message_begin(self):
        super().on_message_begin()
        self.scope.setdefault("extensions", {})[CLOSING] = self.transport.is_closing
        self._expect_headers()

    def on_headers_complete(self):
        self._headers_arrived()
        super().on_headers_complete()
        if self.draining and self.cycle is not None:
            self.cycle.keep_alive = False  # answered with Connection: close: the client's next goes elsewhere

    def connection_lost(self, exc):
        self._headers_arrived()
        cycle = self.cycle
        if getattr(cycle, "direct_open", False) and cycle.more_body:  # its body will never come: no answer either
            self._direct_done(cycle)
        super().connection_lost(exc)

    def shutdown(self):
        """The server is stopping (SIGTERM): it accepts no more connections and lets requests in flight finish;
        streams end now, so that their workers reconnect to another process (outbox.hub.end_streams).

        An idle keep-alive connection is not closed at once, as uvicorn would: a client may be sending its next
        request on it at that very moment, and a POST cut so is not retried by HTTP clients (the released
        TypeScript SDK's task.create failed so during a rolling restart, "fetch failed"). For DRAIN_S it stays
        open; a request that comes meanwhile is answered with Connection: close, and the client's next request goes
        to another process. Then it is closed."""
        end_streams()
        if self.cycle is None or self.cycle.response_complete:
            self.draining = True
            self.loop.call_later(self.DRAIN_S, self._close_if_idle)
        else:
            super().shutdown()

    def _close_if_idle(self):
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self.transport.close()

    def _expect_headers(self):
        if self.deadlines is None:
            self.deadlines = deadlines(self.loop)
        self.deadlines.start(self, resonate_settings.READ_TIMEOUT_MS / 1000, self._too_slow)

    def _headers_arrived(self):
        if self.deadlines is not None:
            self.deadlines.stop(self)

    def _too_slow(self):
        if not self.transport.is_closing():
            self.transport.close()


DIRECT_BODY_BYTES = HIGH_WATER_LIMIT  # larger bodies pause the reads (uvicorn's on_body) until receive() resumes them
DIRECT_HEADERS = ((b"content-type", b"application/json"), NOSNIFF)


def _direct_of(app):
    """The application's `direct` (answer(scope, body, reply) and refused(status, message)), looked for through the
    middleware uvicorn wraps it in (`.app`); None when it offers none."""
    for _ in range(4):
        direct = getattr(app, "direct", None)
        if direct is not None or not hasattr(app, "app"):
            return direct
        app = app.app
    return None


def header(scope, name):
    """The value of a request's header (its name in lower case, as uvicorn gives them), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return value
    return None


class ProtocolRequests:
    """How many POST / requests this process has started and not finished, over all its connections (one event loop
    a process), to tell whether a request is alone (ProtocolThreads.inline_now). A request counts from the moment
    uvicorn has read its headers and made its task, before that task first runs: requests read in one turn of the
    loop all count when the first of them runs. Its task ends however the request does (answered, refused, the
    client gone); only a task cancelled before it ever ran, which uvicorn does at most as it exits, is not
    subtracted."""

    open = 0

    @classmethod
    def counted(cls, app):
        cls.open += 1

        async def run(scope, receive, send):
            try:
                await app(scope, receive, send)
            finally:
                cls.open -= 1

        return run


def freeze_startup_heap():
    """Leave what the process has built by now (Django, the apps, the libraries: about 100,000 objects that track
    references) out of every later garbage collection, once a collection has freed what start-up left behind.

    Python's full collection (its oldest generation) walks every object that tracks references. Under load it came
    about every 20,000 creates in a process, and walking the start-up heap took 43 ms each time (gc.callbacks around
    `respond()` in a loop, bench/HISTORY.md, 2026-12-06 (17:00)): 43 ms in which that process's requests stood still,
    a p99 of its own. Frozen, the objects are never walked again; they stay for the process's life, as they would
    anyway. The younger generations' collections are unchanged."""
    gc.collect()
    gc.freeze()


def watch_parent():
    """In a worker process started by serve: exit (gracefully, by SIGTERM) once serve itself is gone."""
    parent = os.environ.get(PARENT)
    if not parent or int(parent) == os.getpid():
        return

    def watch():
        while os.getppid() == int(parent):
            time.sleep(1)
        log.warning("the serve process %s is gone; this server process stops", parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="resonate-parent-watch", daemon=True).start()


class ProtocolThreads:
    """Where POST / is answered: `work(item)` on the event loop's own thread when the request is alone, and on a
    fixed set of threads otherwise.

    - **Inline when alone.** With no other request of this process open (`ProtocolRequests`) and nothing on the
      threads, the loop's thread runs the request itself: no hand-off to a thread and back (two thread wake-ups,
      two GIL hand-overs, a self-pipe write). That was most of what a cheap request cost outside its handler:
      promise.get at 1 client 2,200 -> 2,950/s, its CPU 321 -> 244 µs (bench/HISTORY.md, 2026-12-04, "inline when
      idle"). While it runs the loop waits, as a protocol thread would have. Requests arriving meanwhile are read
      once it is done, all in one turn of the loop, and count as open from then on, so they go to the threads
      and overlap their round trips. (Counting only the requests on the threads, each of them found none, and
      they ran one after another on the loop: promise.create at 16 clients 2,345 -> 2,583/s with the count,
      bench/HISTORY.md, 2026-12-05.) The call runs as it would on a protocol thread: the thread has no running
      event loop for its duration (Django refuses database work with one; nothing in `work` needs it).
    - **Quick requests inline under load too** (`quick`: one read by id, promise.get and its kin), while nothing is
      on the threads: the loop is held for about as long as the request's own CPU, less than a hand-off to a
      thread costs (promise.get at 16 clients 6,165/s on the threads, 7,565/s inline).
    - **Not inline while slow.** Not while `troubled()` says requests may wait long (a database lost lately,
      waited for up to DB_OUTAGE_WAIT_MS), nor for THREADS_FOR_S after an inline request took longer than SLOW_S
      (a slow database: 200 ms a round trip in the fault suite). Then the loop keeps reading requests, /health and
      streams while threads wait. The request that meets the slowness or the outage first waits on the loop.
    - **Threads under load.** With another request open, the next goes to the threads: an item in by one queue,
      its result back by one call_soon_threadsafe (what run_in_executor does, less its layers: bench/HISTORY.md,
      2026-12-02, second session), so requests overlap their round trips to the database.
    - **No threads** (count 0): every request on the loop's thread. The embedded mode's SQLite takes one writer at
      a time anyway (floor/sqlite3/base.py), and a thread only added hand-offs. With `together`, requests that are
      open at once are answered together (`gathered`): those read in one turn of the loop are collected, and
      `together(items)` answers them in one transaction, one COMMIT for all (floor.transactions.run_together);
      each is answered once it has committed (bench/HISTORY.md, "group commit"). A request alone runs inline as
      above.

    The threads are daemons, as uvicorn's graceful shutdown waits for the requests in flight: a process
    that exits has none running. A process killed in the middle of one loses it as any killed process does
    (the database rolls its transaction back; the client, without a reply, asks again).
    """

    SLOW_S = 0.05  # an inline request that took longer: the next ones go to the threads for THREADS_FOR_S
    THREADS_FOR_S = 10.0
    TOGETHER_MAX = 32  # requests answered together at most: the first of them waits for the last

    def __init__(self, work, count, name, troubled=lambda: False, together=None, initializer=None):
        self.work, self.items, self.in_flight = work, queue.SimpleQueue(), 0  # in_flight: read and written on the loop
        self.initializer = initializer  # called by each thread as it starts (as ThreadPoolExecutor's)
        self.threaded, self.troubled = count > 0, troubled
        self.together, self.gathering = together, []  # gathering: [(item, future)], read and written on the loop
        self.threads_until = 0.0  # time.monotonic(): until then every request goes to the threads
        for index in range(count):
            threading.Thread(target=self._serve, name=f"{name}_{index}", daemon=True).start()

    def inline_now(self, quick=False):
        """Whether a request is best answered on the loop's thread now, by itself. With no threads: always, unless
        requests are answered `together` and another is open or gathered. Otherwise: with nothing on the threads and
        no trouble, when it is this process's only request open, or `quick`."""
        if not self.threaded:
            return self.together is None or (ProtocolRequests.open <= 1 and not self.gathering)
        return (
            self.in_flight == 0
            and (quick or ProtocolRequests.open <= 1)
            and time.monotonic() >= self.threads_until
            and not self.troubled()
        )

    async def answer(self, item, quick=False):
        """work(item)'s result, inline when inline_now(quick) and from one of the threads otherwise."""
        if self.inline_now(quick):
            return self.inline(item)
        return await self.elsewhere(item)

    def elsewhere(self, item):
        """An awaitable of work(item)'s result, not computed inline: from one of the threads, or, with none,
        together with the other requests open at once."""
        return self.run(item) if self.threaded else self.gathered(item)

    def inline(self, item):
        """work(item) on the loop's thread, as a protocol thread would run it: with no running loop."""
        loop, started = asyncio.get_running_loop(), time.monotonic()
        asyncio._set_running_loop(None)
        try:
            return self.work(item)
        finally:
            asyncio._set_running_loop(loop)
            if time.monotonic() - started > self.SLOW_S:  # a slow database: requests must overlap again
                self.threads_until = time.monotonic() + self.THREADS_FOR_S

    def gathered(self, item):
        """An awaitable of item's result among the results of together(items), called for the items gathered by
        the end of this turn of the loop."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self.gathering:
            loop.call_soon(self._answer_gathered, loop)
        self.gathering.append((item, future))
        return future

    def _answer_gathered(self, loop):
        gathered, self.gathering = self.gathering[: self.TOGETHER_MAX], self.gathering[self.TOGETHER_MAX :]
        if self.gathering:
            loop.call_soon(self._answer_gathered, loop)
        asyncio._set_running_loop(None)  # as inline: no running loop while the database is used
        try:
            outcomes = [(True, result) for result in self.together([item for item, _ in gathered])]
        except Exception as error:
            outcomes = [(False, error)] * len(gathered)
        finally:
            asyncio._set_running_loop(loop)
        for (_, future), outcome in zip(gathered, outcomes, strict=True):
            self._settle(future, *outcome, counted=False)

    def run(self, item):
        """An awaitable of work(item)'s result (or its exception), computed on one of the threads."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.in_flight += 1
        self.items.put((loop, future, item))
        return future

    def _serve(self):
        if self.initializer is not None:
            self.initializer()
        take = self.items.get
        while True:
            loop, future, item = take()
            try:
                outcome, value = True, self.work(item)
            except BaseException as error:  # handed to the awaiting coroutine, as an executor would
                outcome, value = False, error
            with contextlib.suppress(RuntimeError):  # its loop has closed: nobody awaits the answer any more
                loop.call_soon_threadsafe(self._settle, future, outcome, value)

    def _settle(self, future, outcome, value, counted=True):
        if counted:
            self.in_flight -= 1
        if future.done():  # the awaiting coroutine was cancelled meanwhile
            return
        if outcome:
            future.set_result(value)
        else:
            future.set_exception(value)


SPREADS_CONNECTIONS = sys.platform.startswith("linux")  # SO_REUSEPORT hands each connection to one of the sockets


class RollingRestarts(Multiprocess):
    """uvicorn's supervisor of several server processes (manage.py serve --workers N), each process accepting on a
    socket of its own (`listening_socket`), its slot's: a process started again after a crash, or in a rolling restart,
    takes over the socket of the one it replaces, with the connections waiting in it.

    On SIGHUP it replaces each process by a new one that is ready first (bin/production restart); here a new process
    gets STARTUP_S to be ready, where uvicorn gives it its health check's 5 s, which a busy machine exceeded: the
    restart was given up and the old processes (and their code) kept. The health check itself stays at 5 s, so a hung
    process is still replaced soon (a longer one held the supervisor up to that long for each frozen process). SIGTTIN
    adds a process with a socket of its own; SIGTTOU takes the last one away, and closes its socket.

    With one server process per CPU it may use (and RESONATE_CPU_AFFINITY "auto"), each process is kept on a CPU of
    its own (`pin_processes`): once they have started, and at each of the supervisor's checks (every 0.5 s), so that a
    process started again, or in a rolling restart, takes the CPU of the one it replaces. Once SIGTTIN or SIGTTOU has
    changed their number, they are no longer one per CPU: every process may run on every CPU again, until the number
    is back.

    The supervisor wakes as soon as a process exits or a signal comes (`run`), where uvicorn's looks every 0.5 s: the
    connections the kernel hands a dead process's socket wait in it until the replacement accepts them. A slot's
    process is started at most every RESTART_S, so that one dying as it starts is not started again in a loop."""

    STARTUP_S = 60
    CHECK_S = 0.5  # each process's health is checked this often, as uvicorn does
    # Not asked before: a process answers once its spawn has got that far (0.2-0.5 s), and the supervisor, waiting for
    # it, would not see another die meanwhile. One that hangs as it starts is asked then, and replaced 5 s later.
    STARTING_S = 2.0
    RESTART_S = 0.5  # a slot's process is started at most this often

    def __init__(self, config):
        self.shared = None if SPREADS_CONNECTIONS else config.bind_socket()  # one socket for all, as uvicorn binds it
        self.slots = [self.new_slot(config) for _ in range(config.workers)]
        super().__init__(config, self.slots)
        self.allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self.pinned = False
        self.started_at = {}  # slot: time.monotonic() of its process's last start
        self.checked_at = 0.0  # time.monotonic() of the last health checks

    def new_slot(self, config):
        return self.shared or listening_socket(config.host, config.port)

    def start(self, slot):
        process = Process(self.config, [self.slots[slot]])
        process.start()
        self.started_at[slot] = time.monotonic()
        return process

    def run(self):
        """uvicorn's loop, waking when a process exits or a signal comes (their handlers queue them; the wake-up fd
        says one came), and every CHECK_S otherwise."""
        log.info("supervisor %s started", os.getpid())
        woken, wake = os.pipe()
        os.set_blocking(woken, False)
        os.set_blocking(wake, False)
        previous = signal.set_wakeup_fd(wake)
        try:
            self.init_processes()
            while not self.should_exit.is_set():
                self.wait_for_news(woken)
                self.handle_signals()
                self.keep_subprocess_alive()
            self.terminate_all()
            self.join_all()
        finally:
            signal.set_wakeup_fd(previous)
            os.close(woken)
            os.close(wake)
        log.info("supervisor %s stopped", os.getpid())

    def wait_for_news(self, woken):
        """Until a running process exits, a signal comes, CHECK_S has passed, or a dead process's slot may start again
        (RESTART_S after its last start)."""
        now, timeout, running = time.monotonic(), self.CHECK_S, [woken]
        for slot, process in enumerate(self.processes):
            if process.exitcode is None:
                running.append(process.process.sentinel)
            else:
                timeout = min(timeout, max(0.0, self.restartable_at(slot) - now))
        multiprocessing.connection.wait(running, timeout)
        with contextlib.suppress(BlockingIOError):
            while os.read(woken, 512):
                pass

    def init_processes(self):
        self.processes = [self.start(slot) for slot in range(len(self.slots))]
        self.pin()

    def keep_subprocess_alive(self):
        """As uvicorn's, a process that died is started again in its slot, taking over its socket, and so is one that
        does not answer its health check (killed first); one that failed to start stops the supervisor (it would fail
        again). Here the dead are seen first, without asking anyone (a process still starting answers only once it
        has got that far, and the supervisor waited for it), and the health checks come every CHECK_S, not at each
        wake, once a process has had STARTING_S to start."""
        for slot, process in enumerate(self.processes):
            if process.exitcode is not None:
                self.replace(slot)
        if time.monotonic() >= self.checked_at + self.CHECK_S:
            self.checked_at = time.monotonic()
            for slot, process in enumerate(self.processes):
                if self.should_exit.is_set() or time.monotonic() < self.started_at.get(slot, 0.0) + self.STARTING_S:
                    continue
                if not answers(process, self.config.timeout_worker_healthcheck):
                    self.replace(slot)
        self.pin()

    def replace(self, slot):
        """A new process in the slot of one that died or hung, unless the slot started one less than RESTART_S ago
        (wait_for_news wakes once it may)."""
        process = self.processes[slot]
        if self.should_exit.is_set() or time.monotonic() < self.restartable_at(slot):
            return
        process.kill()
        process.join()
        if process.exitcode == STARTUP_FAILURE:
            log.error("server process %s failed to start; stopping", process.pid)
            self.should_exit.set()
            return
        log.info("server process %s died; starting another in its place", process.pid)
        self.processes[slot] = self.start(slot)

    def restartable_at(self, slot):
        """When the slot may start a process again: RESTART_S after its last start."""
        return self.started_at.get(slot, 0.0) + self.RESTART_S

    def restart_all(self):
        """Each process replaced by a new one on the same socket, the old one stopped once the new one is ready;
        should a new one not be ready within STARTUP_S, the restart stops there, the old processes kept."""
        for slot, old in enumerate(self.processes):
            if self.should_exit.is_set():
                return
            new = self.start(slot)
            if not new.wait_until_ready(self.STARTUP_S, self.should_exit):
                new.kill()
                new.join()
                if not self.should_exit.is_set():
                    log.error("new server process %s not ready in %d s; keeping %s", new.pid, self.STARTUP_S, old.pid)
                break
            old.terminate()
            old.join()
            self.processes[slot] = new
        self.pin()

    def handle_ttin(self):
        log.info("SIGTTIN: one more server process")
        self.slots.append(self.new_slot(self.config))
        self.processes.append(self.start(len(self.slots) - 1))
        self.processes_num = len(self.processes)

    def handle_ttou(self):
        if len(self.processes) <= 1:
            log.info("SIGTTOU: one server process left, which stays")
            return
        log.info("SIGTTOU: one server process fewer")
        process = self.processes.pop()
        process.terminate()
        process.join()
        slot = self.slots.pop()
        if slot is not self.shared:
            slot.close()  # connections still waiting in it are refused; new ones go to the other sockets
        self.processes_num = len(self.processes)

    def pin(self):
        pids = [process.pid for process in self.processes]
        cpus = cpus_to_pin(len(pids))
        if cpus:
            pin_processes(pids, cpus)
        elif self.pinned:  # a process added or taken away: a CPU would have two of them, or none
            spread_processes(pids, self.allowed)
        self.pinned = bool(cpus)


def answers(process, timeout):
    """Whether a server process (uvicorn's Process) answers its health check within `timeout` s: uvicorn's ping, whose
    wait ends as soon as the process exits too (uvicorn's waited out the whole timeout, 5 s, for a process that died
    just before it was asked: the supervisor keeps the pipe's other end, and sees no end of file)."""
    if process.exitcode is not None:
        return False
    try:
        pipe = process.parent_conn
        pipe.send(b"ping")
        if pipe in multiprocessing.connection.wait([pipe, process.process.sentinel], timeout):
            pipe.recv()
            return True
    except (OSError, EOFError, pickle.UnpicklingError):
        pass
    return False


def listening_socket(host, port):
    """A socket bound to host:port for one server process to accept on, beside those of the others: SO_REUSEPORT, so
    that the kernel hands each new connection to one of the sockets by a hash of its addresses, and the processes get
    about as many each. With one socket for all (as uvicorn binds it) the process that woke first accepted every
    connection waiting: wrk's 16 connections, opened at once, split 2/14 as often as 8/8, and the process with 14 held
    the rate to its one CPU while the other's idled (promise.create at 16 clients, 12 runs of 6 s each: 3,886/s
    against 4,134/s with a socket each, bench/HISTORY.md, 2026-12-07 10:00).

    Linux only (SPREADS_CONNECTIONS): elsewhere SO_REUSEPORT lets sockets share a port without spreading its
    connections over them, and the processes share one socket, as uvicorn binds it. The port must be free of anything
    else: SO_REUSEPORT would let another serve of the same user share it, and split its clients with this one. Raises
    OSError as a bind does."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


def cpus_to_pin(processes):
    """The CPUs to keep `processes` server processes on, one each, in order; None to let the kernel place them.

    Only with one process per CPU this process may use (os.sched_getaffinity: a container's or taskset's CPU set
    too), as bin/production starts them by default: then every CPU has a process either way, and a second serve on
    the same CPUs gets one of its processes on each as well. With fewer processes than CPUs (two deployments sharing a
    larger machine) they are not pinned: each would pin its own to the same first CPUs."""
    if resonate_settings.CPU_AFFINITY == "off" or not hasattr(os, "sched_setaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return cpus if processes > 1 and len(cpus) == processes else None


def spread_processes(pids, cpus):
    """Let every thread of these processes run on any of `cpus` again (the supervisor's own CPU set)."""
    for pid in pids:
        _keep_on(pid, set(cpus))


def _keep_on(pid, cpus):
    """Every thread of the process allowed these CPUs; a thread already so is left alone, a process gone or not
    started (no pid yet: /proc/None) skipped."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return
    for thread in threads:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.sched_getaffinity(int(thread)) != cpus:
                os.sched_setaffinity(int(thread), cpus)


def pin_processes(pids, cpus):
    """Keep the i-th process (every thread of it) on cpus[i]; a thread already there is left alone, a process gone is
    skipped. Threads a pinned thread starts later inherit its CPU; anything else is caught at the next call.

    The threads of a server process take turns on one interpreter lock, so a second CPU gains a process little, while
    moving between CPUs costs it its caches, and a lock handed to a thread on another CPU costs a cross-CPU wake-up.
    Kept on one CPU each, 2 server processes on this 2-core VM served promise.create at 16 clients 14-16% faster, with
    10-17% less CPU a request, and the task pair 5-9% faster; get and 1 client unchanged (bench/HISTORY.md,
    2026-12-06 (22:30))."""
    for pid, cpu in zip(pids, cpus, strict=False):
        _keep_on(pid, {cpu})
