"""Every manual action in the console is recorded: on the object's History page (Django admin's log) with the
operator, what was sent and what the server answered, and on the server's log (console/audit.py)."""

import logging

import orjson
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from outbox.models import DeliveryState, Message
from promises.models import Promise
from schedules.models import Schedule
from tasks.models import Task
from tests.conftest import create, targeted
from tests.test_admin import NIGHTLY, changelist, settle_through_the_console, soon


def history(admin_client, model, id):
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_history", args=[id])
    response = admin_client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def entries(model, id):
    return [
        (entry.user.username, entry.get_change_message())
        for entry in LogEntry.objects.filter(object_id=id, content_type__model=model._meta.model_name).order_by("pk")
    ]


def test_settling_by_hand_shows_on_the_promise_history_with_its_operator_and_value(admin_client, protocol, caplog):
    assert protocol("promise.create", create("a", soon())).status == 200
    assert "change history" in history(admin_client, Promise, "a")  # nothing yet: "doesn't have a change history"
    with caplog.at_level(logging.INFO, logger="resonate.console"):
        assert settle_through_the_console(admin_client, ["a"], "resolve", '{"approved": true}').status_code == 302
    [(user, message)] = entries(Promise, "a")
    sent = orjson.loads(message.removeprefix("promise.settle ").rpartition(": ")[0])
    assert user == "admin" and sent["state"] == "resolved" and sent["value"]["data"]
    assert message.endswith(": 200 resolved")
    page = history(admin_client, Promise, "a")
    assert "admin" in page and "promise.settle" in page and "200 resolved" in page
    [line] = [r for r in caplog.records if r.name == "resonate.console"]
    assert line.getMessage() == "console: admin ran promise.settle on a: 200 resolved"
    assert line.operator == "admin" and orjson.loads(line.sent) == sent


def test_a_refused_or_unchanged_action_is_recorded_with_what_the_server_answered(admin_client, protocol):
    assert protocol("promise.create", create("a", soon())).status == 200
    assert protocol("promise.settle", {"id": "a", "state": "rejected", "value": {}}).status == 200
    settle_through_the_console(admin_client, ["a"], "cancel", "")
    [(_, message)] = entries(Promise, "a")
    assert message.startswith("promise.settle ") and message.endswith(": 200 not changed: it was already rejected")

    assert protocol("promise.create", targeted("job", soon())).status == 200  # pending: continue is refused
    url = changelist(Task)
    assert admin_client.post(url, {"action": "resume", "_selected_action": ["job"], "index": 0}).status_code == 302
    [(_, message)] = entries(Task, "job")
    assert message.startswith('task.continue {"id":"job"}: 409 ')


def test_halting_and_continuing_a_task_are_both_on_its_history(admin_client, protocol):
    assert protocol("promise.create", targeted("job", soon())).status == 200
    url = changelist(Task)
    for action in ("halt", "resume"):
        assert admin_client.post(url, {"action": action, "_selected_action": ["job"], "index": 0}).status_code == 302
    assert entries(Task, "job") == [
        ("admin", 'task.halt {"id":"job"}: 200 halted'),
        ("admin", 'task.continue {"id":"job"}: 200 continued'),
    ]
    assert "task.continue" in history(admin_client, Task, "job")


def test_redelivering_and_schedule_changes_are_recorded(admin_client, protocol):
    assert protocol("promise.create", targeted("job", soon())).status == 200
    Message.objects.update(state=DeliveryState.FAILED)
    [message] = Message.objects.all()
    url = changelist(Message)
    assert admin_client.post(url, {"action": "redeliver", "_selected_action": [message.pk], "index": 0}).status_code
    queued = f'outbox.redeliver {{"key":"{message.key}"}}: queued for delivery'
    assert entries(Message, message.pk) == [("admin", queued)]

    assert admin_client.post(reverse("admin:schedules_schedule_add"), NIGHTLY).status_code == 302
    delete = reverse("admin:schedules_schedule_delete", args=["nightly"])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302
    recorded = [message for _, message in entries(Schedule, "nightly")]
    assert any(m.startswith("schedule.create ") and m.endswith(": 200 created") for m in recorded), recorded
    assert 'schedule.delete {"id":"nightly"}: 200 deleted' in recorded
