"""manage.py schedules create|get|delete|search: the schedule.* operations from a shell."""

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


class Command(ResonateCommand):
    help = "Create, show, delete and search cron schedules (standard cron, UTC; 6 fields = leading seconds)."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        create = self.subcommand(actions, "create", "create a schedule (an existing one is shown unchanged)")
        create.add_argument("id")
        create.add_argument("--cron", required=True, help='e.g. "0 2 * * *"')
        create.add_argument("--promise-id", required=True, help="id template: {{.id}} and {{.timestamp}} expand")
        create.add_argument("--promise-timeout", type=duration, required=True, help="each promise's timeout: 1h, 2d")
        create.add_argument("--promise-data", type=json_value, help="each promise's param data, any JSON value")
        create.add_argument(
            "--promise-tags", type=json_object, default={}, help='e.g. {"resonate:target": "poll://any@default"}'
        )
        self.subcommand(actions, "get", "show a schedule").add_argument("id")
        self.subcommand(actions, "delete", "delete a schedule (promises it created stay)").add_argument("id")
        search = self.subcommand(actions, "search", "list schedules by id, filtered by promise tags")
        search.add_argument("--tags", type=json_object, default={}, help="every promise tag given must match")
        search.add_argument("--limit", type=int, default=10, help="at most this many (1..1000)")
        search.add_argument("--cursor", help="the next page, as printed by the previous search")

    def handle(self, *args, action, json, **options):
        if action == "create":
            reply = call("schedule.create", self.create_request(**options))
        elif action == "search":
            request = {"tags": options["tags"], "limit": options["limit"]}
            if options["cursor"] is not None:
                request["cursor"] = options["cursor"]
            reply = call("schedule.search", request)
        else:
            reply = call(f"schedule.{action}", {"id": options["id"]})
        if json:
            self.write_json(reply)
        elif action == "search":
            self.write_lines(table_lines(reply["schedules"], ["id", "cron", "promiseId", "nextRunAt"]))
            if "cursor" in reply:
                self.stdout.write(f"more: --cursor {reply['cursor']}")
        elif action == "delete":
            self.stdout.write(f"Schedule {options['id']} deleted.")
        else:
            self.write_lines(record_lines(reply["schedule"]))

    def create_request(self, id, cron, promise_id, promise_timeout, promise_data, promise_tags, **options):
        return {
            "id": id,
            "cron": cron,
            "promiseId": promise_id,
            "promiseTimeout": promise_timeout,
            "promiseParam": payload(promise_data),
            "promiseTags": promise_tags,
        }
