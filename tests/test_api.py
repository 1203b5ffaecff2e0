"""The REST API under /api/: each endpoint runs its protocol operation and answers its reply data.

The API reads the wall clock; promises that must still be live time out in 2100 (FAR), and expired
ones are created through POST / at a debug time long past.
"""

from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

import orjson
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from floor.transactions import Busy
from tests.conftest import TARGET, assert_no_nulls, create

FAR = 4_102_444_800_000  # 2100-01-01
SCHEMA = Path(__file__).resolve().parent.parent / "api" / "openapi.yaml"


class Answer(NamedTuple):
    status: int
    data: Any


class Api:
    """Calls /api/ as an operator; checks that every reply is JSON without nulls, errors as {"error": text}."""

    def __init__(self, client):
        self.client = client

    def get(self, path, query=None):
        return self.answer(self.client.get(f"/api/{path}", query))

    def post(self, path, data=None):
        return self.answer(self.client.post(f"/api/{path}", data, format="json"))

    def delete(self, path):
        return self.answer(self.client.delete(f"/api/{path}"))

    def answer(self, response):
        assert response["Content-Type"] == "application/json"
        data = orjson.loads(response.content)
        assert_no_nulls(data)
        if response.status_code >= 400:
            assert list(data) == ["error"] and isinstance(data["error"], str), data
        return Answer(response.status_code, data)


@pytest.fixture
def operator(db):
    return User.objects.create_user("operator", is_staff=True)  # no password: hashing one takes half a second


@pytest.fixture
def api(operator):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=operator).key}")
    return Api(client)


@pytest.fixture
def anonymous(db):
    return Api(APIClient())


def path_of(id):
    return quote(id, safe="")


def created(api, id, **fields):
    answer = api.post("promises", {"id": id, "timeoutAt": FAR, **fields})
    assert answer.status == 200, answer.data
    return answer.data["promise"]


def targeted(api, id):
    return created(api, id, tags={"resonate:target": TARGET})


def ids(records):
    return [record["id"] for record in records]


# Authentication


ENDPOINTS = [
    ("get", "promises"),
    ("post", "promises"),
    ("get", "promises/p"),
    ("post", "promises/p/settle"),
    ("post", "promises/p/callbacks"),
    ("post", "promises/p/listeners"),
    ("get", "tasks"),
    ("get", "tasks/t"),
    *[("post", f"tasks/t/{name}") for name in ("acquire", "release", "fulfill", "halt", "continue")],
    ("get", "schedules"),
    ("post", "schedules"),
    ("get", "schedules/s"),
    ("delete", "schedules/s"),
]


@pytest.mark.parametrize("method,path", ENDPOINTS)
def test_every_endpoint_answers_401_without_credentials(anonymous, method, path):
    response = getattr(anonymous.client, method)(f"/api/{path}", {}, format="json")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response.json() == {"error": "Authentication credentials were not provided."}


def test_an_unknown_token_gets_401(anonymous):
    anonymous.client.credentials(HTTP_AUTHORIZATION="Token 0123456789abcdef")
    assert anonymous.get("promises") == (401, {"error": "Invalid token."})


def test_a_logged_in_session_is_enough(anonymous, operator):
    anonymous.client.force_login(operator)
    assert anonymous.get("promises") == (200, {"promises": []})


def test_a_user_who_is_not_staff_is_refused(anonymous, db):
    anonymous.client.force_login(User.objects.create_user("customer"))
    status, data = anonymous.get("promises")
    assert status == 403 and "permission" in data["error"]


def test_a_session_needs_a_csrf_token_to_change_anything(operator):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(operator)
    status, data = Api(client).post("promises", {"id": "p", "timeoutAt": FAR})
    assert status == 403 and data["error"].startswith("CSRF Failed")


# promise.create, promise.get


def test_it_creates_a_promise_and_reads_it_back(api):
    answer = api.post("promises", {"id": "p", "timeoutAt": FAR, "param": {"data": "eA=="}, "tags": {"k": "v"}})
    assert answer.status == 200
    record = answer.data["promise"]
    assert record == {
        "id": "p",
        "state": "pending",
        "param": {"data": "eA=="},
        "value": {},
        "tags": {"k": "v"},
        "timeoutAt": FAR,
        "createdAt": record["createdAt"],
    }
    assert api.get("promises/p") == (200, {"promise": record})


