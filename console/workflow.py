"""The console's workflow page: one workflow's call tree, its timeline and what it waits on, from any of its promises.

A workflow is its root promise and every promise tagged resonate:origin=<root> (floor/lineage.py nests them by
resonate:parent). Beside each promise: its task (state, version, lease holder and expiry) and the messages sent for
it (execute, unblock: when, to where, delivered or not). The page reads; its one action, cancelling the workflow,
runs promise.settle for the root and then each pending descendant (recorded: console/audit.py).

What the server keeps is the current row of each promise, task and message: a task's earlier attempts show only
as its version (each acquire after the first raised it), and a message replaced by a later one with its key is
gone.
"""

from dataclasses import dataclass, field

import orjson
from django.contrib import messages as notices
from django.contrib.admin.utils import quote, unquote
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from console.tools import date, decoded, perform_each
from floor.clock import now_ms
from floor.lineage import NOT_JSON, ORIGIN, children_by_parent, function_name, sdk_data, walk
from floor.protocol import tagged
from outbox.models import DeliveryState, Message, MessageKind
from promises.models import Callback, Promise, PromiseState
from tasks.models import Task, TaskState, TimeoutKind

PAGE = 1000  # promises on one page of a workflow, in tree order; the rest on the next pages
LIMIT = 20_000  # the most promises of one workflow the page reads
SHORT = 80  # characters of a value or error shown before "more"
REFRESH_MS = 2000  # how often an open page of an unfinished workflow reloads its body


def short(value):
    """A protocol value in one line, cut at SHORT characters ("" for none): its data decoded when it is base64 JSON."""
    if not value:
        return ""
    data = sdk_data(value)
    if data is NOT_JSON:  # shown as stored
        text = orjson.dumps(value if value.get("data") is None else value["data"]).decode()
    elif isinstance(data, dict) and data.get("__type") == "error" and isinstance(data.get("message"), str):
        text = f"error: {data['message']}"  # the Python SDK's encoding of an exception
    else:
        text = orjson.dumps(data).decode()
    return text if len(text) <= SHORT else text[:SHORT] + "…"


def workflow_root(promise):
    """The root of the workflow a promise belongs to: its resonate:origin, when that promise exists, else itself."""
    origin = promise.tags.get(ORIGIN)
    if isinstance(origin, str) and origin != promise.id and Promise.objects.filter(id=origin).exists():
        return origin
    return promise.id


def workflow_url(promise_id):
    return reverse("admin:promises_promise_workflow", args=[quote(promise_id)])


@dataclass(eq=False)
class Node:
    """One promise of the workflow as the page shows it."""

    promise: Promise  # as readers see it now (projected)
    stored: Promise
    depth: int = 0
    task: Task | None = None  # as readers see it now (projected)
    messages: list = field(default_factory=list)
    awaits: list = field(default_factory=list)  # ids of the promises its suspended task awaits
    waits: str = ""  # why it is not settled yet, for an unsettled promise
    stuck: bool = False  # nothing under way will settle it: someone should look
    blocker: bool = False  # at the end of a chain the workflow waits on (blockers)
    bar: tuple = (0.0, 0.0)  # the timeline bar: left and width, in % of the workflow's span
    ticks: list = field(default_factory=list)  # (position %, label) on its bar: messages sent, delivered, lease end

    @property
    def id(self):
        return self.promise.id

    @property
    def settled(self):
        return self.promise.state != PromiseState.PENDING

    @property
    def indent(self):
        return f"{0.2 + 1.2 * self.depth:.1f}em"

    @property
    def function(self):
        return function_name(self.promise.param)

    @property
    def value(self):
        return short(self.promise.value)

    @property
    def value_whole(self):
        return decoded(self.promise.value)

    @property
    def change_url(self):
        return reverse("admin:promises_promise_change", args=[quote(self.id)])

    @property
    def task_url(self):
        return reverse("admin:tasks_task_change", args=[quote(self.id)]) if self.task else ""

    @property
    def settle_url(self):
        return reverse("admin:promises_promise_changelist") + f"?q={self.id}"

    @property
    def messages_url(self):
        return reverse("admin:outbox_message_changelist") + f"?q={self.id}&delivery=all"


