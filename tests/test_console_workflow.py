"""The console's workflow page (console/workflow.py): a workflow's call tree, timeline and what it waits on, reached
from any of its promises, tasks or messages; and cancelling a whole workflow, recorded."""

import base64
import html as markup
import re
import time

import orjson
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote
from django.urls import reverse

from console.workflow import function_name, short
from outbox.models import Message
from promises.models import Promise
from tasks.models import Task
from tests.conftest import action, create, targeted
from tests.test_admin import change_url, soon

ORIGIN, PARENT = "resonate:origin", "resonate:parent"


def b64(value):
    return base64.b64encode(orjson.dumps(value)).decode()


def param(function):
    return {"headers": {}, "data": b64({"func": function, "args": [], "kwargs": {}, "version": 1})}


def lineage(root, parent):
    return {ORIGIN: root, PARENT: parent}


def workflow_page(admin_client, id, **query):
    return admin_client.get(reverse("admin:promises_promise_workflow", args=[quote(id)]), query, follow=True)


def fan_out(protocol, root="wf"):
    """A root whose task is suspended on two children: one resolved, one whose execute nobody has taken, as an
    SDK's fan-out leaves it mid-way."""
    assert protocol("promise.create", targeted(root, soon(), lineage(root, root), param("fan_out"))).status == 200
    assert protocol("task.acquire", {"id": root, "version": 0, "pid": "worker-1", "ttl": 60_000}).status == 200
    done, waiting = f"{root}:1", f"{root}:2"  # ids as the SDKs make them: the admin's URLs escape ":"
    assert protocol("promise.create", create(done, soon(), lineage(root, root), param("step"))).status == 200
    settled = {"id": done, "state": "resolved", "value": {"headers": {}, "data": b64({"total": 42})}}
    assert protocol("promise.settle", settled).status == 200
    assert protocol("promise.create", targeted(waiting, soon(), lineage(root, root), param("retried"))).status == 200
    callback = action("promise.register_callback", {"awaited": waiting, "awaiter": root})
    assert protocol("task.suspend", {"id": root, "version": 1, "actions": [callback]}).status == 200
    return done, waiting


def test_function_names_and_short_values_are_read_as_the_sdks_encode_them():
    assert function_name(param("fan_out")) == "fan_out"
    assert function_name({}) is None and function_name({"data": "not base64!"}) is None
    assert function_name({"data": b64([1, 2])}) is None
    assert short({"data": b64({"total": 42})}) == '{"total":42}'
    assert short({}) == ""
    error = {"__type": "error", "message": "out of stock", "__py_pickle": "gASV..."}
    assert short({"data": b64(error)}) == "error: out of stock"
    long = short({"data": b64("x" * 500)})
    assert len(long) == 81 and long.endswith("…")


def test_a_workflow_shows_its_tree_functions_values_and_what_it_waits_on(admin_client, protocol):
    done, waiting = fan_out(protocol)
    page = workflow_page(admin_client, "wf")
    assert page.status_code == 200
    html = markup.unescape(page.content.decode())
    rows = page.context["nodes"]
    assert [(n.id, n.depth, n.function) for n in rows] == [
        ("wf", 0, "fan_out"),
        (done, 1, "step"),
        (waiting, 1, "retried"),
    ]
    assert '{"total":42}' in html  # the resolved child's value, decoded
    assert [n.id for n in page.context["blockers"]] == [waiting]
    waits = re.search(r'<div class="waits" id="waits-on">(.*?)</div>', html, re.S).group(1)
    assert waiting in waits and "its execute to poll://any@default is" in waits and "after" in waits
    assert "suspended, awaiting wf:2" in html  # the root's own row says what it awaits
    assert html.count('class="bar ') == 3 and 'class="tick"' in html  # the timeline: a bar each, messages ticked


def test_the_workflow_is_one_click_from_any_promise_task_or_message_in_it(admin_client, protocol):
    _, waiting = fan_out(protocol)
    url = reverse("admin:promises_promise_workflow", args=[quote(waiting)])
    for page in (change_url(Promise, waiting), change_url(Task, waiting)):
        assert url in admin_client.get(page).content.decode()
    message = Message.objects.filter(subject=waiting).first()
    assert url in admin_client.get(change_url(Message, message.pk)).content.decode()
    assert url in admin_client.get(reverse("admin:promises_promise_changelist")).content.decode()
    # A descendant's workflow page is its root's, scrolled to the descendant's row.
    response = admin_client.get(url)
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:promises_promise_workflow", args=["wf"]) + f"#node-{waiting}"


