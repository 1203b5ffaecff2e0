"""T-04 task.fence: 404; 409 unless acquired, live and current; then the inner create or settle runs, nested."""

from tests.conftest import TARGET, VERSION, action, create, targeted

BRANCH = {"resonate:branch": "wf"}


def start(protocol, id="wf", now=0, timeout_at=10_000, tags=None):
    """The promise `id` with its task acquired by pid "w" at version 1."""
    protocol("promise.create", targeted(id, timeout_at, tags), now=now)
    answer = protocol("task.acquire", {"id": id, "version": 0, "pid": "w", "ttl": 60_000}, now=now)
    assert answer.status == 200


def fence(protocol, kind, data, now, id="wf", version=1):
    return protocol("task.fence", {"id": id, "version": version, "action": action(kind, data)}, now=now)


def inner(answer, kind, status, data):
    """The nested reply: the inner kind, a head carrying the OUTER corrId, and the inner data."""
    corr_id = answer.envelope["head"]["corrId"]
    return {"kind": kind, "head": {"corrId": corr_id, "status": status, "version": VERSION}, "data": data}


# T-04:7-9


def test_it_answers_404_for_a_missing_task(protocol):
    assert fence(protocol, "promise.create", create("wf.1"), now=0).status == 404
    assert protocol.snap()["promises"] == []


# T-04:11-13 (a task without its promise) cannot be reached through POST /.


# T-04:15 — the task is not acquired.


def test_it_answers_409_when_the_task_is_not_acquired(protocol):
    protocol("promise.create", targeted("wf"), now=0)
    before = protocol.snap()
    assert fence(protocol, "promise.create", create("wf.1"), now=1, version=0).status == 409
    assert protocol.snap() == before


def test_it_answers_409_when_the_task_is_fulfilled(protocol):
    start(protocol)
    protocol("promise.settle", {"id": "wf", "state": "resolved"}, now=1)
    assert fence(protocol, "promise.create", create("wf.1"), now=2).status == 409


# T-04:16 — the task's promise is past its deadline.


def test_it_answers_409_when_the_task_promise_has_expired(protocol):
    start(protocol, timeout_at=100)
    before = protocol.snap()
    assert fence(protocol, "promise.create", create("wf.1"), now=100).status == 409
    assert protocol.snap() == before


# T-04:17 — the version is stale.


def test_it_answers_409_when_the_version_is_stale(protocol):
    start(protocol)
    before = protocol.snap()
    assert fence(protocol, "promise.create", create("wf.1"), now=1, version=0).status == 409
    assert fence(protocol, "promise.settle", {"id": "x", "state": "resolved"}, now=1, version=2).status == 409
    assert protocol.snap() == before


# T-04:19-21 — a fenced promise.create runs P-02 and its reply is nested in the answer.


def test_it_creates_a_promise_under_the_fence(protocol):
    start(protocol)
    answer = fence(protocol, "promise.create", create("wf.1", timeout_at=5_000, tags=BRANCH), now=7)
    assert answer.status == 200
    child = {
        "id": "wf.1",
        "state": "pending",
        "param": {},
        "value": {},
        "tags": BRANCH,
        "timeoutAt": 5_000,
        "createdAt": 7,
    }
    assert answer.data == {"action": inner(answer, "promise.create", 200, {"promise": child}), "preload": []}
    assert child in protocol.snap()["promises"]


def test_it_creates_a_targeted_child_with_its_own_task(protocol):
    start(protocol)
    fence(protocol, "promise.create", targeted("wf.1"), now=7)
    snap = protocol.snap()
    assert {"id": "wf.1", "state": "pending", "version": 0, "resumes": 0} in snap["tasks"]
    execute = {"kind": "execute", "head": {}, "data": {"task": {"id": "wf.1", "version": 0}}}
    assert {"address": TARGET, "message": execute} in snap["messages"]


def test_it_returns_an_existing_promise_from_a_fenced_create(protocol):
    start(protocol)
    first = fence(protocol, "promise.create", create("wf.1"), now=1)
    again = fence(protocol, "promise.create", create("wf.1", timeout_at=99_999), now=2)
    assert again.data["action"]["data"] == first.data["action"]["data"]


