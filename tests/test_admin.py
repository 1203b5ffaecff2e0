"""The operations console (Django admin): it finds and shows protocol state, and changes it only through
the handlers. The same flows run in a real browser in tests/e2e/test_admin_browser.py."""

import base64
import time

import orjson
import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse

from promises.models import Promise
from schedules.models import Schedule
from tasks.models import Task
from tests.conftest import TARGET, action, create, targeted


def soon():
    return int(time.time() * 1000) + 3_600_000


def b64(value):
    return base64.b64encode(orjson.dumps(value)).decode()


def change_url(model, id):
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[quote(id)])


def changelist(model):
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def suspended_on(protocol, awaiter, awaited):
    """A workflow `awaiter` suspended until `awaited` settles."""
    assert protocol("promise.create", targeted(awaiter, soon())).status == 200
    assert protocol("task.acquire", {"id": awaiter, "version": 0, "pid": "w", "ttl": 60_000}).status == 200
    assert protocol("promise.create", create(awaited, soon())).status == 200
    callback = action("promise.register_callback", {"awaited": awaited, "awaiter": awaiter})
    assert protocol("task.suspend", {"id": awaiter, "version": 1, "actions": [callback]}).status == 200


def listed(response):
    return [row.pk for row in response.context["cl"].result_list]


def test_the_console_needs_a_login(client, db):
    response = client.get(changelist(Promise))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_promises_filter_by_the_state_readers_see_newest_first(admin_client, protocol):
    assert protocol("promise.create", create("expired", timeout_at=1)).status == 200
    assert protocol("promise.create", create("live", soon())).status == 200
    assert protocol("promise.create", create("timer", timeout_at=1, tags={"resonate:timer": "true"})).status == 200
    assert listed(admin_client.get(changelist(Promise), {"state": "pending"})) == ["live"]
    assert listed(admin_client.get(changelist(Promise), {"state": "rejected_timedout"})) == ["expired"]
    assert listed(admin_client.get(changelist(Promise), {"state": "resolved"})) == ["timer"]


def test_promises_are_listed_newest_first(admin_client, protocol):
    for n, id in enumerate(["b", "c", "a"]):
        assert protocol("promise.create", create(id, soon()), now=1000 * (n + 1)).status == 200
    assert listed(admin_client.get(changelist(Promise))) == ["a", "c", "b"]


def test_promises_filter_by_target_and_timer_and_search_by_id_and_tag(admin_client, protocol):
    assert protocol("promise.create", targeted("orders/1", soon(), tags={"team": "blue"})).status == 200
    assert protocol("promise.create", create("orders/2", soon(), tags={"team": "red"})).status == 200
    assert protocol("promise.create", create("nap", soon(), tags={"resonate:timer": "true"})).status == 200
    assert listed(admin_client.get(changelist(Promise), {"targeted": "yes"})) == ["orders/1"]
    assert set(listed(admin_client.get(changelist(Promise), {"targeted": "no"}))) == {"orders/2", "nap"}
    assert listed(admin_client.get(changelist(Promise), {"timer__exact": "1"})) == ["nap"]
    assert set(listed(admin_client.get(changelist(Promise), {"q": "orders/"}))) == {"orders/1", "orders/2"}
    assert listed(admin_client.get(changelist(Promise), {"q": "team=red"})) == ["orders/2"]
    assert listed(admin_client.get(changelist(Promise), {"q": "rders"})) == []  # a prefix, not a substring


def test_a_promise_page_shows_param_and_tags_decoded_with_its_task_and_callbacks(admin_client, protocol):
    suspended_on(protocol, "wf", "wf.1")
    param = {"func": "greet", "args": ["wörld"]}
    assert protocol("promise.create", create("p/1", soon(), param={"data": b64(param)})).status == 200
    page = admin_client.get(change_url(Promise, "p/1")).content.decode()
    assert "&quot;func&quot;: &quot;greet&quot;" in page and "wörld" in page
    page = admin_client.get(change_url(Promise, "wf.1")).content.decode()
    assert "wf" in page and "Callbacks" in page
    page = admin_client.get(change_url(Promise, "wf")).content.decode()
    assert "suspended (version 1)" in page and TARGET in page


def settle_through_the_console(admin_client, ids, how, value):
    url = changelist(Promise)
    first = admin_client.post(url, {"action": how, "_selected_action": ids, "index": 0})
    assert first.status_code == 200 and b"Confirm" in first.content  # the page asking for the value
    return admin_client.post(url, {"action": how, "_selected_action": ids, "value": value, "confirm": "Confirm"})


