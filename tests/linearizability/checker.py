"""Whether a concurrent history of protocol requests is linearizable against the executable specification.

A history is a list of Ops: a request, when it was sent and when its reply came back (monotonic ns), and the
reply. It is linearizable when the ops can be put in one order that respects real time (an op that returned
before another was invoked comes first) and in which tests/conformance/model.py, run op by op, gives every
reply the server gave. An op whose outcome is unknown (no reply, a timeout, a 503) never returns: it may take
effect at any point after its invocation, or never, and any reply is allowed for it.

The search is Wing & Gong's, with Lowe's memoization as Porcupine and Knossos run it: walk the invocations and
returns in time order, try each op whose invocation comes before the first pending return, and back up when a
return is reached whose op could not be placed; a (set of placed ops, model state) pair seen once is never
explored again. Ops are split first by the keys they touch (P-compositionality: a history is linearizable
exactly when each of its independent sub-histories is), so single-key traffic is checked key by key, and the
ops that tie several keys together (callbacks, suspends, preload) are searched as one bounded window.

A violation is shrunk to a short history that is still not linearizable, by steps that keep it a witness of the
original's violation (`shrink`), and explained (`explain`).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import orjson

from tests.conformance.model import SpecModel

NEVER = 2**63  # the return time of an op whose outcome is unknown: after every other event

# Kinds whose every run leaves the observable state as it found it (searches, reads, and two writes of state no
# reply ever shows: a listener only queues an unblock, a heartbeat only moves a lease's timeout). Dropping one from
# a history only removes a constraint, so shrinking may drop them.
READ_ONLY = frozenset(
    {
        "promise.get",
        "promise.search",
        "promise.register_listener",
        "task.get",
        "task.search",
        "task.heartbeat",
        "schedule.get",
        "schedule.search",
    }
)


@dataclass(frozen=True, eq=False)
class Op:
    """One request of a history and what came back."""

    client: str
    kind: str
    data: dict
    now: int  # the time the server ran it at (head["resonate:debug_time"])
    invoked: int  # monotonic ns, before the first byte was sent
    returned: int | None = None  # monotonic ns, once the whole reply was read; None: outcome unknown
    status: int | None = None
    reply: object = None
    keys: frozenset = frozenset()  # every key whose state the op may read or write (see partition)
    corr_id: str = "lin"
    seen: tuple | None = None  # (status, reply) as the server answered, for an op whose reply shrinking set aside

    @property
    def known(self) -> bool:
        return self.returned is not None

    @property
    def ends(self) -> int:
        return NEVER if self.returned is None else self.returned

    def forgotten(self) -> Op:
        """The same request with its outcome unknown: it constrains strictly less."""
        seen = (self.status, self.reply) if self.known else self.seen
        return replace(self, returned=None, status=None, reply=None, seen=seen)


def named_ids(kind: str, data: dict) -> set[str]:
    """The promise (and task) ids a request names; schedules are keyed apart ("schedule:" + id)."""
    if kind.startswith("schedule."):
        return {f"schedule:{data['id']}"} if "id" in data else set()
    ids = {data[name] for name in ("id", "awaited", "awaiter") if isinstance(data.get(name), str)}
    action = data.get("action")
    if isinstance(action, dict) and isinstance(action.get("data", {}).get("id"), str):
        ids.add(action["data"]["id"])
    ids.update(ref["id"] for ref in data.get("tasks", []))
    ids.update(a["data"]["awaited"] for a in data.get("actions", []))
    return ids


# ---------------------------------------------------------------- the model as a value


def clone(model: SpecModel) -> SpecModel:
    """A copy that the next handler may change without touching `model`: its handlers replace records (frozen
    dataclasses) in the model's dicts and never change one in place, so copying the dicts is enough."""
    copied = SpecModel.__new__(SpecModel)
    copied.__dict__ = {k: dict(v) if isinstance(v, dict) else v for k, v in model.__dict__.items()}
    return copied