def read(root_id, now):
    """The workflow's nodes in tree order (depth first, children in creation order), and how many promises it has
    beyond LIMIT (0 when it was read whole)."""
    root = Promise.objects.get(id=root_id)
    found = list(
        tagged(Promise.objects.exclude(id=root_id), "tags", {ORIGIN: root_id}).order_by("created_at", "id")[: LIMIT + 1]
    )
    beyond = max(len(found) - LIMIT, 0)
    stored = {p.id: p for p in [root, *found[:LIMIT]]}
    ids = list(stored)
    tasks = {t.promise_id: t for t in Task.objects.filter(promise_id__in=ids)}
    sent = {}
    for message in Message.objects.filter(subject__in=ids).order_by("created_at", "id"):
        sent.setdefault(message.subject, []).append(message)
    awaits = {}
    for awaiter, awaited in Callback.objects.filter(awaiter_id__in=ids).values_list("awaiter_id", "awaited_id"):
        awaits.setdefault(awaiter, []).append(awaited)
    outside = {a for each in awaits.values() for a in each} - stored.keys()  # awaited promises of other workflows
    elsewhere = {p.id: p for p in Promise.objects.filter(id__in=outside)}

    records = {id: {"id": id, "tags": p.tags, "createdAt": p.created_at} for id, p in stored.items()}
    children = children_by_parent(records, root_id)
    nodes = {}
    for depth, record, _ in walk(records[root_id], children):
        promise = stored[record["id"]]
        nodes[promise.id] = Node(
            promise=promise.projected(now),
            stored=promise,
            depth=depth,
            task=tasks[promise.id].projected(promise, now) if promise.id in tasks else None,
            messages=sent.get(promise.id, []),
            awaits=awaits.get(promise.id, []),
        )
    for node in nodes.values():
        node.waits, node.stuck = waiting(node, nodes, elsewhere, now)
    place_on_timeline(nodes.values(), now)
    return list(nodes.values()), beyond


def waiting(node, nodes, elsewhere, now):
    """(why an unsettled promise is not settled yet, whether nothing under way will settle it)."""
    if node.settled:
        return "", False
    task = node.task  # a promise past its timeout reads as settled (projected): it never gets here
    if task is None:
        return "no task: it settles when someone settles it (an SDK, an operator) or at its timeout", True
    if task.state == TaskState.PENDING:
        execute = next((m for m in reversed(node.messages) if m.kind == MessageKind.EXECUTE), None)
        if execute is None:
            return "its task is pending and no execute message is in the outbox", True
        if execute.state == DeliveryState.DELIVERED:
            return f"its execute reached {execute.address} at {date(execute.delivered_at)}; no worker took it", True
        detail = f", last error: {execute.last_error}" if execute.last_error else ""
        return f"its execute to {execute.address} is {execute.state} after {execute.attempts} attempts{detail}", True
    if task.state == TaskState.ACQUIRED:
        if task.timeout_kind == TimeoutKind.LEASE and task.timeout_at is not None and task.timeout_at <= now:
            return f"the lease of {task.pid} ended at {date(task.timeout_at)}; the sweep has not released it", True
        return f"running: acquired by {task.pid} (version {task.version}), lease until {date(task.timeout_at)}", False
    if task.state == TaskState.SUSPENDED:
        awaited = [stored(id, nodes, elsewhere) for id in node.awaits]
        pending = [p.id for p in awaited if p is not None and p.is_live(now)]
        if pending:
            return "suspended, awaiting " + ", ".join(pending), False
        unswept = [p for p in awaited if p is not None and p.state == PromiseState.PENDING]
        if unswept:  # timed out as readers see it, not yet settled by the sweep: the resume waits for the sweep
            passed = ", ".join(f"{p.id} at {date(p.timeout_at)}" for p in unswept)
            return f"suspended; the timeout of {passed} passed and the timeout sweep has not settled it yet", True
        return "suspended; what it awaits has settled and it is about to resume", False
    if task.state == TaskState.HALTED:
        return "its task is halted: continue it (Tasks) to run it again", True
    return f"its task is {task.state}", False


def stored(id, nodes, elsewhere):
    """The stored row of an awaited promise, of this workflow or another; None if it is gone."""
    return nodes[id].stored if id in nodes else elsewhere.get(id)


def blockers(nodes):
    """What the workflow waits on: from the root, through what each suspended task awaits, the unsettled promises
    at the end of each chain (each once), with why."""
    by_id = {node.id: node for node in nodes}
    if not nodes or nodes[0].settled:
        return []
    found, seen, stack = [], set(), [nodes[0].id]
    while stack:
        id = stack.pop()
        if id in seen:
            continue
        seen.add(id)
        node = by_id.get(id)
        if node is None or node.settled:
            continue
        pending = [a for a in node.awaits if a in by_id and not by_id[a].settled]
        if node.task and node.task.state == TaskState.SUSPENDED and pending:
            stack.extend(reversed(pending))
        else:
            node.blocker = True
            found.append(node)
    return found


