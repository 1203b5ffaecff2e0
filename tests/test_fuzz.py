"""Fuzzing POST / with Hypothesis: bad input gets a 4xx with a message, never a 500, never a partial write.

1. Arbitrary bytes and arbitrary JSON values as the whole body.
2. For every operation kind in OPERATIONS: a valid head and `data` that is well formed, well formed
   with one field deleted or replaced by a wrong or out-of-range value, or any JSON object. Only
   200/300/400/404/409/422 may come back.
3. Every 4xx (404/409/422 included) leaves the stored state exactly as it was.

Each example starts from the same small state: `debug.reset` and a seed built through the protocol
once per test, then every example runs inside a savepoint that is rolled back afterwards (the `db`
fixture wraps the whole test in one transaction, so examples would otherwise see each other's
writes; this is a per-example reset and re-seed, only cheaper). The example counts keep the file
near a minute on SQLite; set FUZZ_EXAMPLES=<n> to run n examples per test instead.
"""

import json
import os
from collections import Counter
from contextlib import contextmanager

import orjson
import pytest
from django.db import transaction
from hypothesis import HealthCheck, event, example, given, note, settings
from hypothesis import strategies as st

from resonate_site.protocol.dispatch import OPERATIONS, quick
from resonate_site.protocol.envelope import answer, decoded
from tests.conftest import VERSION

TARGET = "resonate:target"
I64_MAX = 2**63 - 1
ALLOWED = {200, 300, 400, 404, 409, 422}
STATUSES = Counter()  # (kind, status) -> replies; FUZZ_STATS=1 prints them, to see which paths the fuzzing reaches


@pytest.fixture(scope="module", autouse=True)
def report_statuses():
    yield
    if os.environ.get("FUZZ_STATS"):
        for (kind, status), count in sorted(STATUSES.items()):
            print(f"{kind:28} {status}: {count}")


def fuzz_settings(examples):
    return settings(
        max_examples=int(os.environ.get("FUZZ_EXAMPLES", examples)),
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )


# JSON values, including what a careless client really sends: NUL, lone surrogates, huge integers

CHARACTERS = st.one_of(
    st.characters(exclude_categories=()),
    st.sampled_from(["\x00", "\ud800", "\udfff", "\U0001f600", ".", "/", "@", ":", '"', "\\", " "]),
)
TEXT = st.text(CHARACTERS, max_size=12)
INTEGERS = st.one_of(
    st.integers(-5, 20_000),
    st.integers(-(2**70), 2**70),
    st.sampled_from([I64_MAX, I64_MAX + 1, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1]),
)
FLOATS = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.0, -0.0, 1.0, 1e3, 1.5]))
SCALARS = st.one_of(st.none(), st.booleans(), INTEGERS, FLOATS, TEXT)
JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=12,
)


def dumps(value):
    """stdlib json: integers of any size, and lone surrogates as \\ud800 escapes (orjson refuses both)."""
    return json.dumps(value).encode()


# The state each example starts from

POOL = ["a", "a.1", "b", "c", "h", "q", "s", "w", "w.1"]  # ids; "b" never exists
PIDS = ["w1", "w2", "x"]
SEED_ADDRESS = "poll://any@g"