def fingerprint(model: SpecModel) -> bytes:
    """The state every later reply can depend on, as bytes. Timeouts never fire (no tick is in a history) and the
    outbox and listeners are never read back, so two states that differ only there answer everything alike."""
    promises = [
        [p.id, p.state, p.param, p.value, p.tags, p.timeout_at, p.created_at, p.settled_at, sorted(p.callbacks)]
        for p in sorted(model.promises.values(), key=lambda p: p.id)
    ]
    tasks = [
        [t.id, t.state, t.version, t.ttl, t.pid, sorted(t.resumes)]
        for t in sorted(model.tasks.values(), key=lambda t: t.id)
    ]
    schedules = [s.record() for s in sorted(model.schedules.values(), key=lambda s: s.id)]
    return orjson.dumps([promises, tasks, schedules], option=orjson.OPT_SORT_KEYS)


def run(model: SpecModel, op: Op) -> tuple[SpecModel, int, object]:
    """The model after op, and the reply it gives."""
    after = clone(model)
    status, data = after.handle(op.kind, copy.deepcopy(op.data), op.now, op.corr_id)
    return after, status, data


def agrees(op: Op, status: int, data: object) -> bool:
    """Whether the model's reply is op's: the status, and the data of a success (error texts are the server's), less
    its preload.

    Preload (decision D6: the records of the task's branch, sent along so that an SDK need not ask for them) is a
    cache, read after the operation's own change, not at the instant it takes effect: a task.create of a new promise
    commits its one statement first. Two sibling task.creates at once may each find the other in their preload,
    which no order explains; serializing every change of a branch would cost every fan-out its parallelism, and each
    preloaded record is still its promise as it stood at some instant of the request, which is all an SDK reads it
    for (it asks again for what it will wait on). So the linearizable part of a reply is the rest."""
    if not op.known:
        return True
    return status == op.status and (status >= 400 or without_preload(data) == without_preload(op.reply))


def without_preload(data: object) -> object:
    return {k: v for k, v in data.items() if k != "preload"} if isinstance(data, dict) else data


# ---------------------------------------------------------------- partitions


def partition(ops: Iterable[Op]) -> list[list[Op]]:
    """The independent sub-histories: ops joined whenever they share a key (union-find), each list in invocation
    order. An op's keys must cover what it may read or write, registrations made in the same history included
    (a settle reaches the awaiters that registered on it: those registrations join them)."""
    parent: dict[str, str] = {}

    def root(key):
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    ops = list(ops)
    for op in ops:
        assert op.keys, f"{op.kind} names no key"
        first, *rest = op.keys
        for key in rest:
            parent[root(key)] = root(first)
    groups: dict[str, list[Op]] = {}
    for op in sorted(ops, key=lambda op: op.invoked):
        groups.setdefault(root(next(iter(op.keys))), []).append(op)
    return list(groups.values())


# ---------------------------------------------------------------- the search


class Undecided(Exception):
    """The search needed more steps than its budget: neither linearizable nor shown not to be."""


@dataclass
class Search:
    """What one search found: whether an order exists, and the longest order that explained every reply in it."""

    linearizable: bool
    steps: int
    deepest: list[Op] = field(default_factory=list)


class _Event:
    __slots__ = ("op", "call", "time", "prev", "next", "match")

    def __init__(self, op, call, time):
        self.op, self.call, self.time = op, call, time
        self.prev = self.next = self.match = None


def _events(ops: list[Op]) -> _Event:
    """The invocations and returns in time order (an invocation before a return at the same instant: the two ops
    overlap), as a doubly linked list behind a sentinel, each invocation linked to its return."""
    events = []
    for n, op in enumerate(ops):
        call, ret = _Event(n, True, op.invoked), _Event(n, False, op.ends)
        call.match = ret
        events += [call, ret]
    events.sort(key=lambda e: (e.time, not e.call, e.op))
    head = _Event(-1, True, -1)
    last = head
    for event in events:
        last.next, event.prev = event, last
        last = event
    return head


