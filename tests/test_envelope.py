"""The request envelope and bad input (PROTOCOL.md §1.2-1.5, §7, decisions D2, D3, D7).

One test per rule, in the order of the envelope checks of §1.4, then the data rules of D3. Every
refusal is a 4xx whose data is a JSON string (the `protocol` fixture checks that on every reply), and
every refused request leaves the stored state exactly as it was.
"""

import json
import random
import string
from contextlib import contextmanager

import pytest

from tests.conftest import VERSION, action, create

TARGET = "resonate:target"  # the tag (tests.conftest.TARGET is an address)

I64_MAX = 2**63 - 1
NOW = 1_000  # the debug time of every request below, unless a test says otherwise


# Helpers


def body(value):
    """Any JSON value as a request body; stdlib json, so integers of any size and lone surrogates survive."""
    return json.dumps(value).encode()


def envelope(kind="promise.get", data=None, **head):
    head = {"corrId": "c-env", "version": VERSION, "resonate:debug_time": NOW, **head}
    return {"kind": kind, "head": head, "data": {"id": "p"} if data is None else data}


HTTP = {TARGET: "http://h"}


def task_create(promise, pid="w", ttl=1):
    return {"pid": pid, "ttl": ttl, "action": action("promise.create", promise)}


def fence(inner_kind, inner_data, id="w", version=1):
    return {"id": id, "version": version, "action": action(inner_kind, inner_data)}


def fulfill(version=1, **value):
    return fence("promise.settle", {"id": "w", "state": "resolved", **value}, version=version)


def schedule(**fields):
    return {"id": "s2", "cron": "* * * * *", "promiseId": "x", "promiseTimeout": 1, **fields}


def without(mapping, key):
    return {k: v for k, v in mapping.items() if k != key}


def state(protocol):
    """Everything stored: debug.snap (which leaves schedules out) plus every schedule."""
    schedules = protocol("schedule.search", {"limit": 1000}, now=NOW)
    assert schedules.status == 200 and "cursor" not in schedules.data
    return {**protocol.snap(), "schedules": schedules.data["schedules"]}


@contextmanager
def nothing_written(protocol):
    before = state(protocol)
    yield
    assert state(protocol) == before


def seed(protocol):
    """Some state for refused requests to leave alone: promises, a pending and an acquired task, a
    callback, a listener and a schedule."""
    assert protocol("promise.create", create("p", tags={TARGET: "poll://any@g"}), now=0).status == 200
    assert protocol("promise.create", create("q"), now=0).status == 200
    assert protocol("promise.create", create("w", tags={TARGET: "poll://any@g"}), now=0).status == 200
    acquired = protocol("task.acquire", {"id": "w", "version": 0, "pid": "w1", "ttl": 5_000}, now=0)
    assert acquired.status == 200 and acquired.data["task"]["version"] == 1
    assert protocol("promise.register_callback", {"awaited": "q", "awaiter": "p"}, now=0).status == 200
    assert protocol("promise.register_listener", {"awaited": "q", "address": "poll://uni@g/w1"}, now=0).status == 200
    assert (
        protocol(
            "schedule.create",
            {
                "id": "s",
                "cron": "0 * * * *",
                "promiseId": "s.{{.timestamp}}",
                "promiseTimeout": 1_000,
                "promiseTags": {TARGET: "poll://any@g"},
            },
            now=0,
        ).status
        == 200
    )


def refused(protocol, kind, data, *fragments, status=400):
    """Send one request that must be refused with `status`; its message names every fragment; nothing is written."""
    seed(protocol)
    with nothing_written(protocol):
        answer = protocol.raw(body(envelope(kind, data)), kind, "c-env")
    assert answer.status == status, answer
    for fragment in fragments:
        assert fragment in answer.data, answer.data
    return answer


def accepted(protocol, kind, data):
    answer = protocol.raw(body(envelope(kind, data)), kind, "c-env")
    assert answer.status == 200, answer
    return answer


# GET /health, GET /ready (§8.2)


def test_health_answers_200(client):
    assert client.get("/health").status_code == 200


def test_ready_answers_200_when_the_database_answers(client, db):
    assert client.get("/ready").status_code == 200


# Failures are answers too: never Django's HTML error page on the protocol's addresses


def test_an_operation_that_crashes_answers_a_500_envelope_not_a_page(protocol, monkeypatch, caplog):
    """The log says what reproduces it: the operation, its corrId, the time it ran at and its data."""
    from resonate_site.protocol import dispatch

    def crash(req, now):
        raise RuntimeError("a bug")

    get = dispatch.OPERATIONS["promise.get"]
    monkeypatch.setitem(dispatch.OPERATIONS, "promise.get", get._replace(handler=crash))

    answer = protocol("promise.get", {"id": "p"}, now=1234, head={"corrId": "crash"})

    assert answer.status == 500 and answer.data == "Internal server error"
    (logged,) = [r for r in caplog.records if r.levelname == "ERROR" and r.name == "resonate_site.protocol.envelope"]
    assert logged.getMessage() == 'promise.get crash failed at 1234: {"id":"p"}'
    assert "RuntimeError: a bug" in logged.exc_text


def test_the_log_of_a_crash_cuts_a_huge_request_short():
    from resonate_site.protocol.envelope import EXCERPT_CHARS, excerpt

    assert excerpt({"id": "p"}) == '{"id":"p"}'
    cut = excerpt({"value": "x" * 10_000})
    assert len(cut) < EXCERPT_CHARS + 40 and cut.endswith("(10012 characters)")


def test_any_other_address_that_crashes_answers_plain_text_not_a_page(client, monkeypatch):
    import resonate_site.metrics

    def crash(registry):
        raise RuntimeError("a bug")

    monkeypatch.setattr(resonate_site.metrics, "generate_latest", crash)
    client.raise_request_exception = False

    response = client.get("/metrics")

    assert response.status_code == 500 and response["Content-Type"] == "text/plain"
    assert response.content == b"Internal server error"