def test_creating_an_existing_promise_returns_it_unchanged(api):
    first = created(api, "p", tags={"k": "v"})
    assert api.post("promises", {"id": "p", "timeoutAt": 5}) == (200, {"promise": first})


def test_it_answers_404_for_a_missing_promise(api):
    assert api.get("promises/nope") == (404, {"error": "Promise not found"})


def test_it_reads_an_expired_promise_as_timed_out(api, protocol):
    protocol("promise.create", create("late", timeout_at=2_000), now=1_000)
    record = api.get("promises/late").data["promise"]
    assert record["state"] == "rejected_timedout" and record["settledAt"] == 2_000


@pytest.mark.parametrize(
    "data,message",
    [
        ({"id": "p"}, "Invalid request: timeoutAt: This field is required."),
        ({"id": "p", "timeoutAt": "soon"}, "Invalid request: timeoutAt: must be an integer"),
        ({"id": "p", "timeoutAt": -1}, f"Invalid request: timeoutAt: must be between 0 and {2**63 - 1}"),
        ({"id": "", "timeoutAt": 1}, "Invalid request: id: must not be empty"),
        ({"id": "p", "timeoutAt": FAR, "tags": {"resonate:target": "ftp://x"}}, "Invalid request: tags: "),
        ([1, 2], "The request body must be a JSON object"),
    ],
)
def test_bad_input_gets_400_with_the_protocols_message(api, data, message):
    status, data = api.post("promises", data)
    assert status == 400 and data["error"].startswith(message)
    assert api.get("promises") == (200, {"promises": []})


def test_a_body_that_is_not_json_gets_400(api):
    response = api.client.post("/api/promises", b'{"id": "p",', content_type="application/json")
    assert response.status_code == 400 and response.json()["error"].startswith("JSON parse error")


def test_a_lone_surrogate_is_refused_as_on_post_slash(api):
    response = api.client.post("/api/promises", b'{"id": "\\ud800", "timeoutAt": 1}', content_type="application/json")
    assert response.status_code == 400 and response.json()["error"].startswith("JSON parse error")