def _lift(call: _Event) -> None:
    for event in (call, call.match):
        event.prev.next = event.next
        if event.next is not None:
            event.next.prev = event.prev


def _unlift(call: _Event) -> None:
    for event in (call.match, call):
        event.prev.next = event
        if event.next is not None:
            event.next.prev = event


def pure(op: Op) -> bool:
    """Whether op leaves the observable state as it found it, whatever that state: a READ_ONLY kind, or an error
    (the model changes nothing on a 4xx)."""
    return op.kind in READ_ONLY or (op.known and op.status >= 400)


def search(ops: list[Op], budget: int = 2_000_000) -> Search:
    """Wing-Gong with memoization over one sub-history; raises Undecided past `budget` model steps.

    A pure op that can go next and agrees with the current state is placed there without making it a choice:
    any order that places it later can place it here instead (it changes nothing, and moving it earlier breaks
    no real-time constraint), so the search never backs up to try it elsewhere. Without this, k concurrent reads
    make 2^k sets of placed ops, each a memo entry of its own.
    """
    ops = [op for op in ops if op.known or op.kind not in READ_ONLY]  # a read without a reply constrains nothing
    head = _events(ops)
    model, placed, steps = SpecModel(), 0, 0
    seen = {(0, fingerprint(model))}
    stack: list[tuple[_Event, SpecModel, int, bool]] = []
    deepest: list[Op] = []
    event = head.next
    while head.next is not None:
        if event.call:
            steps += 1
            if steps > budget:
                raise Undecided(f"{len(ops)} ops needed more than {budget} steps")
            op = ops[event.op]
            after, status, data = run(model, op)
            if agrees(op, status, data):
                now_placed = placed | (1 << event.op)
                key = (now_placed, fingerprint(after))
                forced = pure(op)
                if key not in seen:
                    seen.add(key)
                    stack.append((event, model, placed, forced))
                    model, placed = after, now_placed
                    _lift(event)
                    if len(stack) > len(deepest):
                        deepest = [ops[e.op] for e, _, _, _ in stack]
                    event = head.next
                    continue
                if forced:  # explored from here before, and it failed: so does this state
                    event = None
            if event is not None:
                event = event.next
        elif event.time == NEVER:
            # Every op still unplaced is of unknown outcome (a known op's return comes before this one): each
            # may never have taken effect, or taken it after everything the history saw.
            return Search(True, steps, [ops[e.op] for e, _, _, _ in stack])
        else:
            event = None
        if event is None:  # back up to the last choice, past the pure ops placed since (they were no choice)
            while stack:
                popped, model, placed, forced = stack.pop()
                _unlift(popped)
                if not forced:
                    event = popped.next
                    break
            else:
                return Search(False, steps, deepest)
    return Search(True, steps, [ops[e.op] for e, _, _, _ in stack])


# ---------------------------------------------------------------- the whole history


@dataclass
class Outcome:
    """The verdict on a whole history: its violations (sub-histories with no order), and what was searched."""

    partitions: int
    steps: int
    violations: list[list[Op]]
    undecided: list[tuple[list[Op], str]]

    @property
    def linearizable(self) -> bool:
        return not self.violations and not self.undecided


def check(ops: Iterable[Op], budget: int = 2_000_000) -> Outcome:
    """Search every independent sub-history."""
    parts = partition(ops)
    steps, violations, undecided = 0, [], []
    for part in parts:
        try:
            found = search(part, budget)
        except Undecided as error:
            undecided.append((part, str(error)))
            continue
        steps += found.steps
        if not found.linearizable:
            violations.append(part)
    return Outcome(len(parts), steps, violations, undecided)


def linearizable(ops: list[Op], budget: int = 2_000_000) -> bool:
    return all(search(part, budget).linearizable for part in partition(ops))


# ---------------------------------------------------------------- shrinking