def test_resolving_in_the_console_settles_through_the_handler_and_resumes_the_awaiter(admin_client, protocol):
    suspended_on(protocol, "wf", "wf.1")
    assert protocol("promise.register_listener", {"awaited": "wf.1", "address": "poll://uni@g/c"}).status == 200
    done = settle_through_the_console(admin_client, ["wf.1"], "resolve", '{"approved": true}')
    assert done.status_code == 302
    promise = protocol("promise.get", {"id": "wf.1"}).data["promise"]
    assert promise["state"] == "resolved"
    assert orjson.loads(base64.b64decode(promise["value"]["data"])) == {"approved": True}
    assert protocol("task.get", {"id": "wf"}).data["task"]["state"] == "pending"  # resumed
    snap = protocol.snap()
    assert any(m["message"]["kind"] == "unblock" for m in snap["messages"])  # the listener is told
    assert snap["listeners"] == []


@pytest.mark.parametrize("how, state", [("reject", "rejected"), ("cancel", "rejected_canceled")])
def test_reject_and_cancel_with_no_value(admin_client, protocol, how, state):
    assert protocol("promise.create", create("a", soon())).status == 200
    assert settle_through_the_console(admin_client, ["a"], how, "").status_code == 302
    promise = protocol("promise.get", {"id": "a"}).data["promise"]
    assert promise["state"] == state and promise["value"] == {}


def test_a_value_that_is_not_json_is_refused_and_nothing_changes(admin_client, protocol):
    assert protocol("promise.create", create("a", soon())).status == 200
    answer = settle_through_the_console(admin_client, ["a"], "resolve", "{not json")
    assert answer.status_code == 200 and b"Not JSON" in answer.content
    assert protocol("promise.get", {"id": "a"}).data["promise"]["state"] == "pending"


def test_settling_a_settled_promise_is_reported_not_hidden(admin_client, protocol):
    assert protocol("promise.create", create("a", soon())).status == 200
    assert protocol("promise.settle", {"id": "a", "state": "rejected", "value": {}}).status == 200
    answer = settle_through_the_console(admin_client, ["a"], "resolve", "")
    messages = [str(m) for m in answer.wsgi_request._messages]
    assert any("promise.settle a" in m for m in messages), messages
    assert protocol("promise.get", {"id": "a"}).data["promise"]["state"] == "rejected"


def test_promises_cannot_be_added_edited_or_deleted_by_hand(admin_client, protocol):
    assert protocol("promise.create", create("a", soon())).status == 200
    assert admin_client.get(reverse("admin:promises_promise_add")).status_code == 403
    assert admin_client.post(change_url(Promise, "a"), {"state": "resolved"}).status_code == 403
    assert admin_client.post(reverse("admin:promises_promise_delete", args=["a"]), {"post": "yes"}).status_code == 403
    assert Promise.objects.get(id="a").state == "pending"


def test_tasks_show_their_lease_and_halt_and_continue_through_the_handlers(admin_client, protocol):
    assert protocol("promise.create", targeted("job", soon())).status == 200
    assert protocol("task.acquire", {"id": "job", "version": 0, "pid": "worker-7", "ttl": 60_000}).status == 200
    page = admin_client.get(changelist(Task)).content.decode()
    assert "worker-7" in page and "acquired" in page
    url = changelist(Task)
    assert admin_client.post(url, {"action": "halt", "_selected_action": ["job"], "index": 0}).status_code == 302
    assert protocol("task.get", {"id": "job"}).data["task"]["state"] == "halted"
    assert listed(admin_client.get(url, {"state": "halted"})) == ["job"]
    assert listed(admin_client.get(url, {"q": "jo"})) == ["job"]
    assert listed(admin_client.get(url, {"q": "ob"})) == []
    assert admin_client.post(url, {"action": "resume", "_selected_action": ["job"], "index": 0}).status_code == 302
    assert protocol("task.get", {"id": "job"}).data["task"]["state"] == "pending"


NIGHTLY = {  # the console's form for a new schedule, filled in
    "id": "nightly",
    "cron": "0 3 * * *",
    "promise_id": "nightly.{{.timestamp}}",
    "promise_timeout": 60_000,
    "promise_param": "{}",
    "promise_tags": orjson.dumps({"resonate:target": TARGET}).decode(),
}