def place_on_timeline(nodes, now):
    """Each node's bar, from its creation to its settlement (or now), on one axis for the whole workflow."""
    nodes = list(nodes)
    start = min(n.stored.created_at for n in nodes)
    end = max(max(n.promise.settled_at or now for n in nodes), start + 1)
    span = end - start

    def at(ms):
        return round(100 * (min(max(ms, start), end) - start) / span, 2)

    for node in nodes:
        left = at(node.stored.created_at)
        node.bar = (left, max(at(node.promise.settled_at or now) - left, 0.4))
        for message in node.messages:
            node.ticks.append((at(message.created_at), f"{message.kind} sent {date(message.created_at)}"))
            if message.delivered_at:
                node.ticks.append((at(message.delivered_at), f"{message.kind} delivered {date(message.delivered_at)}"))
        task = node.task
        if task and task.timeout_kind == TimeoutKind.LEASE and task.timeout_at and task.timeout_at <= end:
            node.ticks.append((at(task.timeout_at), f"lease of {task.pid} ends {date(task.timeout_at)}"))


def workflow_view(model_admin, request, object_id):
    """GET: the page (?page=N for the promises past the first PAGE; ?partial=1 its body alone, for the refresh).
    POST action=cancel: ask to confirm, then cancel the root and every pending descendant."""
    object_id = unquote(object_id)  # as the admin's own views take it: quote() escapes ":", "/" and "_" in ids
    promise = Promise.objects.filter(id=object_id).first()
    if promise is None:
        raise Http404(f"No promise {object_id}")
    root_id = workflow_root(promise)
    if root_id != promise.id:
        return HttpResponseRedirect(workflow_url(root_id) + f"#node-{promise.id}")
    now = now_ms()
    nodes, beyond = read(root_id, now)
    if request.method == "POST" and model_admin.has_operate_permission(request):
        return cancel(model_admin, request, nodes)
    asked = request.GET.get("page", "")
    page = int(asked) if asked.isdigit() and int(asked) > 0 else 1
    shown = nodes[(page - 1) * PAGE : page * PAGE]
    root = nodes[0]
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": f"Workflow {root.id}",
        "root": root,
        "nodes": shown,
        "count": len(nodes),
        "beyond": beyond,
        "page": page,
        "next_page": page + 1 if page * PAGE < len(nodes) else None,
        "previous_page": page - 1 if page > 1 else None,
        "blockers": blockers(nodes),
        "settled_count": sum(1 for n in nodes if n.settled),
        "pending_count": sum(1 for n in nodes if not n.settled),
        "now": date(now),
        "started": date(root.stored.created_at),
        "finished": date(root.promise.settled_at),
        "live": not root.settled,
        "refresh_ms": REFRESH_MS,
        "can_operate": model_admin.has_operate_permission(request),
    }
    template = "admin/promises/workflow_body.html" if request.GET.get("partial") else "admin/promises/workflow.html"
    return TemplateResponse(request, template, context)


def cancel(model_admin, request, nodes):
    """Cancel the workflow: the root first, so that no descendant's settlement resumes it, then each pending
    descendant in tree order; every settlement is promise.settle in its own transaction, recorded."""
    pending = [node.id for node in nodes if not node.settled]
    if "confirm" not in request.POST:
        context = {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.model._meta,
            "title": f"Cancel workflow {nodes[0].id}: {len(pending)} pending promises",
            "root": nodes[0],
            "pending": pending,
        }
        return TemplateResponse(request, "admin/promises/workflow_cancel.html", context)
    if not pending:
        notices.info(request, "Nothing to cancel: every promise of the workflow is settled.")
    requests = [{"id": id, "state": PromiseState.REJECTED_CANCELED, "value": {}} for id in pending]
    perform_each(request, Promise, "promise.settle", requests, "canceled", unchanged=already_settled)
    return HttpResponseRedirect(workflow_url(nodes[0].id))


def already_settled(request, answer):
    """promise.settle answers 200 with the promise as it is when it was settled before (or has expired)."""
    if answer["promise"]["state"] != request["state"]:
        return f"not changed: it was already {answer['promise']['state']}"
    return None