def seed(protocol):
    """A pending task (a), a timer awaited by a (a.1), an acquired task (w) with a branch child (w.1),
    a suspended task (c), a halted task (h), a settled promise (q), a listener and an hourly schedule (s)."""

    def ok(kind, data, now=0):
        answer = protocol(kind, data, now=now)
        assert answer.status == 200, (kind, data, answer)
        return answer

    def promise(id, timeout_at=10_000, **tags):
        ok("promise.create", {"id": id, "timeoutAt": timeout_at, "tags": tags})

    ok("debug.reset", {})
    promise("a", **{TARGET: SEED_ADDRESS})
    promise("a.1", timeout_at=5_000, **{"resonate:timer": "true"})
    ok("promise.register_callback", {"awaited": "a.1", "awaiter": "a"})
    ok("promise.register_listener", {"awaited": "a.1", "address": "poll://uni@g/w1"})
    promise("w", **{TARGET: SEED_ADDRESS, "resonate:branch": "w"})
    ok("task.acquire", {"id": "w", "version": 0, "pid": "w1", "ttl": 3_000})
    promise("w.1", **{"resonate:branch": "w"})
    promise("c", **{TARGET: "http://h/c"})
    ok("task.acquire", {"id": "c", "version": 0, "pid": "w2", "ttl": 3_000})
    ok(
        "task.suspend",
        {
            "id": "c",
            "version": 1,
            "actions": [{"kind": "promise.register_callback", "head": {}, "data": {"awaited": "a.1", "awaiter": "c"}}],
        },
    )
    promise("h", **{TARGET: SEED_ADDRESS})
    ok("task.halt", {"id": "h"})
    promise("q")
    ok("promise.settle", {"id": "q", "state": "resolved", "value": {"data": "eA=="}})
    ok(
        "schedule.create",
        {
            "id": "s",
            "cron": "0 * * * *",
            "promiseId": "s.{{.timestamp}}",
            "promiseTimeout": 60_000,
            "promiseTags": {TARGET: SEED_ADDRESS},
        },
    )


@contextmanager
def rolled_back():
    """Whatever the block writes is undone, so the next example starts from the same state."""
    with transaction.atomic():
        yield
        transaction.set_rollback(True)


def stored(protocol):
    """Everything stored: debug.snap (which leaves schedules out) plus every schedule."""
    answer = protocol("schedule.search", {"limit": 1000}, now=0)
    assert answer.status == 200 and "cursor" not in answer.data
    return {**protocol.snap(), "schedules": answer.data["schedules"]}


# Well-formed data for every operation


def one_of_weighted(*pairs):
    """st.one_of with rough weights: [(weight, strategy), ...]."""
    return st.one_of(*[strategy for weight, strategy in pairs for _ in range(weight)])


# Well-formed strings: no NUL, no lone surrogate (the mutations below bring those in).
SAFE_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=8)
IDS = one_of_weighted((8, st.sampled_from([*POOL, "w.2"])), (1, SAFE_TEXT.filter(bool)))
PID = one_of_weighted((4, st.sampled_from(PIDS)), (1, SAFE_TEXT.filter(bool)))
SCHEDULE_IDS = one_of_weighted((2, st.just("s")), (3, IDS))
# (task id, version) pairs that the seed makes meaningful: held (w 1), suspended (c 1), pending (a 0),
# halted (h 0), and stale versions. Each operation favours the pair it can succeed with.
REFS = [("w", 1), ("c", 1), ("a", 0), ("h", 0), ("w", 0), ("a", 1), ("w", 2)]


def task_refs(favourite):
    return one_of_weighted(
        (3, st.just(favourite)),
        (3, st.sampled_from(REFS)),
        (1, st.tuples(IDS, st.integers(0, I64_MAX))),
    )