def test_a_lease_that_ran_out_a_halted_task_and_a_passed_timeout_are_called_stuck(admin_client, protocol):
    now = int(time.time() * 1000)
    assert protocol("promise.create", targeted("a", soon(), lineage("a", "a"))).status == 200
    assert protocol("task.acquire", {"id": "a", "version": 0, "pid": "gone", "ttl": 1}).status == 200
    assert protocol("promise.create", create("a.late", now + 1, lineage("a", "a"))).status == 200
    assert protocol("promise.create", targeted("a.halted", soon(), lineage("a", "a"))).status == 200
    assert protocol("task.halt", {"id": "a.halted"}).status == 200
    time.sleep(0.05)
    page = workflow_page(admin_client, "a")
    why = {n.id: (n.waits, n.stuck) for n in page.context["nodes"]}
    assert why["a"][1] and "the lease of gone ended" in why["a"][0]
    assert why["a.halted"] == ("its task is halted: continue it (Tasks) to run it again", True)
    # A timed-out promise reads as settled (the projection), whether or not the sweep has written it.
    assert page.context["nodes"][1].promise.state == "rejected_timedout"


def test_a_finished_workflow_says_so_and_does_not_refresh(admin_client, protocol):
    assert protocol("promise.create", create("done", soon(), lineage("done", "done"), param("f"))).status == 200
    settled = {"id": "done", "state": "resolved", "value": {"data": b64("ok")}}
    assert protocol("promise.settle", settled).status == 200
    page = workflow_page(admin_client, "done")
    html = page.content.decode()
    assert 'data-finished="1"' in html and "Finished" in html and 'data-live="0"' in html
    assert page.context["blockers"] == []


def test_the_body_alone_is_served_for_the_refresh(admin_client, protocol):
    fan_out(protocol)
    body = workflow_page(admin_client, "wf", partial="1")
    html = body.content.decode()
    assert body.status_code == 200 and "<html" not in html and 'id="waits-on"' in html and "wf:2" in html


def test_cancelling_a_workflow_cancels_its_root_then_its_pending_descendants_recorded(admin_client, protocol):
    done, waiting = fan_out(protocol)
    url = reverse("admin:promises_promise_workflow", args=["wf"])
    asked = admin_client.post(url, {"action": "cancel"})
    assert asked.status_code == 200 and b"Cancel 2 promises" in asked.content
    assert Promise.objects.get(id="wf").state == "pending"  # nothing before the confirmation
    assert admin_client.post(url, {"action": "cancel", "confirm": "yes"}).status_code == 302
    states = {id: protocol("promise.get", {"id": id}).data["promise"]["state"] for id in ("wf", done, waiting)}
    assert states == {"wf": "rejected_canceled", done: "resolved", waiting: "rejected_canceled"}
    recorded = LogEntry.objects.order_by("pk").values_list("object_id", "change_message")
    assert [(id, m.endswith("200 canceled")) for id, m in recorded] == [("wf", True), (waiting, True)]
    assert protocol("task.get", {"id": "wf"}).data["task"]["state"] == "fulfilled"  # not resumed by the child


def test_a_view_only_operator_cannot_cancel(client, protocol, django_user_model):
    from django.contrib.auth.models import Permission

    fan_out(protocol)
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_promise"))
    client.force_login(viewer)
    page = workflow_page(client, "wf")
    assert page.status_code == 200 and b"Cancel the workflow" not in page.content
    client.post(reverse("admin:promises_promise_workflow", args=["wf"]), {"action": "cancel", "confirm": "yes"})
    assert Promise.objects.get(id="wf").state == "pending"