def truncated(ops: list[Op], cut: int) -> list[Op]:
    """The ops invoked before `cut`, those still running at `cut` with their outcome unknown (or left out, if pure).

    Any order of the whole history, with the later ops left out, orders this one: the ops that returned before
    `cut` come before every op left out (all invoked after `cut`), and what follows them has unknown replies (a
    pure op changed nothing where it was). So a truncation that has no order shows the whole history has none."""
    return [
        op if op.ends <= cut else op.forgotten() for op in ops if op.invoked < cut and (op.ends <= cut or not pure(op))
    ]


def _still_fails(ops: list[Op], budget: int) -> bool:
    try:
        return not linearizable(ops, budget)
    except Undecided:
        return False


def shrink(ops: list[Op], budget: int = 20_000, seconds: float = 20) -> list[Op]:
    """A short sub-history of a non-linearizable `ops` that is itself not linearizable, and whose violation implies
    the original's: every step keeps that implication.

    - cut the history at the earliest return that already fails (truncated);
    - drop pure ops (READ_ONLY kinds, errors), which cannot have changed what a later reply depends on;
    - set aside the reply of any other op (its effect is kept, anywhere after its invocation);
    - drop an op of unknown outcome that changes nothing wherever it goes (idle).

    Other ops of unknown outcome are kept: their effect may be what explains a later reply. Each step is kept only
    if a search within `budget` steps still finds no order (every reply set aside makes the search wider), and
    shrinking stops after `seconds` with what it has.
    """
    until = time.monotonic() + seconds
    ops = sorted(ops, key=lambda op: op.invoked)
    cuts = sorted({op.returned + 1 for op in ops if op.known})
    low, high = 0, len(cuts) - 1
    while low < high:  # truncation is monotone: a failing cut fails at every later cut
        middle = (low + high) // 2
        if _still_fails(truncated(ops, cuts[middle]), budget):
            high = middle
        else:
            low = middle + 1
    if cuts and _still_fails(truncated(ops, cuts[low]), budget):
        ops = truncated(ops, cuts[low])
    ops = [op for op in ops if not idle(op, ops)]
    for step in (_dropped, _forgotten):  # the cheap step first: dropping narrows every later search
        changed = True
        while changed and time.monotonic() < until:
            changed = False
            for op in reversed(list(ops)):
                if time.monotonic() > until:
                    break
                attempt = step(op, ops)
                if attempt is not None and _still_fails(attempt, budget):
                    # Drop at once what has become idle, while the replies that make it so are still known.
                    ops, changed = [other for other in attempt if not idle(other, attempt)], True
    return ops


def _dropped(op: Op, ops: list[Op]) -> list[Op] | None:
    return [other for other in ops if other is not op] if op in ops and pure(op) else None


def _forgotten(op: Op, ops: list[Op]) -> list[Op] | None:
    if op not in ops or not op.known or pure(op):  # a pure op still here is one whose reply the violation needs
        return None
    return [other.forgotten() if other is op else other for other in ops]


def idle(op: Op, ops: list[Op]) -> bool:
    """Whether `op`, of unknown outcome, changes nothing wherever it may be placed among `ops`: a promise.create of
    a promise that an op which returned before it was sent had shown to exist, or a promise.settle of one shown
    settled. Promises are never deleted and a settled promise never changes (nor does an expired one, later), so
    every order of `ops` orders them without it."""
    if op.known or op.kind not in ("promise.create", "promise.settle"):
        return False
    for other in ops:
        if other.known and other.returned < op.invoked and other.now <= op.now and other.status == 200:
            shown = shown_promise(other.reply, op.data["id"])
            if shown is not None and (op.kind == "promise.create" or shown["state"] != "pending"):
                return True
    return False


def shown_promise(reply: object, id: str) -> dict | None:
    """The record of promise `id` a success reply carries (its own, or a fenced action's), or None."""
    if not isinstance(reply, dict):
        return None
    fenced = (reply.get("action") or {}).get("data")
    for record in (reply.get("promise"), fenced.get("promise") if isinstance(fenced, dict) else None):
        if isinstance(record, dict) and record.get("id") == id:
            return record
    return None