TIME = one_of_weighted((6, st.integers(0, 20_000)), (1, st.integers(0, I64_MAX)))
NOW = one_of_weighted((6, st.integers(0, 9_999)), (2, st.integers(10_000, 20_000)), (1, st.integers(0, 10**7)))
TTL = one_of_weighted((6, st.integers(0, 10_000)), (1, st.integers(0, I64_MAX)))
LIMIT = one_of_weighted((4, st.integers(1, 5)), (1, st.integers(1, 1000)))
ADDRESS = st.sampled_from(
    [
        "poll://any@g",
        "poll://uni@g/w1",
        "poll://any@g/w2",
        "poll://any@default",
        "http://h",
        "https://h:8443/x?y=1",
    ]
)
STRING = one_of_weighted((3, st.sampled_from(["", "eA==", "e30="])), (1, SAFE_TEXT))
STRING_MAP = st.dictionaries(
    st.sampled_from(["k", "content-type", "resonate:branch", TARGET]) | SAFE_TEXT,
    STRING | st.sampled_from(["w", SEED_ADDRESS]),
    max_size=3,
)
VALUE = st.fixed_dictionaries({}, optional={"headers": STRING_MAP, "data": STRING})
TAGS = st.fixed_dictionaries(
    {},
    optional={
        TARGET: ADDRESS,
        "resonate:timer": st.sampled_from(["true", "false"]),
        "resonate:external": st.sampled_from(["true", "false"]),
        "resonate:delay": st.integers(0, 20_000).map(str),
        "resonate:branch": st.sampled_from(POOL),
        "k": STRING,
    },
)
HEAD = st.fixed_dictionaries({}, optional={"corrId": st.just("inner"), "version": st.just(VERSION)})
PROMISE_STATES = st.sampled_from(["pending", "resolved", "rejected", "rejected_canceled", "rejected_timedout"])
TASK_STATES = st.sampled_from(["pending", "acquired", "suspended", "halted", "fulfilled"])
SETTLE_STATES = st.sampled_from(["resolved", "rejected", "rejected_canceled"])
CRONS = st.sampled_from(
    ["0 * * * *", "*/30 * * * *", "0 2 * * *", "0 0 * * 7", "0 0 1 JAN *", "@daily", "0 0 */2 * * *"]
)
TEMPLATES = st.sampled_from(["{{.id}}.{{.timestamp}}", "s.{{.timestamp}}", "fixed", "a"])


def by_id():
    return st.fixed_dictionaries({"id": IDS})


def promise_create_data(tags=TAGS):
    return st.fixed_dictionaries({"id": IDS, "timeoutAt": TIME}, optional={"param": VALUE, "tags": tags})


def promise_settle_data(ids=IDS):
    return st.fixed_dictionaries({"id": ids, "state": SETTLE_STATES}, optional={"value": VALUE})


def inner(kind, data):
    return st.fixed_dictionaries({"kind": st.just(kind), "data": data}, optional={"head": HEAD})


def search(**fields):
    return st.fixed_dictionaries({}, optional={"limit": LIMIT, "cursor": IDS, **fields})


@st.composite
def task_ref(draw, favourite=("w", 1), **fields):
    """{id, version} of a task, plus the given fields (strategies, or functions of the id)."""
    id, version = draw(task_refs(favourite))
    data = {"id": id, "version": version}
    for name, field in fields.items():
        data[name] = draw(field(id) if callable(field) else field)
    return data


def fulfil_action(id):
    return inner("promise.settle", promise_settle_data(st.just(id)))


def suspend_actions(id):
    awaited = one_of_weighted((2, st.sampled_from(["a.1", "q", "w.1", "b"])), (1, IDS))
    callback = st.fixed_dictionaries({"awaited": awaited, "awaiter": one_of_weighted((4, st.just(id)), (1, IDS))})
    return st.lists(inner("promise.register_callback", callback), max_size=3)


def fence_action(id):
    settled = one_of_weighted((3, IDS), (1, st.just(id)))  # the spec lets a fence settle the task's own promise
    return inner("promise.create", promise_create_data()) | inner("promise.settle", promise_settle_data(settled))