def test_a_body_that_is_not_json_at_all_gets_415(api):
    response = api.client.post("/api/promises", b"id=p", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415 and "error" in response.json()


def test_a_busy_database_answers_503(api, monkeypatch):
    def busy(kind, data, now=None):
        raise Busy("lost 10 races")

    monkeypatch.setattr("resonate_site.protocol.envelope.perform", busy)
    assert api.get("promises/p") == (503, {"error": "Server busy, please retry"})


# Ids: any characters, '/' included; the id is the rest of the path.


@pytest.mark.parametrize("id", ["a/b", "wf-1.d2:3", "a/settle", "a/callbacks/", "/", "x\ny", "100% ?#&=+"])
def test_any_id_can_be_created_read_and_settled(api, id):
    created(api, id)
    assert api.get(f"promises/{path_of(id)}").data["promise"]["id"] == id
    settled = api.post(f"promises/{path_of(id)}/settle", {"state": "resolved"})
    assert settled.status == 200 and settled.data["promise"]["id"] == id
    assert settled.data["promise"]["state"] == "resolved"


def test_slashes_may_be_left_unencoded(api):
    created(api, "wf/1/settle")
    assert api.get("promises/wf/1/settle").data["promise"]["id"] == "wf/1/settle"
    assert api.post("promises/wf/1/settle", {"state": "resolved"}).status == 404  # settles `wf/1`
    assert api.post("promises/wf/1/settle/settle", {"state": "rejected"}).data["promise"]["state"] == "rejected"


def test_an_id_with_nul_gets_400(api):
    assert api.get("promises/a%00b") == (400, {"error": "Invalid request: id: must not contain NUL characters"})


def test_a_method_an_action_route_does_not_serve_gets_405(api):
    assert api.delete("promises/p/settle").status == 405


# promise.settle


def test_it_settles_a_promise(api):
    created(api, "p")
    answer = api.post("promises/p/settle", {"state": "rejected_canceled", "value": {"data": "bm8="}})
    record = answer.data["promise"]
    assert answer.status == 200
    assert record["state"] == "rejected_canceled" and record["value"] == {"data": "bm8="} and "settledAt" in record


def test_settling_a_settled_promise_returns_it_unchanged(api):
    created(api, "p")
    first = api.post("promises/p/settle", {"state": "resolved"}).data
    assert api.post("promises/p/settle", {"state": "rejected"}) == (200, first)


def test_settling_a_missing_promise_gets_404(api):
    assert api.post("promises/nope/settle", {"state": "resolved"}) == (404, {"error": "Promise not found"})


@pytest.mark.parametrize("state", ["pending", "rejected_timedout", "done", None])
def test_settling_with_a_state_other_than_the_three_gets_400(api, state):
    created(api, "p")
    status, data = api.post("promises/p/settle", {"state": state} if state else {})
    assert status == 400 and data["error"].startswith("Invalid request: state:")
    assert api.get("promises/p").data["promise"]["state"] == "pending"


# promise.register_callback, promise.register_listener


def test_it_registers_a_callback(api, protocol):
    awaited = created(api, "child")
    targeted(api, "parent")
    assert api.post("promises/child/callbacks", {"awaiter": "parent"}) == (200, {"promise": awaited})
    assert protocol.snap()["callbacks"] == [{"awaiter": "parent", "awaited": "child"}]


def test_a_callback_on_a_missing_promise_gets_404(api):
    targeted(api, "parent")
    assert api.post("promises/nope/callbacks", {"awaiter": "parent"}).status == 404


def test_a_callback_for_an_awaiter_without_a_target_gets_422(api):
    created(api, "child")
    created(api, "parent")
    assert api.post("promises/child/callbacks", {"awaiter": "parent"}).status == 422
    assert api.post("promises/child/callbacks", {"awaiter": "nobody"}) == (422, {"error": "Awaiter promise not found"})


def test_it_registers_a_listener(api, protocol):
    created(api, "p")
    address = "poll://uni@default/w-1"
    assert api.post("promises/p/listeners", {"address": address}).status == 200
    assert protocol.snap()["listeners"] == [{"id": "p", "address": address}]


def test_a_listener_with_a_bad_address_gets_400(api):
    created(api, "p")
    status, data = api.post("promises/p/listeners", {"address": "mailto:me"})
    assert status == 400 and data["error"].startswith("Invalid request: address:")


def test_a_listener_on_a_missing_promise_gets_404(api):
    assert api.post("promises/nope/listeners", {"address": "http://h/x"}).status == 404


# promise.search


def test_the_state_filter_is_the_projected_state(api, protocol):
    created(api, "live")
    protocol("promise.create", create("late", timeout_at=2_000), now=1_000)
    protocol("promise.create", create("nap", timeout_at=2_000, tags={"resonate:timer": "true"}), now=1_000)
    assert ids(api.get("promises", {"state": "pending"}).data["promises"]) == ["live"]
    assert ids(api.get("promises", {"state": "rejected_timedout"}).data["promises"]) == ["late"]
    assert ids(api.get("promises", {"state": "resolved"}).data["promises"]) == ["nap"]
    assert api.get("promises", {"state": "resolved"}).data["promises"][0]["state"] == "resolved"


def test_the_tags_filter_needs_every_tag(api):
    created(api, "a", tags={"resonate:target": TARGET, "k": "v"})
    created(api, "b", tags={"k": "v"})
    created(api, "c", tags={"k": "w"})
    assert ids(api.get("promises", {"tags[k]": "v"}).data["promises"]) == ["a", "b"]
    query = {"tags[k]": "v", "tags[resonate:target]": TARGET}
    assert ids(api.get("promises", query).data["promises"]) == ["a"]


def test_it_pages_with_the_cursor_of_promise_search(api):
    for id in ("e", "a/1", "c", "b", "a"):
        created(api, id)
    pages, query = [], {"limit": 2}
    while True:
        data = api.get("promises", query).data
        pages.append(ids(data["promises"]))
        if "cursor" not in data:
            break
        query["cursor"] = data["cursor"]
    assert pages == [["a", "a/1"], ["b", "c"], ["e"]]


@pytest.mark.parametrize("limit", ["0", "1001", "ten", "1.5", "", "9" * 40])
def test_a_limit_outside_1_to_1000_gets_400(api, limit):
    status, data = api.get("promises", {"limit": limit})
    assert status == 400 and data["error"].startswith("Invalid request: limit:")


def test_an_unknown_state_filter_gets_400(api):
    assert api.get("promises", {"state": "lost"}).status == 400


# Tasks


def test_a_task_goes_through_acquire_release_and_fulfill(api):
    targeted(api, "wf")
    assert api.get("tasks/wf") == (200, {"task": {"id": "wf", "state": "pending", "version": 0, "resumes": 0}})
    acquired = api.post("tasks/wf/acquire", {"version": 0, "pid": "w-1", "ttl": 60_000})
    assert acquired.status == 200
    assert acquired.data["task"] == {
        "id": "wf",
        "state": "acquired",
        "version": 1,
        "resumes": 0,
        "ttl": 60_000,
        "pid": "w-1",
    }
    assert acquired.data["promise"]["id"] == "wf" and acquired.data["preload"] == []
    assert api.post("tasks/wf/release", {"version": 1}) == (200, {})
    assert api.post("tasks/wf/acquire", {"version": 1, "pid": "w-2", "ttl": 1_000}).data["task"]["version"] == 2
    fulfilled = api.post("tasks/wf/fulfill", {"version": 2, "state": "resolved", "value": {"data": "NDI="}})
    assert fulfilled.status == 200
    assert fulfilled.data["promise"]["state"] == "resolved" and fulfilled.data["promise"]["value"] == {"data": "NDI="}
    assert api.get("tasks/wf").data["task"]["state"] == "fulfilled"


def test_acquiring_at_a_stale_version_gets_409(api):
    targeted(api, "wf")
    api.post("tasks/wf/acquire", {"version": 0, "pid": "w", "ttl": 1_000})
    assert api.post("tasks/wf/acquire", {"version": 0, "pid": "w", "ttl": 1_000}) == (
        409,
        {"error": "Task is not pending"},
    )
    assert api.post("tasks/wf/release", {"version": 7}).status == 409
    assert api.post("tasks/wf/fulfill", {"version": 7, "state": "resolved"}).status == 409


def test_a_task_is_halted_and_continued(api):
    targeted(api, "wf")
    assert api.post("tasks/wf/halt") == (200, {})
    assert api.get("tasks/wf").data["task"]["state"] == "halted"
    assert api.post("tasks/wf/continue") == (200, {})
    assert api.get("tasks/wf").data["task"]["state"] == "pending"
    assert api.post("tasks/wf/continue") == (409, {"error": "Task is not halted"})


def test_halting_a_fulfilled_task_gets_409(api):
    targeted(api, "wf")
    api.post("promises/wf/settle", {"state": "resolved"})
    assert api.post("tasks/wf/halt") == (409, {"error": "Task is fulfilled"})


@pytest.mark.parametrize(
    "path,data",
    [
        ("tasks/nope", None),
        ("tasks/nope/acquire", {"version": 0, "pid": "w", "ttl": 1}),
        ("tasks/nope/release", {"version": 0}),
        ("tasks/nope/fulfill", {"version": 0, "state": "resolved"}),
        ("tasks/nope/halt", {}),
        ("tasks/nope/continue", {}),
    ],
)
def test_a_missing_task_gets_404(api, path, data):
    answer = api.get(path) if data is None else api.post(path, data)
    assert answer == (404, {"error": "Task not found"})


@pytest.mark.parametrize(
    "path,data,message",
    [
        ("tasks/wf/acquire", {"version": 0, "ttl": 1}, "Invalid request: pid: This field is required."),
        ("tasks/wf/acquire", {"version": True, "pid": "w", "ttl": 1}, "Invalid request: version: must be an integer"),
        ("tasks/wf/release", {}, "Invalid request: version: This field is required."),
        ("tasks/wf/fulfill", {"version": 0, "state": "pending"}, "Invalid request: action.data.state:"),
    ],
)
def test_bad_task_input_gets_400(api, path, data, message):
    targeted(api, "wf")
    status, data = api.post(path, data)
    assert status == 400 and data["error"].startswith(message)


def test_tasks_are_listed_by_their_state_as_they_read_now(api, protocol):
    for id in ("c", "a", "b"):
        targeted(api, id)
    api.post("tasks/b/halt")
    protocol("promise.create", create("late", timeout_at=2_000, tags={"resonate:target": TARGET}), now=1_000)
    assert ids(api.get("tasks").data["tasks"]) == ["a", "b", "c", "late"]
    assert ids(api.get("tasks", {"state": "pending"}).data["tasks"]) == ["a", "c"]
    assert ids(api.get("tasks", {"state": "fulfilled"}).data["tasks"]) == ["late"]
    first = api.get("tasks", {"limit": 3}).data
    assert ids(first["tasks"]) == ["a", "b", "c"]
    assert api.get("tasks", {"limit": 3, "cursor": first["cursor"]}).data == {
        "tasks": [{"id": "late", "state": "fulfilled", "version": 0, "resumes": 0}]
    }


# Schedules


def schedule(id, **fields):
    return {
        "id": id,
        "cron": "0 2 * * *",
        "promiseId": "{{.id}}.{{.timestamp}}",
        "promiseTimeout": 60_000,
        "promiseTags": {"resonate:target": TARGET},
        **fields,
    }


def test_it_creates_reads_and_deletes_a_schedule(api):
    answer = api.post("schedules", schedule("nightly/report"))
    record = answer.data["schedule"]
    assert answer.status == 200
    assert record["cron"] == "0 2 * * *" and record["nextRunAt"] % 86_400_000 == 7_200_000
    assert api.get("schedules/nightly/report") == (200, {"schedule": record})
    assert api.delete("schedules/nightly/report") == (200, {})
    assert api.get("schedules/nightly/report") == (404, {"error": "Schedule not found"})
    assert api.delete("schedules/nightly/report") == (404, {"error": "Schedule not found"})


def test_a_schedule_with_a_bad_cron_gets_400(api):
    status, data = api.post("schedules", schedule("s", cron="every day"))
    assert status == 400 and data["error"].startswith("Invalid request: cron: invalid cron expression")


def test_schedules_are_filtered_by_promise_tags_and_paged_by_ten(api):
    for n in range(12):
        api.post("schedules", schedule(f"s{n:02}", promiseTags={"team": "a" if n % 2 else "b"}))
    first = api.get("schedules").data
    assert ids(first["schedules"]) == [f"s{n:02}" for n in range(10)]
    assert ids(api.get("schedules", {"cursor": first["cursor"]}).data["schedules"]) == ["s10", "s11"]
    assert ids(api.get("schedules", {"tags[team]": "a", "limit": 2}).data["schedules"]) == ["s01", "s03"]


# The schema and the docs


def test_the_committed_schema_is_the_generated_one(tmp_path):
    generated = tmp_path / "openapi.yaml"
    call_command("spectacular", "--urlconf", "api.schema", "--validate", "--fail-on-warn", "--file", str(generated))
    assert generated.read_text() == SCHEMA.read_text(), (
        "api/openapi.yaml is stale: .venv/bin/python manage.py spectacular --urlconf api.schema "
        "--validate --fail-on-warn --file api/openapi.yaml"
    )


def test_the_schema_is_served_at_api_schema(anonymous):
    response = anonymous.client.get("/api/schema/")
    assert response.status_code == 200
    assert response.content.decode() == SCHEMA.read_text()


def test_the_docs_are_served_with_local_assets(anonymous):
    response = anonymous.client.get("/api/docs/")
    assert response.status_code == 200
    assert b"/static/drf_spectacular_sidecar/swagger-ui-dist/" in response.content
    assert b"/api/schema/" in response.content


@pytest.mark.parametrize("format", ["json", "api", "K\u00f3\u00af", ""])
def test_a_format_parameter_is_an_unknown_parameter_not_a_renderer_choice(api, format):
    """Schemathesis found ?format=… answered 404 "Not found." (DRF's renderer override); the API is JSON only."""
    status, body = api.get("tasks", {"format": format})
    assert status == 200 and body["tasks"] == []


def test_the_api_root_lists_what_it_holds(api):
    status, data = api.get("")
    assert status == 200
    assert {name: link.rsplit("/api/", 1)[1] for name, link in data.items()} == {
        "promises": "promises",
        "tasks": "tasks",
        "schedules": "schedules",
        "schema": "schema/",
        "docs": "docs/",
    }


@pytest.mark.parametrize("path", ["/nope", "/api/nope", "/poll", "/admin-ish"])
def test_an_unknown_path_answers_a_json_404_that_says_what_exists(client, path):
    response = client.get(path)
    assert (response.status_code, response["Content-Type"]) == (404, "application/json")
    body = orjson.loads(response.content)
    assert body["error"] == f"no such path: {path}"
    assert "POST /" in body["paths"]