# §1.4 step 1: the body must be a JSON object with kind, head, head.corrId, head.version and data


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"not json",
        b"{'kind': 'promise.get'}",
        b'{"kind": "promise.get",}',
        b"\xff\xfe{}",
        b"\xef\xbb\xbf{}",
        b'{"kind": NaN}',
        b'{"a": 1e400}',
        b"[1, 2",
    ],
    ids=repr,
)
def test_a_body_that_is_not_json_is_an_invalid_envelope(protocol, raw):
    answer = protocol.raw(raw)
    assert answer.status == 400
    assert answer.data.startswith("Invalid request envelope: ")
    assert answer.envelope["kind"] == "unknown" and answer.envelope["head"]["corrId"] == "0"


@pytest.mark.parametrize("value", [None, True, 0, 1.5, "promise.get", [], [envelope()]], ids=repr)
def test_a_body_that_is_not_a_json_object_is_an_invalid_envelope(protocol, value):
    answer = protocol.raw(body(value))
    assert answer.status == 400
    assert answer.data.startswith("Invalid request envelope: ")
    assert answer.envelope["kind"] == "unknown" and answer.envelope["head"]["corrId"] == "0"


MISTYPED = [None, 1, True, 1.5, [], {}]


@pytest.mark.parametrize("kind", ["missing", *MISTYPED], ids=repr)
def test_a_missing_or_mistyped_kind_is_an_invalid_envelope(protocol, kind):
    value = envelope()
    value = without(value, "kind") if kind == "missing" else {**value, "kind": kind}
    answer = protocol.raw(body(value))
    assert answer.status == 400
    assert answer.data.startswith("Invalid request envelope: ") and "kind" in answer.data
    assert answer.envelope["kind"] == "unknown" and answer.envelope["head"]["corrId"] == "c-env"


@pytest.mark.parametrize("head", ["missing", None, 1, "head", [], [{"corrId": "c", "version": VERSION}]], ids=repr)
def test_a_missing_or_mistyped_head_is_an_invalid_envelope(protocol, head):
    value = envelope()
    value = without(value, "head") if head == "missing" else {**value, "head": head}
    answer = protocol.raw(body(value), "promise.get", "0")
    assert answer.status == 400
    assert answer.data.startswith("Invalid request envelope: ") and "head" in answer.data


@pytest.mark.parametrize("corr_id", ["missing", None, 1, True, [], {}], ids=repr)
def test_a_missing_or_mistyped_corr_id_is_an_invalid_envelope(protocol, corr_id):
    value = envelope()
    head = without(value["head"], "corrId") if corr_id == "missing" else {**value["head"], "corrId": corr_id}
    answer = protocol.raw(body({**value, "head": head}), "promise.get", "0")
    assert answer.status == 400
    assert answer.data.startswith("Invalid request envelope: ") and "corrId" in answer.data


@pytest.mark.parametrize("version", ["missing", None, 20260401, True, ["2026-04-01"], {}], ids=repr)
def test_a_missing_or_mistyped_version_is_an_invalid_envelope(protocol, version):
    value = envelope()
    head = without(value["head"], "version") if version == "missing" else {**value["head"], "version": version}
    answer = protocol.raw(body({**value, "head": head}), "promise.get", "c-env")
    assert answer.status == 400
    assert answer.data.startswith("Invalid request envelope: ") and "version" in answer.data


def test_a_missing_data_is_an_invalid_envelope(protocol):
    answer = protocol.raw(body(without(envelope(), "data")), "promise.get", "c-env")
    assert answer.status == 400
    assert answer.data.startswith("Invalid request envelope: ") and "data" in answer.data


@pytest.mark.parametrize("auth", [1, True, 1.5, [], {"token": "t"}], ids=repr)
def test_an_auth_that_is_not_a_string_is_an_invalid_envelope(protocol, auth):
    answer = protocol.raw(body(envelope(auth=auth)), "promise.get", "c-env")
    assert answer.status == 400
    assert answer.data.startswith("Invalid request envelope: ") and "auth" in answer.data


def test_a_string_auth_is_accepted_without_a_bearer_prefix(protocol):
    assert protocol.raw(body(envelope(auth="eyJhbGciOiJFZERTQSJ9.e30.sig")), "promise.get", "c-env").status == 404


@pytest.mark.parametrize("debug_time", ["1000", 1000.0, 1e3, True, [], {}], ids=repr)
def test_a_debug_time_that_is_not_an_integer_is_an_invalid_envelope(protocol, debug_time):
    answer = protocol.raw(body(envelope(**{"resonate:debug_time": debug_time})), "promise.get", "c-env")
    assert answer.status == 400
    assert answer.data.startswith("Invalid request envelope: ") and "resonate:debug_time" in answer.data


@pytest.mark.parametrize(
    "debug_time",
    [
        I64_MAX + 1,
        2**64 - 1,
        2**64,
        10**30,
    ],
    ids=repr,
)
@pytest.mark.parametrize(
    "kind,data",
    [
        ("promise.get", {"id": "p"}),
        ("promise.settle", {"id": "p", "state": "resolved"}),
        ("promise.create", create("n", timeout_at=I64_MAX)),
    ],
    ids=["get", "settle", "create"],
)
def test_a_debug_time_above_the_largest_64_bit_integer_is_an_invalid_envelope(protocol, kind, data, debug_time):
    seed(protocol)
    with nothing_written(protocol):
        answer = protocol.raw(body(envelope(kind, data, **{"resonate:debug_time": debug_time})), kind, "c-env")
    assert answer.status == 400, answer
    assert answer.data.startswith("Invalid request envelope: ") and "resonate:debug_time" in answer.data


def test_the_largest_64_bit_debug_time_is_accepted(protocol):
    answer = protocol.raw(
        body(envelope("promise.create", create("n", timeout_at=5_000), **{"resonate:debug_time": I64_MAX})),
        "promise.create",
        "c-env",
    )
    assert answer.status == 200 and answer.data["promise"]["state"] == "rejected_timedout"


def test_a_debug_time_above_the_largest_64_bit_integer_never_crashes_a_write(protocol):
    data = {"id": "s2", "cron": "* * * * *", "promiseId": "x", "promiseTimeout": 1}
    seed(protocol)
    with nothing_written(protocol):
        answer = protocol.raw(
            body(envelope("schedule.create", data, **{"resonate:debug_time": I64_MAX + 1})), "schedule.create", "c-env"
        )
    assert answer.status == 400


