"""Statements of several threads sent as one: group commit by statement.

A promise.create (and task.create's first step) writes its rows with one statement in autocommit
(rows.insert_unless_exists): a transaction of its own, a round trip, a plan to run and a WAL flush to wait for.
The protocol's threads of a server process that create at the same moment can instead send their rows in one
statement: the database then runs one transaction, one commit, one round trip for all of them. At 16 clients
PostgreSQL spent about 35% less CPU a create so, and the server served 6-19% more (bench/HISTORY.md, 2026-12-07).

`Together.run(shape, key, item)` is called by each thread with what it would have sent alone. The first of a shape
leads: it sends at once what is waiting (its own item first), without waiting for more; those that come while a
statement is in flight wait for the next. When enough are waiting (SECOND_AT) a second statement may go out while
the first is in flight (IN_FLIGHT), so that the threads do not all wait behind one commit. When a statement comes
back, each waiting thread is woken with its outcome, and the first that was left waiting leads the next. A thread
alone sends at once: nobody waits for company.

Items with the same key (two creates of one id) never go in one statement. The outcome of each item is what
`send(shape, items)` says of it; when send raises, every item gets the exception. A statement can wait long (a
create whose key another transaction has inserted and not yet committed waits for that transaction): a thread left
waiting for WAIT_S, its item still not taken, goes without the others, and run() returns `alone` for it (the caller
sends its item by itself).
"""

import threading

IN_FLIGHT = 2  # statements of one shape in flight from one process at once, at most
SECOND_AT = 2  # items waiting for a second statement to go out while the first is in flight
MOST = 16  # items in one statement, at most
WAIT_S = 0.1  # a thread whose item no statement has taken by then goes alone


class _Waiting:
    """An item, and the thread that waits for its outcome: its lock is held until the outcome is there, or until it
    is its turn to lead."""

    __slots__ = ("key", "item", "ready", "leads", "outcome")

    def __init__(self, key, item):
        self.key, self.item, self.leads, self.outcome = key, item, False, None
        self.ready = threading.Lock()
        self.ready.acquire()


class Together:
    """Items of several threads sent together: send(shape, items) -> one outcome per item, in order."""

    def __init__(self, send, alone=None):
        self.send, self.alone = send, alone
        self.lock = threading.Lock()
        self.waiting = {}  # shape: [_Waiting], in the order they came
        self.in_flight = {}  # shape: statements of it sent and not yet back

    def run(self, shape, key, item):
        """The outcome of this item, sent with those of other threads that are waiting now, or alone."""
        me = _Waiting(key, item)
        with self.lock:
            in_flight, waiting = self.in_flight.get(shape, 0), self.waiting.setdefault(shape, [])
            me.leads = in_flight == 0 or (in_flight < IN_FLIGHT and len(waiting) >= SECOND_AT)
            if me.leads:
                self.in_flight[shape] = in_flight + 1
            else:
                waiting.append(me)
        if not me.leads and not me.ready.acquire(timeout=WAIT_S):  # released by the thread that sent it, or to lead
            with self.lock:
                waiting = self.waiting[shape]
                if me in waiting:  # no statement took it: the one in flight is slow
                    waiting.remove(me)
                    return self.alone
            me.ready.acquire()  # taken by a statement, or promoted to lead the next: its release comes
        if me.leads:
            self._lead(shape, me)
        return me.outcome

    def _lead(self, shape, me):
        with self.lock:
            batch, keys, left = [me], {me.key}, []
            for waiting in self.waiting[shape]:
                if len(batch) < MOST and waiting.key not in keys:
                    batch.append(waiting)
                    keys.add(waiting.key)
                else:
                    left.append(waiting)
            self.waiting[shape] = left
        outcomes = None
        try:
            outcomes = list(self.send(shape, [waiting.item for waiting in batch]))
        except BaseException as error:  # each thread raises it, or does what its caller does on it
            outcomes = [error] * len(batch)
        finally:
            if outcomes is None or len(outcomes) != len(batch):  # never left waiting: each is told
                outcomes = [RuntimeError(f"{self.send!r} answered {outcomes!r} for {len(batch)} items")] * len(batch)
            with self.lock:
                left = self.waiting[shape]
                following = left.pop(0) if left else None
                if following is None:
                    self.in_flight[shape] -= 1
                else:
                    following.leads = True  # its statement takes this one's place in flight
            for waiting, outcome in zip(batch, outcomes, strict=True):
                waiting.outcome = outcome
                if waiting is not me:
                    waiting.ready.release()
            if following is not None:
                following.ready.release()