WELL_FORMED = {
    "promise.get": by_id(),
    "promise.create": promise_create_data(),
    "promise.settle": promise_settle_data(),
    "promise.register_callback": st.fixed_dictionaries({"awaited": IDS, "awaiter": IDS}),
    "promise.register_listener": st.fixed_dictionaries({"awaited": IDS, "address": ADDRESS}),
    "promise.search": search(state=PROMISE_STATES, tags=STRING_MAP),
    "task.get": by_id(),
    "task.create": st.fixed_dictionaries(
        {
            "pid": PID,
            "ttl": TTL,
            "action": inner("promise.create", promise_create_data(TAGS.map(lambda t: {TARGET: SEED_ADDRESS, **t}))),
        }
    ),
    "task.acquire": task_ref(("a", 0), pid=PID, ttl=TTL),
    "task.fence": task_ref(action=fence_action),
    "task.heartbeat": st.fixed_dictionaries(
        {
            "pid": PID,
            "tasks": st.lists(task_ref(), max_size=3),
        }
    ),
    "task.suspend": task_ref(actions=suspend_actions),
    "task.fulfill": task_ref(action=fulfil_action),
    "task.release": task_ref(),
    "task.halt": one_of_weighted((1, st.sampled_from([{"id": "w"}, {"id": "c"}, {"id": "a"}])), (2, by_id())),
    "task.continue": one_of_weighted((1, st.just({"id": "h"})), (2, by_id())),
    "task.search": search(state=TASK_STATES),
    "schedule.get": st.fixed_dictionaries({"id": SCHEDULE_IDS}),
    "schedule.create": st.fixed_dictionaries(
        {"id": SCHEDULE_IDS, "cron": CRONS, "promiseId": TEMPLATES, "promiseTimeout": TTL},
        optional={"promiseParam": VALUE, "promiseTags": TAGS},
    ),
    "schedule.delete": st.fixed_dictionaries({"id": SCHEDULE_IDS}),
    "schedule.search": search(tags=STRING_MAP),
    "debug.start": st.just({}),
    "debug.stop": st.just({}),
    "debug.reset": st.just({}),
    "debug.snap": st.just({}),
    "debug.tick": st.fixed_dictionaries({"time": st.integers(0, 10**7 - 1)}),
}


def test_every_operation_has_a_well_formed_data_strategy():
    assert set(WELL_FORMED) == set(OPERATIONS)
    assert len(OPERATIONS) == 26


# One field deleted, or replaced by a value of the wrong type or out of range

BAD_VALUES = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            False,
            0,
            -1,
            1.0,
            1e3,
            0.5,
            I64_MAX + 1,
            2**64,
            -(2**63) - 1,
            10**30,
            "",
            " ",
            "\x00",
            "a\x00",
            "\ud800",
            "x",
            "1000",
            "pending",
            "rejected_timedout",
            "foo",
            "poll://nope",
            "poll://all@g",
            "not a cron",
            "61 * * * *",
            "é" * 600,
            "b" * 1025,
            [],
            [None],
            [{}],
            {},
            {"k": 1},
            {"k": None},
            {"resonate:target": "nope"},
            {"resonate:delay": "soon"},
            {"data": 1},
            {"headers": {"k": 2}},
        ]
    ),
    JSON,
)