def test_a_debug_time_must_be_an_integer_even_when_debug_is_off(protocol, settings):
    settings.RESONATE = {**settings.RESONATE, "DEBUG": False}
    answer = protocol.raw(body(envelope(**{"resonate:debug_time": "soon"})), "promise.get", "c-env")
    assert answer.status == 400 and answer.data.startswith("Invalid request envelope: ")


# §1.4 steps 2-4, 6, 7


def test_an_empty_kind_is_refused(protocol):
    answer = protocol.raw(body(envelope("")), "", "c-env")
    assert answer.status == 400
    assert answer.data == "Missing or invalid 'kind' field — must be a non-empty string"


@pytest.mark.parametrize("data", [None, [], [{"id": "p"}], 0, 1.5, "p", True], ids=repr)
def test_data_that_is_not_an_object_is_refused(protocol, data):
    value = {**envelope(), "data": data}
    answer = protocol.raw(body(value), "promise.get", "c-env")
    assert answer.status == 400
    assert answer.data == "Invalid 'data' field — must be an object"


@pytest.mark.parametrize("version", ["2025-01-01", "", "2026-04-01 ", "v1"])
def test_an_unsupported_version_is_refused_naming_it_and_the_supported_one(protocol, version):
    answer = protocol.raw(body(envelope(version=version)), "promise.get", "c-env")
    assert answer.status == 400
    assert answer.data == f"Unsupported protocol version '{version}', supported versions: [\"2026-04-01\"]"


@pytest.mark.parametrize("kind", ["promise.foo", "PROMISE.GET", " promise.get", "promise", "debug.nope", "ünïcødé.op"])
def test_an_unknown_kind_is_refused_and_echoed(protocol, kind):
    answer = protocol.raw(body(envelope(kind)), kind, "c-env")
    assert answer.status == 400
    assert answer.data == f"Unknown operation: {kind}"


DEBUG_KINDS = ["debug.start", "debug.stop", "debug.reset", "debug.snap", "debug.tick"]


@pytest.mark.parametrize("kind", DEBUG_KINDS)
def test_debug_operations_are_forbidden_when_debug_is_off(protocol, settings, kind):
    seed(protocol)
    before = state(protocol)
    settings.RESONATE = {**settings.RESONATE, "DEBUG": False}
    answer = protocol.raw(body(envelope(kind, {"time": NOW})), kind, "c-env")
    assert answer.status == 403
    assert answer.data == "Debug operations are disabled"
    settings.RESONATE = {**settings.RESONATE, "DEBUG": True}
    assert state(protocol) == before


def test_debug_time_is_ignored_when_debug_is_off(protocol, settings):
    settings.RESONATE = {**settings.RESONATE, "DEBUG": False}
    timeout_at = I64_MAX
    answer = protocol.raw(
        body(envelope("promise.create", create("p", timeout_at=timeout_at), **{"resonate:debug_time": 5})),
        "promise.create",
        "c-env",
    )
    assert answer.status == 200
    created_at = answer.data["promise"]["createdAt"]
    assert created_at > 1_600_000_000_000  # the wall clock (2020 or later), not the debug time 5


def test_debug_time_sets_now_when_debug_is_on(protocol):
    answer = protocol.raw(
        body(envelope("promise.create", create("p", timeout_at=I64_MAX), **{"resonate:debug_time": 5})),
        "promise.create",
        "c-env",
    )
    assert answer.status == 200 and answer.data["promise"]["createdAt"] == 5


# The order of the checks


def test_an_empty_kind_is_reported_before_data_that_is_not_an_object(protocol):
    answer = protocol.raw(body({**envelope(""), "data": None}), "", "c-env")
    assert answer.data.startswith("Missing or invalid 'kind'")


def test_data_that_is_not_an_object_is_reported_before_an_unsupported_version(protocol):
    answer = protocol.raw(body({**envelope(version="1999-01-01"), "data": []}), "promise.get", "c-env")
    assert answer.data == "Invalid 'data' field — must be an object"


def test_an_unsupported_version_is_reported_before_an_unknown_kind(protocol):
    answer = protocol.raw(body(envelope("nope", version="1999-01-01")), "nope", "c-env")
    assert answer.data.startswith("Unsupported protocol version '1999-01-01'")


def test_an_unknown_debug_kind_is_unknown_even_when_debug_is_off(protocol, settings):
    settings.RESONATE = {**settings.RESONATE, "DEBUG": False}
    answer = protocol.raw(body(envelope("debug.nope")), "debug.nope", "c-env")
    assert (answer.status, answer.data) == (400, "Unknown operation: debug.nope")


def test_the_envelope_is_checked_before_the_data(protocol):
    answer = protocol.raw(body(envelope("promise.create", {"id": 1}, version="0")), "promise.create", "c-env")
    assert answer.data.startswith("Unsupported protocol version")


# §1.3: the response envelope


def test_kind_and_corr_id_are_echoed_unchanged(protocol):
    value = envelope("promise.get", corrId='sr-ünï "quoted" 1767225600000')
    answer = protocol.raw(body(value), "promise.get", 'sr-ünï "quoted" 1767225600000')
    assert answer.status == 404
    assert answer.envelope["head"] == {"corrId": 'sr-ünï "quoted" 1767225600000', "status": 404, "version": VERSION}


def test_kind_is_unknown_when_it_cannot_be_read(protocol):
    answer = protocol.raw(body({**envelope(), "kind": 7}), "unknown", "c-env")
    assert answer.status == 400


def test_corr_id_is_zero_when_it_cannot_be_read(protocol):
    answer = protocol.raw(body({**envelope(), "head": {"corrId": 7, "version": VERSION}}), "promise.get", "0")
    assert answer.status == 400


def test_other_head_keys_and_top_level_keys_are_ignored(protocol):
    value = {**envelope(**{"resonate:origin": "x", "extra": [1, None]}), "extra": {"a": None}}
    assert protocol.raw(body(value), "promise.get", "c-env").status == 404