def test_it_includes_a_newly_created_same_branch_child_in_the_preload(protocol):
    # Decision D6: preload is computed after the inner action.
    start(protocol, tags=BRANCH)
    answer = fence(protocol, "promise.create", create("wf.1", tags=BRANCH), now=7)
    assert answer.data["preload"] == [answer.data["action"]["data"]["promise"]]


# T-04:22-24 — a fenced promise.settle runs P-03 and its reply is nested in the answer.


def test_it_settles_a_promise_under_the_fence(protocol):
    start(protocol)
    protocol("promise.create", create("wf.1"), now=0)
    protocol("promise.register_listener", {"awaited": "wf.1", "address": "poll://uni@g/w"}, now=0)
    answer = fence(protocol, "promise.settle", {"id": "wf.1", "state": "resolved", "value": {"data": "eA=="}}, now=9)
    assert answer.status == 200
    settled = {
        "id": "wf.1",
        "state": "resolved",
        "param": {},
        "value": {"data": "eA=="},
        "tags": {},
        "timeoutAt": 10_000,
        "createdAt": 0,
        "settledAt": 9,
    }
    assert answer.data == {"action": inner(answer, "promise.settle", 200, {"promise": settled}), "preload": []}
    snap = protocol.snap()
    assert settled in snap["promises"]
    unblock = {"kind": "unblock", "head": {}, "data": {"promise": settled}}
    assert {"address": "poll://uni@g/w", "message": unblock} in snap["messages"]


def test_it_nests_a_404_when_the_fenced_settle_names_a_missing_promise(protocol):
    start(protocol)
    answer = fence(protocol, "promise.settle", {"id": "wf.9", "state": "resolved"}, now=1)
    assert answer.status == 200
    assert answer.data == {"action": inner(answer, "promise.settle", 404, "Promise not found"), "preload": []}


def test_it_answers_an_expired_promise_projected_from_a_fenced_settle(protocol):
    start(protocol)
    protocol("promise.create", create("wf.1", timeout_at=5), now=0)
    answer = fence(protocol, "promise.settle", {"id": "wf.1", "state": "resolved"}, now=6)
    assert answer.data["action"]["data"]["promise"]["state"] == "rejected_timedout"
    assert protocol("promise.get", {"id": "wf.1"}, now=6).data["promise"]["state"] == "rejected_timedout"
    assert [p["state"] for p in protocol.snap()["promises"] if p["id"] == "wf.1"] == ["pending"]


def test_it_lets_the_holder_settle_the_task_own_promise(protocol):
    # T-04:22-24 has no rule against the task's own id; P-03 then fulfils the task.
    start(protocol)
    answer = fence(protocol, "promise.settle", {"id": "wf", "state": "resolved"}, now=5)
    assert answer.status == 200
    assert answer.data["action"]["data"]["promise"]["state"] == "resolved"
    assert protocol.snap()["tasks"] == [{"id": "wf", "state": "fulfilled", "version": 1, "resumes": 0}]


def test_it_keeps_the_preload_current_after_a_fenced_settle(protocol):
    start(protocol, tags=BRANCH)
    protocol("promise.create", create("wf.1", tags=BRANCH), now=0)
    answer = fence(protocol, "promise.settle", {"id": "wf.1", "state": "rejected"}, now=5)
    assert [(p["id"], p["state"]) for p in answer.data["preload"]] == [("wf.1", "rejected")]


# Decision D3: only promise.create and promise.settle can be fenced; the inner data is validated.


def test_it_answers_400_for_an_action_that_cannot_be_fenced(protocol):
    start(protocol)
    assert fence(protocol, "promise.get", {"id": "wf"}, now=1).status == 400


def test_it_answers_400_for_an_invalid_inner_request(protocol):
    start(protocol)
    assert fence(protocol, "promise.settle", {"id": "wf.1", "state": "pending"}, now=1).status == 400
    assert fence(protocol, "promise.create", {"id": "wf.1", "timeoutAt": "soon"}, now=1).status == 400