def paths(value, prefix=()):
    """Every path (a tuple of keys and indexes) to a value inside nested dicts and lists."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner_value in items:
        yield (*prefix, key)
        yield from paths(inner_value, (*prefix, key))


def edited(value, path, replacement=None, delete=False):
    """A copy of `value` with the value at `path` replaced or deleted."""
    if not path:
        return replacement
    head, rest = path[0], path[1:]
    copy = dict(value) if isinstance(value, dict) else list(value)
    if delete and not rest:
        del copy[head]
    else:
        copy[head] = edited(value[head], rest, replacement, delete)
    return copy


@st.composite
def mutated(draw, well_formed):
    data = draw(well_formed)
    where = list(paths(data))
    if not where:
        return {**data, draw(TEXT): draw(BAD_VALUES)}
    path = draw(st.sampled_from(where))
    if draw(st.booleans()):
        note(f"deleted {path}")
        return edited(data, path, delete=True)
    replacement = draw(BAD_VALUES)
    note(f"replaced {path} by {replacement!r}")
    return edited(data, path, replacement)


FIELD_NAMES = st.sampled_from(
    [
        "id",
        "timeoutAt",
        "param",
        "tags",
        "state",
        "value",
        "awaited",
        "awaiter",
        "address",
        "limit",
        "cursor",
        "pid",
        "ttl",
        "action",
        "version",
        "tasks",
        "actions",
        "cron",
        "promiseId",
        "promiseTimeout",
        "promiseParam",
        "promiseTags",
        "time",
        "kind",
        "head",
        "data",
        "headers",
    ]
)
ANY_OBJECT = st.dictionaries(FIELD_NAMES | TEXT, JSON, max_size=6)


def data_for(kind):
    return one_of_weighted((4, WELL_FORMED[kind]), (3, mutated(WELL_FORMED[kind])), (1, ANY_OBJECT))


@st.composite
def heads(draw, kind, data):
    head = {"corrId": draw(st.sampled_from(["c-fuzz", "", "ünï"])), "version": VERSION}
    time = data.get("time") if kind == "debug.tick" and isinstance(data, dict) else None
    debug_time = draw(one_of_weighted((8, NOW), (1, st.none())))
    if isinstance(time, int) and not isinstance(time, bool) and draw(st.integers(0, 5)):
        debug_time = time if 0 <= time <= 10**7 else None
    if debug_time is not None:
        head["resonate:debug_time"] = debug_time
    if draw(st.integers(0, 4)) == 0:
        head["auth"] = draw(st.sampled_from(["eyJ.e30.sig", ""]))
    if draw(st.integers(0, 9)) == 0:
        head["resonate:origin"] = draw(JSON)
    return head


@st.composite
def requests(draw, kind):
    data = draw(data_for(kind))
    return {"kind": kind, "head": draw(heads(kind, data)), "data": data}


# 1. Whole bodies


def check_echo(answer, raw):
    """kind and corrId are echoed when the body lets them be read, else "unknown" and "0" (§1.3)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        value = None
    kind, head = (value.get("kind"), value.get("head")) if isinstance(value, dict) else (None, None)
    corr_id = head.get("corrId") if isinstance(head, dict) else None
    assert answer.envelope["kind"] == (kind if isinstance(kind, str) else "unknown")
    assert answer.envelope["head"]["corrId"] == (corr_id if isinstance(corr_id, str) else "0")


def check_reply(protocol, raw, before, allowed=ALLOWED):
    """Send one body: a protocol status, the echo, the data shape, and no write on a refusal."""
    answer = protocol.raw(raw)
    event(f"{answer.envelope['kind']} {answer.status}")
    STATUSES[answer.envelope["kind"], answer.status] += 1
    assert answer.status in allowed, answer
    check_echo(answer, raw)
    after = stored(protocol)
    if answer.status >= 400:
        assert after == before, answer
    elif answer.envelope["kind"] == "debug.tick":
        assert answer.data == []
    else:
        assert isinstance(answer.data, dict)
        if answer.status == 300:
            assert answer.envelope["kind"] == "task.suspend" and isinstance(answer.data["preload"], list)
    return answer, after


BODIES = st.one_of(
    st.binary(max_size=200),
    JSON.map(dumps),
    st.sampled_from([b"", b" ", b"{}", b"[]", b"null", b"\xef\xbb\xbf{}", b'{"kind": NaN}', b"1e400"]),
)


@fuzz_settings(150)
@given(raw=BODIES)
def test_arbitrary_bytes_get_400(protocol, raw):
    answer = protocol.raw(raw)
    assert answer.status == 400, answer
    assert answer.data.startswith("Invalid request envelope: ")
    check_echo(answer, raw)


def could_be_valid(value):
    """Whether a random JSON value happens to be a well-formed envelope of a real operation."""
    head = value.get("head") if isinstance(value, dict) else None
    return (
        isinstance(head, dict)
        and head.get("version") == VERSION
        and isinstance(head.get("corrId"), str)
        and value.get("kind") in OPERATIONS
        and isinstance(value.get("data"), dict)
    )


