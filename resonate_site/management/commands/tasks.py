"""manage.py tasks get|halt|continue|search: the operator's task.* operations from a shell."""

from resonate_site.management.cli import ResonateCommand, call, record_lines, table_lines
from tasks.models import TaskState

DONE = {"halt": "halted: not dispatched until `tasks continue`", "continue": "pending again, sent to its target"}


class Command(ResonateCommand):
    help = "Show, halt, continue and search tasks."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        self.subcommand(actions, "get", "show a task as it reads now").add_argument("id")
        self.subcommand(actions, "halt", "stop dispatching a task").add_argument("id")
        self.subcommand(actions, "continue", "dispatch a halted task again").add_argument("id")
        search = self.subcommand(actions, "search", "list tasks by id, filtered by state")
        search.add_argument("--state", choices=TaskState.values, help="as the tasks read now")
        search.add_argument("--limit", type=int, default=100, help="at most this many (1..1000)")
        search.add_argument("--cursor", help="the next page, as printed by the previous search")

    def handle(self, *args, action, json, **options):
        if action == "search":
            request = {"limit": options["limit"]}
            request.update({k: options[k] for k in ("state", "cursor") if options[k] is not None})
            reply = call("task.search", request)
        else:
            reply = call(f"task.{action}", {"id": options["id"]})
        if json:
            self.write_json(reply)
        elif action == "search":
            self.write_lines(table_lines(reply["tasks"], ["id", "state", "version", "pid"]))
            if "cursor" in reply:
                self.stdout.write(f"more: --cursor {reply['cursor']}")
        elif action == "get":
            self.write_lines(record_lines(reply["task"]))
        else:
            self.stdout.write(f"Task {options['id']} {DONE[action]}.")