# ---------------------------------------------------------------- saving


def dumps(ops: list[Op]) -> bytes:
    """A history as JSON lines, one op each: a file to check again (`python -m tests.linearizability.checker FILE`)."""
    fields = ("client", "kind", "data", "now", "invoked", "returned", "status", "reply", "corr_id", "seen")
    lines = [orjson.dumps({**{f: getattr(op, f) for f in fields}, "keys": sorted(op.keys)}) for op in ops]
    return b"\n".join(lines) + b"\n"


def loads(text: bytes) -> list[Op]:
    ops = []
    for line in text.splitlines():
        fields = orjson.loads(line)
        fields["keys"] = frozenset(fields["keys"])
        fields["seen"] = tuple(fields["seen"]) if fields["seen"] is not None else None
        ops.append(Op(**fields))
    return ops


# ---------------------------------------------------------------- explaining


def describe(op: Op, start: int) -> str:
    """One line: who sent what when, and what came back."""
    span = f"{(op.invoked - start) / 1e6:8.2f} .. " + (
        f"{(op.returned - start) / 1e6:8.2f} ms" if op.known else "  (never)  "
    )
    if op.known:
        outcome = f"-> {op.status} {_compact(op.reply)}"
    elif op.seen is not None:
        outcome = f"-> reply set aside (was {op.seen[0]} {_compact(op.seen[1])})"
    else:
        outcome = "-> no reply (outcome unknown)"
    return f"{span}  {op.client:>10}  {op.kind} {_compact(op.data)} {outcome}"


def _compact(value: object, limit: int = 400) -> str:
    text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def stuck(ops: list[Op], budget: int = 2_000_000) -> list[Op]:
    """The ops with a reply that could go next after the longest order explaining every reply, in each part with no
    order: the replies no order explains."""
    found = []
    for part in partition(ops):
        search_ = search(part, budget)
        if search_.linearizable:
            continue
        placed = {id(op) for op in search_.deepest}
        rest = [op for op in part if id(op) not in placed]
        first_return = min(op.ends for op in rest)
        found += [op for op in rest if op.known and op.invoked <= first_return]
    return found


def explain(ops: list[Op], budget: int = 2_000_000) -> str:
    """The history, then the longest order that explains every reply in it, then each op that could come next
    after that order with what the model would have answered there."""
    ops = sorted(ops, key=lambda op: op.invoked)
    start = min(op.invoked for op in ops)
    lines = [f"{len(ops)} ops with no linearization (times from the first invocation):"]
    lines += ["  " + describe(op, start) for op in ops]
    for part in partition(ops):
        found = search(part, budget)
        if found.linearizable:
            continue
        lines.append(f"the longest order that explains every reply ({len(found.deepest)} of {len(part)} ops):")
        model = SpecModel()
        for op in found.deepest:
            model, _, _ = run(model, op)
            lines.append(f"  {op.client:>10}  {op.kind} {_compact(op.data, 160)}")
        placed = {id(op) for op in found.deepest}
        rest = [op for op in part if id(op) not in placed]
        first_return = min(op.ends for op in rest)
        lines.append("after it no op can go next:")
        for op in rest:
            if op.invoked > first_return:
                continue
            _, status, data = run(model, op)
            said = f"{op.status} {_compact(op.reply, 300)}" if op.known else "nothing (outcome unknown)"
            lines.append(f"  {op.client:>10}  {op.kind} {_compact(op.data, 160)}: the server said {said}")
            lines.append(f"  {'':>10}  the model, after that order, says {status} {_compact(data, 300)}")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    with open(sys.argv[1], "rb") as saved:
        history = loads(saved.read())
    outcome = check(history)
    print(f"{len(history)} ops, {outcome.partitions} independent parts, {len(outcome.violations)} with no order")
    for part in outcome.violations:
        print(explain(shrink(part)))