@pytest.mark.parametrize(
    "kind,data,status",
    [
        ("promise.get", {"id": "missing"}, 404),
        ("promise.get", {"id": 1}, 400),
        ("task.acquire", {"id": "w", "version": 7, "pid": "x", "ttl": 1}, 409),
        ("promise.register_callback", {"awaited": "q", "awaiter": "missing"}, 422),
    ],
)
def test_error_data_is_a_string_message(protocol, kind, data, status):
    seed(protocol)
    answer = protocol.raw(body(envelope(kind, data)), kind, "c-env")
    assert answer.status == status
    assert isinstance(answer.data, str) and answer.data


def test_success_is_200_never_201(protocol):
    requests = [
        ("promise.create", create("n", tags={TARGET: "poll://any@g"})),
        ("promise.create", create("n", tags={TARGET: "poll://any@g"})),
        ("schedule.create", {"id": "s", "cron": "* * * * *", "promiseId": "x", "promiseTimeout": 1}),
        ("promise.register_listener", {"awaited": "n", "address": "https://h/hook"}),
        ("promise.settle", {"id": "n", "state": "resolved"}),
        ("schedule.delete", {"id": "s"}),
        ("task.create", task_create(create("t", tags=HTTP), ttl=10)),
        ("task.release", {"id": "t", "version": 1}),
        ("task.acquire", {"id": "t", "version": 1, "pid": "w", "ttl": 10}),
    ]
    for kind, data in requests:
        answer = protocol.raw(body(envelope(kind, data)), kind, "c-env")
        assert answer.status == 200, (kind, answer)


# §7: debug.tick and resonate:debug_time


def test_debug_tick_refuses_a_debug_time_other_than_its_time(protocol):
    seed(protocol)
    with nothing_written(protocol):
        answer = protocol.raw(
            body(envelope("debug.tick", {"time": 20_000}, **{"resonate:debug_time": 19_999})), "debug.tick", "c-env"
        )
    assert answer.status == 400
    assert "resonate:debug_time" in answer.data and "time" in answer.data


def test_debug_tick_accepts_a_debug_time_equal_to_its_time_or_none(protocol):
    ticked = protocol.raw(
        body(envelope("debug.tick", {"time": 20_000}, **{"resonate:debug_time": 20_000})), "debug.tick", "c-env"
    )
    assert (ticked.status, ticked.data) == (200, [])
    value = envelope("debug.tick", {"time": 30_000})
    del value["head"]["resonate:debug_time"]
    assert protocol.raw(body(value), "debug.tick", "c-env").data == []


@pytest.mark.parametrize("data", [{}, {"time": "1"}, {"time": 1.0}, {"time": -1}, {"time": None}], ids=repr)
def test_debug_tick_needs_an_integer_time(protocol, data):
    refused(protocol, "debug.tick", data, "Invalid request: ", "time")


# D3: the data of each operation


@pytest.mark.parametrize(
    "kind,data,field",
    [
        ("promise.get", {"id": "a\x00b"}, "id"),
        ("promise.create", create("a\x00"), "id"),
        ("promise.settle", {"id": "\x00", "state": "resolved"}, "id"),
        ("promise.register_callback", {"awaited": "q\x00", "awaiter": "p"}, "awaited"),
        ("promise.register_callback", {"awaited": "q", "awaiter": "p\x00"}, "awaiter"),
        ("promise.register_listener", {"awaited": "q\x00", "address": "poll://uni@g/x"}, "awaited"),
        ("task.get", {"id": "w\x00"}, "id"),
        ("task.acquire", {"id": "p", "version": 0, "pid": "w\x001", "ttl": 1}, "pid"),
        ("task.create", task_create(create("x\x00y", tags=HTTP)), "action.data.id"),
        ("task.heartbeat", {"pid": "w1", "tasks": [{"id": "w\x00", "version": 1}]}, "tasks"),
        ("schedule.create", {"id": "s\x00", "cron": "* * * * *", "promiseId": "x", "promiseTimeout": 1}, "id"),
        ("schedule.create", {"id": "s2", "cron": "* * * * *", "promiseId": "x\x00", "promiseTimeout": 1}, "promiseId"),
        ("schedule.delete", {"id": "s\x00"}, "id"),
    ],
    ids=lambda v: v if isinstance(v, str) and "\x00" not in v else None,
)
def test_a_nul_character_in_an_id_is_refused(protocol, kind, data, field):
    refused(protocol, kind, data, "Invalid request: ", field, "NUL")


@pytest.mark.parametrize(
    "kind,data,field",
    [
        ("promise.get", {"id": ""}, "id"),
        ("promise.create", create(""), "id"),
        ("task.acquire", {"id": "p", "version": 0, "pid": "", "ttl": 1}, "pid"),
        ("schedule.create", {"id": "", "cron": "* * * * *", "promiseId": "x", "promiseTimeout": 1}, "id"),
    ],
)
def test_an_empty_id_is_refused(protocol, kind, data, field):
    refused(protocol, kind, data, "Invalid request: ", field, "empty")


@pytest.mark.parametrize(
    "kind,data,field",
    [
        ("promise.create", create("n", timeout_at=-1), "timeoutAt"),
        ("task.create", task_create(create("n", tags=HTTP), ttl=-1), "ttl"),
        ("task.create", task_create(create("n", timeout_at=-5, tags=HTTP)), "timeoutAt"),
        ("task.acquire", {"id": "p", "version": -1, "pid": "w", "ttl": 1}, "version"),
        ("task.acquire", {"id": "p", "version": 0, "pid": "w", "ttl": -1}, "ttl"),
        ("task.release", {"id": "w", "version": -1}, "version"),
        ("task.fulfill", fulfill(version=-1), "version"),
        ("task.heartbeat", {"pid": "w1", "tasks": [{"id": "w", "version": -1}]}, "version"),
        (
            "schedule.create",
            {"id": "s2", "cron": "* * * * *", "promiseId": "x", "promiseTimeout": -1},
            "promiseTimeout",
        ),
        ("debug.tick", {"time": -1}, "time"),
        ("promise.create", create("n", timeout_at=-(2**63)), "timeoutAt"),
    ],
)
def test_a_negative_time_ttl_or_version_is_refused(protocol, kind, data, field):
    refused(protocol, kind, data, "Invalid request: ", field)


