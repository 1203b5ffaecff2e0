"""manage.py promises get|create|resolve|reject|cancel|search: the promise.* operations from a shell."""

from floor.clock import now_ms
from floor.protocol import later
from promises.models import PromiseState
from resonate_site.management.cli import (
    ResonateCommand,
    call,
    duration,
    json_object,
    json_value,
    payload,
    record_lines,
    table_lines,
)

SETTLE_STATES = {
    "resolve": PromiseState.RESOLVED,
    "reject": PromiseState.REJECTED,
    "cancel": PromiseState.REJECTED_CANCELED,
}


class Command(ResonateCommand):
    help = "Get, create, settle and search promises (data is JSON, sent base64-encoded as the SDKs do)."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        get = self.subcommand(actions, "get", "show a promise as it reads now")
        get.add_argument("id")
        create = self.subcommand(actions, "create", "create a pending promise (an existing one is shown unchanged)")
        create.add_argument("id")
        create.add_argument("--timeout", type=duration, required=True, help="how long until it times out: 90s, 1h, 2d")
        create.add_argument("--data", type=json_value, help="param data, any JSON value")
        create.add_argument("--tags", type=json_object, default={}, help='tags, a JSON object: {"k": "v"}')
        for action, state in SETTLE_STATES.items():
            settle = self.subcommand(actions, action, f"settle a pending promise as {state}")
            settle.add_argument("id")
            settle.add_argument("--data", type=json_value, help="value data, any JSON value")
        search = self.subcommand(actions, "search", "list promises by id, filtered by state and tags")
        search.add_argument("--state", choices=PromiseState.values, help="as the promises read now")
        search.add_argument("--tags", type=json_object, default={}, help="every tag given must match")
        search.add_argument("--limit", type=int, default=100, help="at most this many (1..1000)")
        search.add_argument("--cursor", help="the next page, as printed by the previous search")

    def handle(self, *args, action, **options):
        if action == "get":
            reply = call("promise.get", {"id": options["id"]})
        elif action == "create":
            reply = self.create(**options)
        elif action in SETTLE_STATES:
            reply = self.settle(SETTLE_STATES[action], **options)
        else:
            reply = self.search(**options)
        if options["json"]:
            self.write_json(reply)
        elif action == "search":
            self.write_lines(table_lines(reply["promises"], ["id", "state", "timeoutAt"]))
            if "cursor" in reply:
                self.stdout.write(f"more: --cursor {reply['cursor']}")
        else:
            self.write_lines(record_lines(reply["promise"]))

    def create(self, id, timeout, data, tags, **options):
        now = now_ms()
        request = {"id": id, "timeoutAt": later(now, timeout), "param": payload(data), "tags": tags}
        reply = call("promise.create", request, now)
        if reply["promise"]["createdAt"] != now:
            self.notice(f"Promise {id} already exists; shown as it is.")
        return reply

    def settle(self, state, id, data, **options):
        now = now_ms()
        reply = call("promise.settle", {"id": id, "state": state, "value": payload(data)}, now)
        if reply["promise"].get("settledAt") != now:
            self.notice(f"Promise {id} was already settled; left unchanged.")
        return reply

    def search(self, state, tags, limit, cursor, **options):
        request = {"tags": tags, "limit": limit}
        request.update({k: v for k, v in (("state", state), ("cursor", cursor)) if v is not None})
        return call("promise.search", request)