def test_arbitrary_json_values_get_400_and_write_nothing(protocol):
    seed(protocol)
    before = stored(protocol)

    @fuzz_settings(150)
    @given(value=JSON)
    def run(value):
        with rolled_back():
            allowed = ALLOWED if could_be_valid(value) else {400}
            answer, _ = check_reply(protocol, dumps(value), before, allowed=allowed)
        if answer.status == 400:
            assert answer.data.startswith(
                (
                    "Invalid request envelope: ",
                    "Missing or invalid 'kind'",
                    "Invalid 'data'",
                    "Unsupported protocol version",
                    "Unknown operation: ",
                    "Invalid request: ",
                )
            )

    run()


ENVELOPE_SHAPED = st.fixed_dictionaries(
    {},
    optional={
        "kind": st.sampled_from(sorted(OPERATIONS)) | st.sampled_from(["", "nope", "debug.nope"]) | JSON,
        "head": st.fixed_dictionaries(
            {},
            optional={
                "corrId": st.just("c") | JSON,
                "version": st.just(VERSION) | st.just("2025-01-01") | JSON,
                "auth": st.just("t") | JSON,
                "resonate:debug_time": st.integers(0, 20_000) | JSON,
            },
        )
        | JSON,
        "data": ANY_OBJECT | JSON,
        "extra": JSON,
    },
)


def test_arbitrary_envelopes_get_a_protocol_status_and_refusals_write_nothing(protocol):
    seed(protocol)
    before = stored(protocol)

    @fuzz_settings(200)
    @given(value=ENVELOPE_SHAPED)
    def run(value):
        with rolled_back():
            check_reply(protocol, dumps(value), before)

    run()


@fuzz_settings(150)
@given(raw=BODIES | JSON.map(dumps) | ENVELOPE_SHAPED.map(dumps))
def test_a_body_decoded_beforehand_is_answered_as_the_body_itself(protocol, raw):
    """The server decodes a body on its event loop, to tell a quick request (dispatch.quick), and answers the
    decoded envelope: whatever the body, that is the answer the body alone gets, and telling quick never raises."""
    envelope = decoded(raw)
    assert quick(envelope) in (True, False)
    with rolled_back():
        alone = answer(raw, now=1_000)
    with rolled_back():
        beforehand = answer(raw, now=1_000, envelope=envelope)
    assert beforehand == alone


# 2 and 3. Every operation: only protocol statuses, and a refusal writes nothing


def callback(awaited, awaiter):
    return {"kind": "promise.register_callback", "head": {}, "data": {"awaited": awaited, "awaiter": awaiter}}


# Requests that reach the deep success paths from the seed (at time 1000), run before the random
# examples of each kind, followed by a repeat that may now be refused.
SUCCESSES = {
    "promise.settle": [({"id": "a.1", "state": "rejected", "value": {"data": "eA=="}}, 200)],  # unblock + resumes
    "promise.register_callback": [({"awaited": "w.1", "awaiter": "a"}, 200)],
    "promise.register_listener": [({"awaited": "w", "address": "https://h/hook"}, 200)],
    "task.create": [
        (
            {
                "pid": "w3",
                "ttl": 500,
                "action": {
                    "kind": "promise.create",
                    "head": {},
                    "data": {"id": "w.2", "timeoutAt": 9_000, "tags": {TARGET: SEED_ADDRESS}},
                },
            },
            200,
        )
    ],
    "task.acquire": [({"id": "a", "version": 0, "pid": "w3", "ttl": 500}, 200)],
    "task.fence": [
        (
            {
                "id": "w",
                "version": 1,
                "action": {
                    "kind": "promise.create",
                    "head": {},
                    "data": {"id": "w.2", "timeoutAt": 9_000, "tags": {"resonate:branch": "w"}},
                },
            },
            200,
        ),
        (
            {
                "id": "w",
                "version": 1,
                "action": {"kind": "promise.settle", "head": {}, "data": {"id": "a.1", "state": "resolved"}},
            },
            200,
        ),
    ],
    "task.heartbeat": [({"pid": "w1", "tasks": []}, 200), ({"pid": "w1", "tasks": [{"id": "w", "version": 1}]}, 200)],
    "task.suspend": [
        ({"id": "w", "version": 1, "actions": [callback("a.1", "w")]}, 200),
        ({"id": "w", "version": 1, "actions": [callback("a.1", "w"), callback("q", "w")]}, 300),
        ({"id": "w", "version": 1, "actions": [callback("b", "w")]}, 422),
    ],
    "task.fulfill": [
        (
            {
                "id": "w",
                "version": 1,
                "action": {"kind": "promise.settle", "head": {}, "data": {"id": "w", "state": "resolved"}},
            },
            200,
        )
    ],
    "task.release": [({"id": "w", "version": 1}, 200)],
    "task.halt": [({"id": "c"}, 200)],
    "task.continue": [({"id": "h"}, 200)],
    "schedule.delete": [({"id": "s"}, 200)],
    "debug.tick": [({"time": 9_000_000}, 200)],
}