INTEGER_FIELDS = [
    ("promise.create", lambda v: create("n", timeout_at=v), "timeoutAt"),
    ("task.acquire", lambda v: {"id": "p", "version": v, "pid": "w", "ttl": 1}, "version"),
    ("task.acquire", lambda v: {"id": "p", "version": 0, "pid": "w", "ttl": v}, "ttl"),
    ("task.create", lambda v: task_create(create("n", tags=HTTP), ttl=v), "ttl"),
    ("task.release", lambda v: {"id": "w", "version": v}, "version"),
    ("task.heartbeat", lambda v: {"pid": "w1", "tasks": [{"id": "w", "version": v}]}, "version"),
    ("schedule.create", lambda v: schedule(promiseTimeout=v), "promiseTimeout"),
    ("promise.search", lambda v: {"limit": v}, "limit"),
    ("debug.tick", lambda v: {"time": v}, "time"),
]


@pytest.mark.parametrize("value", [1.0, 1e3, 1.5], ids=repr)
@pytest.mark.parametrize("kind,build,field", INTEGER_FIELDS, ids=lambda v: v if isinstance(v, str) else None)
def test_a_float_is_not_an_integer(protocol, kind, build, field, value):
    refused(protocol, kind, build(value), "Invalid request: ", field, "integer")


def test_a_float_written_with_an_exponent_is_not_an_integer(protocol):
    seed(protocol)
    raw = (
        b'{"kind": "promise.create", "head": {"corrId": "c-env", "version": "2026-04-01", '
        b'"resonate:debug_time": 1000}, "data": {"id": "n", "timeoutAt": 1E4}}'
    )
    with nothing_written(protocol):
        answer = protocol.raw(raw, "promise.create", "c-env")
    assert answer.status == 400 and "timeoutAt" in answer.data


@pytest.mark.parametrize("value", [True, False], ids=repr)
@pytest.mark.parametrize("kind,build,field", INTEGER_FIELDS, ids=lambda v: v if isinstance(v, str) else None)
def test_a_boolean_is_not_an_integer(protocol, kind, build, field, value):
    refused(protocol, kind, build(value), "Invalid request: ", field, "integer")