def test_a_workflow_of_a_thousand_children_renders_within_a_second(admin_client, protocol):
    assert protocol("promise.create", targeted("big", soon(), lineage("big", "big"), param("fan"))).status == 200
    for n in range(1000):
        child = create(f"big.{n}", soon(), lineage("big", "big"), param("leaf"))
        assert protocol("promise.create", child).status == 200
    workflow_page(admin_client, "big")  # warm: templates compiled
    started = time.perf_counter()
    page = workflow_page(admin_client, "big")
    took = time.perf_counter() - started
    assert page.status_code == 200 and len(page.context["nodes"]) == 1000 and page.context["next_page"] == 2
    assert took < 1.0, took
    rest = workflow_page(admin_client, "big", page="2")
    assert [n.id for n in rest.context["nodes"]] == ["big.999"]


def test_the_index_lists_the_protocol_first_and_offers_no_site_to_view(admin_client, db):
    index = admin_client.get(reverse("admin:index"))
    labels = [app["app_label"] for app in index.context["app_list"]]
    assert labels[:4] == ["promises", "tasks", "schedules", "outbox"] and "auth" in labels[4:]
    assert b"View site" not in index.content


def test_promises_filter_by_when_they_were_created_or_settled(admin_client, protocol):
    for id in ("old", "new"):
        assert protocol("promise.create", create(id, soon(), param=param("f"))).status == 200
    assert protocol("promise.settle", {"id": "new", "state": "resolved", "value": {}}).status == 200
    Promise.objects.filter(id="old").update(created_at=1)
    url = reverse("admin:promises_promise_changelist")
    listed = [p.pk for p in admin_client.get(url, {"created": "hour"}).context["cl"].result_list]
    assert listed == ["new"]
    assert [p.pk for p in admin_client.get(url, {"settled": "day"}).context["cl"].result_list] == ["new"]
    assert {p.pk for p in admin_client.get(url).context["cl"].result_list} == {"old", "new"}
    assert '<td class="field-function">f</td>' in admin_client.get(url).content.decode()  # the function column


def test_settling_a_root_by_hand_says_which_descendants_are_left_pending(admin_client, protocol):
    from tests.test_admin import settle_through_the_console

    done, waiting = fan_out(protocol)
    answer = settle_through_the_console(admin_client, ["wf"], "cancel", "")
    notes = [str(m) for m in answer.wsgi_request._messages]
    assert any("wf has 1 pending descendant promise left" in m and "/workflow/" in m for m in notes), notes
    answer = settle_through_the_console(admin_client, [done], "cancel", "")  # a leaf: nothing to say
    assert not any("pending descendant" in str(m) for m in answer.wsgi_request._messages)


def test_promises_are_found_by_the_function_they_run(admin_client, protocol):
    for id, given in (("a1", param("alpha")), ("a2", param("alpha")), ("b", param("beta")), ("none", None)):
        assert protocol("promise.create", create(id, soon(), param=given)).status == 200
    for id, data in (("garbled", "not base64!"), ("list", b64([1])), ("text", base64.b64encode(b"\xff").decode())):
        assert protocol("promise.create", create(id, soon(), param={"data": data})).status == 200
    url = reverse("admin:promises_promise_changelist")

    def found(term):
        return sorted(p.pk for p in admin_client.get(url, {"q": term}).context["cl"].result_list)

    assert found("function:alpha") == ["a1", "a2"]
    assert found("function: beta") == ["b"]
    assert found("function:gamma") == []
    assert sorted(Promise.objects.running("alpha").values_list("id", flat=True)) == ["a1", "a2"]


def test_an_awaited_timeout_the_sweep_has_not_fired_is_what_the_workflow_waits_on(admin_client, protocol):
    assert protocol("promise.create", targeted("t", soon(), lineage("t", "t"))).status == 200
    assert protocol("task.acquire", {"id": "t", "version": 0, "pid": "w", "ttl": 60_000}).status == 200
    assert protocol("promise.create", create("t:sleep", int(time.time() * 1000) + 300, lineage("t", "t"))).status == 200
    callback = action("promise.register_callback", {"awaited": "t:sleep", "awaiter": "t"})
    assert protocol("task.suspend", {"id": "t", "version": 1, "actions": [callback]}).status == 200
    time.sleep(0.4)  # its timeout passes; no sweep runs in these tests
    page = workflow_page(admin_client, "t")
    [blocker] = page.context["blockers"]
    assert blocker.id == "t" and blocker.stuck
    assert blocker.waits.startswith("suspended; the timeout of t:sleep at ")
    assert blocker.waits.endswith(" passed and the timeout sweep has not settled it yet")