BY_ID = {"promise.get", "task.get", "task.halt", "task.continue", "schedule.get", "schedule.delete"}


def envelope_of(kind, data):
    time = data["time"] if kind == "debug.tick" else 1_000
    return {"kind": kind, "head": {"corrId": "c-fuzz", "version": VERSION, "resonate:debug_time": time}, "data": data}


@pytest.mark.parametrize(
    "kind,data,status",
    [(kind, data, status) for kind, cases in SUCCESSES.items() for data, status in cases],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_the_seed_lets_the_fuzzing_reach_deep_paths(protocol, kind, data, status):
    seed(protocol)
    answer = protocol.raw(dumps(envelope_of(kind, data)), kind, "c-fuzz")
    assert answer.status == status, answer


@pytest.mark.parametrize("kind", sorted(OPERATIONS))
def test_every_operation_answers_a_protocol_status_and_refusals_write_nothing(protocol, kind):
    seed(protocol)
    seeded = stored(protocol)

    @fuzz_settings(16)
    @given(batch=st.lists(requests(kind), min_size=1, max_size=3))
    def run(batch):
        with rolled_back():
            before = seeded
            for request in batch:
                note(repr(request))
                _, before = check_reply(protocol, dumps(request), before)

    for data, _ in SUCCESSES.get(kind, []):
        run = example(batch=[envelope_of(kind, data), envelope_of(kind, data)])(run)
    if kind in BY_ID:  # every seeded id, whatever the random draws
        run = example(batch=[envelope_of(kind, {"id": id}) for id in [*POOL, "w.2"]])(run)
    run()


# 4. Mixed sequences: any operation after any other, from the same seeded state


def test_mixed_sequences_of_operations_answer_protocol_statuses_and_refusals_write_nothing(protocol):
    seed(protocol)
    seeded = stored(protocol)

    @fuzz_settings(40)
    @given(batch=st.lists(st.sampled_from(sorted(OPERATIONS)).flatmap(requests), min_size=1, max_size=6))
    def run(batch):
        with rolled_back():
            before = seeded
            for request in batch:
                note(repr(request))
                _, before = check_reply(protocol, dumps(request), before)

    run()


# Validation runs DRF's own code on one serializer instance per shape (serializers.decode); it must answer
# exactly what a fresh serializer's is_valid() answers, for every operation, valid or not.


@fuzz_settings(300)
@given(st.data())
def test_decoding_with_a_kept_serializer_answers_as_a_fresh_one(data):
    from rest_framework.exceptions import ValidationError

    from resonate_site.protocol.serializers import decode

    kind = data.draw(st.sampled_from(sorted(OPERATIONS)))
    value = data.draw(data_for(kind))
    request = OPERATIONS[kind].request

    def fresh():
        serializer = request(data=value)
        if serializer.is_valid():
            return dict(serializer.validated_data)
        raise ValidationError(serializer.errors)

    def outcome(validation):
        try:
            return "valid", validation()
        except ValidationError as error:
            return "invalid", error.detail
        except Exception as error:  # e.g. a lone surrogate, which the JSON decoders in front never let through
            return "raised", type(error)

    assert outcome(lambda: decode(request, value)) == outcome(fresh)