@pytest.mark.parametrize(
    "kind,build,field,value",
    [
        (kind, build, field, value)
        for kind, build, field in INTEGER_FIELDS
        for value in ["1000", None, [1000], {"ms": 1000}]
        if not (value is None and field == "limit")  # limit is optional: null means absent (tested below)
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_string_list_object_or_null_is_not_an_integer(protocol, kind, build, field, value):
    refused(protocol, kind, build(value), "Invalid request: ", field)


@pytest.mark.parametrize("value", [I64_MAX + 1, 2**64 - 1, 2**64, -(2**63) - 1], ids=repr)
@pytest.mark.parametrize("kind,build,field", INTEGER_FIELDS, ids=lambda v: v if isinstance(v, str) else None)
def test_an_integer_outside_64_bits_is_refused(protocol, kind, build, field, value):
    refused(protocol, kind, build(value), "Invalid request: ", field)


@pytest.mark.parametrize(
    "kind,data",
    [
        ("promise.create", create("n", timeout_at=I64_MAX)),
        ("task.acquire", {"id": "p", "version": 0, "pid": "w", "ttl": I64_MAX}),
        (
            "task.create",
            {
                "pid": "w",
                "ttl": I64_MAX,
                "action": action("promise.create", create("n", timeout_at=I64_MAX, tags={TARGET: "http://h"})),
            },
        ),
        ("schedule.create", {"id": "s2", "cron": "* * * * *", "promiseId": "x", "promiseTimeout": I64_MAX}),
    ],
)
def test_the_largest_64_bit_integer_is_accepted(protocol, kind, data):
    seed(protocol)
    accepted(protocol, kind, data)


@pytest.mark.parametrize("settle_state", ["pending", "rejected_timedout", "foo", "RESOLVED", "", None, 1], ids=repr)
@pytest.mark.parametrize(
    "kind,build",
    [
        ("promise.settle", lambda s: {"id": "p", "state": s}),
        (
            "task.fulfill",
            lambda s: {"id": "w", "version": 1, "action": action("promise.settle", {"id": "w", "state": s})},
        ),
        (
            "task.fence",
            lambda s: {"id": "w", "version": 1, "action": action("promise.settle", {"id": "q", "state": s})},
        ),
    ],
    ids=["settle", "fulfill", "fence"],
)
def test_a_settle_state_other_than_resolved_rejected_or_canceled_is_refused(protocol, kind, build, settle_state):
    refused(protocol, kind, build(settle_state), "Invalid request: ", "state")


@pytest.mark.parametrize("settle_state", ["resolved", "rejected", "rejected_canceled"])
def test_the_three_settle_states_are_accepted(protocol, settle_state):
    seed(protocol)
    answer = accepted(protocol, "promise.settle", {"id": "p", "state": settle_state})
    assert answer.data["promise"]["state"] == settle_state


@pytest.mark.parametrize(
    "delay",
    [
        "soon",
        "",
        " 5",
        "5 ",
        "-5",
        "+5",
        "1.5",
        "1e3",
        "0x10",
        "٣",
        "５",
        "²",
        str(I64_MAX + 1),
        "9" * 30,
    ],
    ids=repr,
)
@pytest.mark.parametrize(
    "kind,build",
    [
        ("promise.create", lambda tags: create("n", tags=tags)),
        ("task.fence", lambda tags: fence("promise.create", create("w.1", tags=tags))),
        (
            "schedule.create",
            lambda tags: {"id": "s2", "cron": "* * * * *", "promiseId": "x", "promiseTimeout": 1, "promiseTags": tags},
        ),
    ],
    ids=["create", "fence", "schedule"],
)
def test_an_unparsable_delay_is_refused(protocol, kind, build, delay):
    tags = {TARGET: "poll://any@g", "resonate:delay": delay}
    refused(protocol, kind, build(tags), "Invalid request: ", "resonate:delay")


def test_an_enormous_decimal_delay_is_refused_not_a_crash(protocol):
    refused(
        protocol,
        "promise.create",
        create("n", tags={TARGET: "poll://any@g", "resonate:delay": "1" * 5000}),
        "Invalid request: ",
        "resonate:delay",
    )


@pytest.mark.parametrize("delay", ["0", "5000", str(I64_MAX)])
def test_a_decimal_delay_is_accepted(protocol, delay):
    accepted(protocol, "promise.create", create("n", tags={TARGET: "poll://any@g", "resonate:delay": delay}))


BAD_ADDRESSES = [
    "",
    "default",
    "poll://default",
    "poll://all@default",
    "poll://any@",
    "poll://uni",
    "poll:any@g",
    "ftp://host/x",
    "http://",
    "https:///path",
    "gcps://project/topic",
    "bash://",
    "//any@g",
    "any@g",
    "http://[::1",
    "poll://@g",
]


@pytest.mark.parametrize("address", BAD_ADDRESSES, ids=repr)
@pytest.mark.parametrize(
    "kind,build,field",
    [
        ("promise.create", lambda a: create("n", tags={TARGET: a}), "resonate:target"),
        (
            "task.create",
            lambda a: {"pid": "w", "ttl": 1, "action": action("promise.create", create("n", tags={TARGET: a}))},
            "resonate:target",
        ),
        ("task.fence", lambda a: fence("promise.create", create("w.1", tags={TARGET: a})), "resonate:target"),
        ("promise.register_listener", lambda a: {"awaited": "q", "address": a}, "address"),
    ],
    ids=["create", "task-create", "fence", "listener"],
)
def test_an_address_that_is_not_poll_or_http_is_refused(protocol, kind, build, field, address):
    refused(protocol, kind, build(address), "Invalid request: ", field)


def test_a_listener_address_is_checked_before_the_promise_exists(protocol):
    refused(protocol, "promise.register_listener", {"awaited": "missing", "address": "nope"}, "address")


@pytest.mark.parametrize(
    "address",
    [
        "poll://uni@g/w1",
        "poll://any@g",
        "poll://any@g/w1",
        "poll://any@default",
        "http://h",
        "https://h:8443/x?y=1",
    ],
)
def test_poll_and_http_addresses_are_accepted(protocol, address):
    assert accepted(protocol, "promise.create", create("n", tags={TARGET: address})).data["promise"]["tags"] == {
        TARGET: address
    }
    accepted(protocol, "promise.register_listener", {"awaited": "n", "address": address})


@pytest.mark.parametrize(
    "cron",
    [
        "not a cron",
        "61 * * * *",
        "* * * * * * *",
        "* * * *",
        "",
        "   ",
        "* 24 * * *",
        "* * 32 * *",
        "* * * 13 *",
        "* * * * 8",
        "0 0 31 2 *",
        "L * * * *",
        "0 0 ? * *",
        "*/0 * * * *",
        "@reboot",
        "60 * * * * *",
    ],
    ids=repr,
)
def test_an_invalid_cron_is_refused(protocol, cron):
    data = {"id": "s2", "cron": cron, "promiseId": "x", "promiseTimeout": 1}
    refused(protocol, "schedule.create", data, "Invalid request: ", "cron")


def test_a_cron_is_checked_before_the_schedule_exists(protocol):
    data = {"id": "s", "cron": "bad", "promiseId": "x", "promiseTimeout": 1}
    refused(protocol, "schedule.create", data, "cron")


@pytest.mark.parametrize("cron", ["* * * * *", "0 2 * * *", "*/5 * * * * *", "0 0 * * 7", "0 0 1 JAN *", "@daily"])
def test_a_standard_cron_is_accepted(protocol, cron):
    data = {"id": "s2", "cron": cron, "promiseId": "x", "promiseTimeout": 1}
    assert accepted(protocol, "schedule.create", data).data["schedule"]["nextRunAt"] > NOW


@pytest.mark.parametrize("limit", [0, 1001, -1])
@pytest.mark.parametrize("kind", ["promise.search", "task.search", "schedule.search"])
def test_a_search_limit_outside_1_to_1000_is_refused(protocol, kind, limit):
    refused(protocol, kind, {"limit": limit}, "Invalid request: ", "limit")


@pytest.mark.parametrize("limit", [1, 1000])
@pytest.mark.parametrize("kind", ["promise.search", "task.search", "schedule.search"])
def test_a_search_limit_of_1_or_1000_is_accepted(protocol, kind, limit):
    seed(protocol)
    accepted(protocol, kind, {"limit": limit})


@pytest.mark.parametrize("value", [1, 1.5, True, None, [], ["x"], {"k": "v"}], ids=repr)
@pytest.mark.parametrize(
    "kind,build,field",
    [
        ("promise.create", lambda m: create("n", tags=m), "tags"),
        ("promise.create", lambda m: create("n", param={"headers": m}), "param.headers"),
        ("promise.settle", lambda m: {"id": "p", "state": "resolved", "value": {"headers": m}}, "value.headers"),
        ("promise.search", lambda m: {"tags": m}, "tags"),
        ("schedule.search", lambda m: {"tags": m}, "tags"),
        (
            "schedule.create",
            lambda m: {"id": "s2", "cron": "* * * * *", "promiseId": "x", "promiseTimeout": 1, "promiseTags": m},
            "promiseTags",
        ),
        (
            "schedule.create",
            lambda m: {
                "id": "s2",
                "cron": "* * * * *",
                "promiseId": "x",
                "promiseTimeout": 1,
                "promiseParam": {"headers": m},
            },
            "promiseParam.headers",
        ),
        ("task.create", lambda m: task_create(create("n", tags={**HTTP, "k": m})), "action.data.tags"),
        ("task.fulfill", lambda m: fulfill(value={"headers": m}), "action.data.value.headers"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_tags_and_headers_with_a_value_that_is_not_a_string_are_refused(protocol, kind, build, field, value):
    data = build({"k": value})
    if field == "action.data.tags":
        data = build(value)
    refused(protocol, kind, data, "Invalid request: ", field)


@pytest.mark.parametrize(
    "kind,data,field",
    [
        *[
            ("promise.create", {"id": "n", "timeoutAt": 5_000, "tags": v}, "tags")
            for v in ["x", 1, [], [["k", "v"]], True]
        ],
        *[("promise.create", {"id": "n", "timeoutAt": 5_000, "param": v}, "param") for v in ["x", 1, [], True]],
        *[
            ("promise.create", {"id": "n", "timeoutAt": 5_000, "param": {"data": v}}, "param.data")
            for v in [1, [], {}, True]
        ],
        *[("promise.settle", {"id": "p", "state": "resolved", "value": v}, "value") for v in ["x", 1, [], True]],
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_tags_param_and_value_of_the_wrong_type_are_refused(protocol, kind, data, field):
    refused(protocol, kind, data, "Invalid request: ", field)


@pytest.mark.parametrize("where", ["id", "data", "tag", "tag key", "kind", "corrId"])
def test_a_lone_surrogate_in_a_string_is_refused(protocol, where):
    seed(protocol)
    strings = {
        "id": rb'{"id": "n\ud800", "timeoutAt": 5000}',
        "data": rb'{"id": "n", "timeoutAt": 5000, "param": {"data": "\udc00x"}}',
        "tag": rb'{"id": "n", "timeoutAt": 5000, "tags": {"k": "\ud800"}}',
        "tag key": rb'{"id": "n", "timeoutAt": 5000, "tags": {"\udfff": "v"}}',
    }
    kind, corr_id = b'"promise.create"', b'"c-env"'
    data = strings.get(where, strings["id"].replace(rb"\ud800", b""))
    if where == "kind":
        kind = rb'"promise.\ud800"'
    if where == "corrId":
        corr_id = rb'"c\ud800"'
    raw = (
        b'{"kind": '
        + kind
        + b', "head": {"corrId": '
        + corr_id
        + b', "version": "2026-04-01", "resonate:debug_time": 1000}, "data": '
        + data
        + b"}"
    )
    with nothing_written(protocol):
        answer = protocol.raw(raw)
    assert answer.status == 400
    assert answer.data.startswith("Invalid request envelope: ")


def test_a_surrogate_pair_is_an_ordinary_character(protocol):
    raw = (
        rb'{"kind": "promise.create", "head": {"corrId": "c-env", "version": "2026-04-01", '
        rb'"resonate:debug_time": 1000}, "data": {"id": "n\ud83d\ude00", "timeoutAt": 5000}}'
    )
    answer = protocol.raw(raw, "promise.create", "c-env")
    assert answer.status == 200 and answer.data["promise"]["id"] == "n\U0001f600"


@pytest.mark.parametrize("raw", [b"n\xff", b"n\xc3", b"n\xed\xa0\x80"], ids=repr)
def test_a_string_that_is_not_utf8_is_refused(protocol, raw):
    seed(protocol)
    body_bytes = (
        b'{"kind": "promise.create", "head": {"corrId": "c-env", "version": "2026-04-01", '
        b'"resonate:debug_time": 1000}, "data": {"id": "' + raw + b'", "timeoutAt": 5000}}'
    )
    with nothing_written(protocol):
        answer = protocol.raw(body_bytes)
    assert answer.status == 400 and answer.data.startswith("Invalid request envelope: ")


@pytest.mark.parametrize(
    "kind,data,missing",
    [
        ("promise.get", {}, "id"),
        ("promise.create", {"id": "n"}, "timeoutAt"),
        ("promise.create", {"timeoutAt": 5}, "id"),
        ("promise.settle", {"id": "p"}, "state"),
        ("promise.register_callback", {"awaited": "q"}, "awaiter"),
        ("promise.register_listener", {"awaited": "q"}, "address"),
        ("task.create", {"pid": "w", "ttl": 1}, "action"),
        ("task.create", {"pid": "w", "ttl": 1, "action": {"kind": "promise.create", "head": {}}}, "action.data"),
        ("task.acquire", {"id": "p", "version": 0, "pid": "w"}, "ttl"),
        ("task.fence", {"id": "w", "version": 1}, "action"),
        (
            "task.fence",
            {"id": "w", "version": 1, "action": {"kind": "promise.create", "data": {"id": "w.1"}}},
            "timeoutAt",
        ),
        ("task.heartbeat", {"pid": "w1"}, "tasks"),
        ("task.suspend", {"id": "w", "version": 1}, "actions"),
        (
            "task.suspend",
            {"id": "w", "version": 1, "actions": [{"kind": "promise.register_callback", "data": {"awaited": "q"}}]},
            "awaiter",
        ),
        ("task.fulfill", {"id": "w", "action": action("promise.settle", {"id": "w", "state": "resolved"})}, "version"),
        ("task.release", {"id": "w"}, "version"),
        ("task.halt", {}, "id"),
        ("task.continue", {}, "id"),
        ("schedule.create", {"id": "s2", "cron": "* * * * *", "promiseId": "x"}, "promiseTimeout"),
        ("schedule.delete", {}, "id"),
        ("debug.tick", {}, "time"),
    ],
)
def test_a_missing_required_field_is_refused_naming_it(protocol, kind, data, missing):
    refused(protocol, kind, data, "Invalid request: ", missing, "required")


@pytest.mark.parametrize(
    "kind",
    [
        "promise.get",
        "promise.register_callback",
        "task.get",
        "",
        "PROMISE.CREATE",
        1,
        None,
    ],
)
def test_a_fence_action_kind_other_than_create_or_settle_is_refused(protocol, kind):
    data = {"id": "w", "version": 1, "action": action(kind, {"id": "q"})}
    refused(protocol, "task.fence", data, "Invalid request: ", "action.kind")


@pytest.mark.parametrize("actions", [{"awaited": "q", "awaiter": "w"}, ["q"], "q", [None], [{"kind": "x"}]], ids=repr)
def test_a_suspend_action_list_of_the_wrong_shape_is_refused(protocol, actions):
    refused(protocol, "task.suspend", {"id": "w", "version": 1, "actions": actions}, "Invalid request: ", "actions")


def test_one_bad_entry_in_a_heartbeat_refuses_the_whole_heartbeat(protocol):
    data = {"pid": "w1", "tasks": [{"id": "w", "version": 1}, {"id": "w", "version": "1"}]}
    refused(protocol, "task.heartbeat", data, "Invalid request: ", "tasks", "1", "version")


# Unknown fields and explicit nulls


def test_unknown_fields_in_data_are_ignored(protocol):
    data = {**create("n", param={"data": "eA==", "extra": 1}), "extra": {"deep": [None]}, "priority": 7}
    answer = accepted(protocol, "promise.create", data)
    assert answer.data["promise"]["param"] == {"data": "eA=="}
    assert accepted(protocol, "promise.get", {"id": "n", "unknown": None}).data["promise"]["id"] == "n"


@pytest.mark.parametrize(
    "kind,data",
    [
        ("promise.search", {"cursor": None, "state": None, "tags": None, "limit": None}),
        ("task.search", {"cursor": None, "state": None, "limit": None}),
        ("schedule.search", {"cursor": None, "tags": None, "limit": None}),
    ],
)
def test_an_explicit_null_for_an_optional_search_field_is_absent(protocol, kind, data):
    seed(protocol)
    assert accepted(protocol, kind, data).data == accepted(protocol, kind, {}).data


def test_an_explicit_null_for_an_optional_create_field_is_absent(protocol):
    answer = accepted(
        protocol,
        "promise.create",
        {"id": "n", "timeoutAt": 5_000, "param": {"data": None, "headers": None}, "tags": None},
    )
    assert answer.data["promise"]["param"] == {} and answer.data["promise"]["tags"] == {}
    answer = accepted(protocol, "promise.create", {"id": "m", "timeoutAt": 5_000, "param": None})
    assert answer.data["promise"]["param"] == {}
    answer = accepted(protocol, "promise.settle", {"id": "n", "state": "resolved", "value": {"data": None}})
    assert answer.data["promise"]["value"] == {}
    answer = accepted(protocol, "schedule.create", schedule(promiseParam=None, promiseTags=None))
    assert answer.data["schedule"]["promiseParam"] == {} and answer.data["schedule"]["promiseTags"] == {}


@pytest.mark.parametrize(
    "kind,data,field",
    [
        ("promise.get", {"id": None}, "id"),
        ("promise.create", {"id": "n", "timeoutAt": None}, "timeoutAt"),
        ("promise.settle", {"id": "p", "state": None}, "state"),
        ("task.acquire", {"id": "p", "version": 0, "pid": None, "ttl": 1}, "pid"),
    ],
)
def test_an_explicit_null_for_a_required_field_is_refused(protocol, kind, data, field):
    refused(protocol, kind, data, "Invalid request: ", field)


# Sizes and characters that storage may choke on


def incompressible(length, seed=7):
    """Random letters and digits: PostgreSQL cannot compress them below its index-entry limit."""
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(length))


@pytest.mark.parametrize("tag", [TARGET, "resonate:branch", "resonate:origin", "k"])
def test_a_long_tag_value_is_stored_or_refused_never_a_crash(protocol, tag):
    seed(protocol)
    value = incompressible(3000)
    if tag == TARGET:
        value = "http://h/" + value
    before = state(protocol)
    answer = protocol.raw(body(envelope("promise.create", create("n", tags={tag: value}))), "promise.create", "c-env")
    assert answer.status in (200, 400), answer
    if answer.status == 400:
        assert state(protocol) == before


@pytest.mark.parametrize(
    "key", ['a"b', "a\\b", "$.x", "[0]", "a.b", "a b", "*", "'", "\U0001f600", "1x", "0", "-1", " 1"]
)
@pytest.mark.parametrize("kind", ["promise.search", "schedule.search"])
def test_a_search_tag_filter_with_any_key_is_answered(protocol, kind, key):
    data = {"id": "n", "timeoutAt": 5_000, "tags": {key: "v", TARGET: "http://h"}}
    accepted(protocol, "promise.create", data)
    accepted(
        protocol,
        "schedule.create",
        {"id": "s2", "cron": "* * * * *", "promiseId": "x", "promiseTimeout": 1, "promiseTags": {key: "v"}},
    )
    found = accepted(protocol, kind, {"tags": {key: "v"}}).data
    assert len(found["promises" if kind == "promise.search" else "schedules"]) == 1
    assert accepted(protocol, kind, {"tags": {key: "w"}}).data in ({"promises": []}, {"schedules": []})


def test_a_schedule_with_a_long_tag_value_fires_or_is_refused_never_a_crash(protocol):
    data = {
        "id": "s2",
        "cron": "* * * * *",
        "promiseId": "s2.{{.timestamp}}",
        "promiseTimeout": 1_000_000,
        "promiseTags": {TARGET: "http://h", "resonate:branch": incompressible(3000)},
    }
    created = protocol.raw(body(envelope("schedule.create", data)), "schedule.create", "c-env")
    assert created.status in (200, 400)
    if created.status == 200:
        protocol.tick(60_000)
        assert len(protocol.snap()["promises"]) == 1


@pytest.mark.parametrize("depth", [100, 1_000, 5_000])
def test_deeply_nested_json_is_ignored_or_refused_never_a_crash(protocol, depth):
    nested = b"[" * depth + b"]" * depth
    raw = (
        b'{"kind": "promise.get", "head": {"corrId": "c-env", "version": "2026-04-01"}, '
        b'"data": {"id": "p", "extra": ' + nested + b"}}"
    )
    answer = protocol.raw(raw)
    assert answer.status in (400, 404), answer  # 404: the extra field was ignored
    if answer.status == 400:
        assert answer.data.startswith("Invalid request envelope: ")


@pytest.mark.parametrize("kind", ["task.suspend", "task.heartbeat"])
def test_a_request_naming_70000_ids_is_answered(protocol, kind):
    """More ids than one SQL statement may bind (SQLite 32766, PostgreSQL 65535)."""
    seed(protocol)
    ids = [f"x{i}" for i in range(70_000)]
    if kind == "task.suspend":
        data = {
            "id": "w",
            "version": 1,
            "actions": [
                {"kind": "promise.register_callback", "head": {}, "data": {"awaited": id, "awaiter": "w"}} for id in ids
            ],
        }
        status = 422  # the awaited promises do not exist
    else:
        data = {"pid": "w1", "tasks": [{"id": id, "version": 1} for id in ids]}
        status = 200  # unknown tasks are skipped
    with nothing_written(protocol):
        answer = protocol.raw(body(envelope(kind, data)), kind, "c-env")
    assert answer.status == status, answer