def test_schedules_are_created_with_a_validated_cron_and_deleted_through_the_handlers(admin_client, protocol):
    add = reverse("admin:schedules_schedule_add")
    form = NIGHTLY
    refused = admin_client.post(add, {**form, "cron": "61 * * * *"})
    assert refused.status_code == 200 and b"Invalid cron" in refused.content
    assert not Schedule.objects.exists()
    assert admin_client.post(add, form).status_code == 302
    schedule = protocol("schedule.get", {"id": "nightly"}).data["schedule"]
    assert schedule["cron"] == "0 3 * * *" and schedule["promiseTags"] == {"resonate:target": TARGET}
    page = admin_client.get(change_url(Schedule, "nightly")).content.decode()
    assert page.count("03:00:00.000 UTC") == 5  # the next five runs
    delete = reverse("admin:schedules_schedule_delete", args=["nightly"])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302
    assert protocol("schedule.get", {"id": "nightly"}).status == 404


def test_the_outbox_lists_undelivered_messages_and_redelivers(admin_client, protocol):
    assert protocol("promise.create", targeted("job", soon())).status == 200
    from outbox.models import DeliveryState, Message

    Message.objects.update(state=DeliveryState.FAILED, attempts=8, last_error="HTTP 500")
    page = admin_client.get(changelist(Message)).content.decode()
    assert "HTTP 500" in page and "job" in page
    assert listed(admin_client.get(changelist(Message), {"delivery": "delivered"})) == []
    [message] = Message.objects.all()
    url = changelist(Message)
    assert (
        admin_client.post(url, {"action": "redeliver", "_selected_action": [message.pk], "index": 0}).status_code == 302
    )
    message.refresh_from_db()
    assert (message.state, message.attempts, message.last_error) == (DeliveryState.PENDING, 0, "")


def test_a_view_only_operator_sees_but_cannot_act(client, protocol, django_user_model):
    from django.contrib.auth.models import Permission

    viewer = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_promise"))
    client.force_login(viewer)
    assert protocol("promise.create", create("a", soon())).status == 200
    page = client.get(changelist(Promise))
    assert page.status_code == 200 and b"Resolve selected" not in page.content
    client.post(changelist(Promise), {"action": "resolve", "_selected_action": ["a"], "value": "", "confirm": "1"})
    assert protocol("promise.get", {"id": "a"}).data["promise"]["state"] == "pending"
    assert client.get(reverse("admin:schedules_schedule_changelist")).status_code == 403


def test_redeliver_leaves_delivered_messages_alone(admin_client, protocol):
    from outbox.models import DeliveryState, Message

    assert protocol("promise.create", targeted("job", soon())).status == 200
    Message.objects.update(state=DeliveryState.DELIVERED, attempts=1)
    [message] = Message.objects.all()
    redeliver = {"action": "redeliver", "_selected_action": [message.pk], "index": 0}
    assert admin_client.post(changelist(Message), redeliver).status_code == 302
    message.refresh_from_db()
    assert message.state == DeliveryState.DELIVERED


def test_a_schedule_id_in_use_is_refused_not_silently_kept(admin_client, protocol):
    schedule = {"id": "s", "cron": "0 3 * * *", "promiseId": "s.{{.timestamp}}", "promiseTimeout": 1000}
    assert protocol("schedule.create", schedule).status == 200
    form = {"id": "s", "cron": "0 4 * * *", "promise_id": "x", "promise_timeout": 5, "promise_param": "{}"}
    answer = admin_client.post(reverse("admin:schedules_schedule_add"), {**form, "promise_tags": "{}"})
    assert answer.status_code == 200 and b"delete it first" in answer.content
    assert protocol("schedule.get", {"id": "s"}).data["schedule"]["cron"] == "0 3 * * *"


def test_a_value_with_nan_is_refused(admin_client, protocol):
    assert protocol("promise.create", create("a", soon())).status == 200
    answer = settle_through_the_console(admin_client, ["a"], "resolve", '{"x": NaN}')
    assert answer.status_code == 200 and b"Not JSON" in answer.content


def test_embedded_mode_hides_celery_beats_pages(admin_client, db):
    """Nothing reads Beat's schedules without Celery: the console's index does not offer them."""
    page = admin_client.get("/admin/").content.decode()
    assert "Promises" in page
    assert "Periodic tasks" not in page and "django_celery_beat" not in page
