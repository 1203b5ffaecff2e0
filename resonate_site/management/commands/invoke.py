"""manage.py invoke: start a function on the workers of a target, as `resonate invoke` does (PROTOCOL.md §8.5)."""

from argparse import ArgumentTypeError

from floor.clock import now_ms
from floor.protocol import DELAY, TARGET, later
from resonate_site.management.cli import (
    ResonateCommand,
    call,
    duration,
    encode_data,
    json_array,
    json_value,
    record_lines,
)


def argument(text):
    """An --arg value: JSON when it parses (42, true, "x", [1]), the plain string otherwise."""
    try:
        return json_value(text)
    except ArgumentTypeError:
        return text


def address(target):
    """A worker group name means anycast to that group, as in the SDKs; an address is used as it is."""
    return target if "://" in target else f"poll://any@{target}"


class Command(ResonateCommand):
    help = "Invoke a function: create a promise whose task goes to the target's workers."

    def create_parser(self, prog_name, subcommand, **kwargs):
        # --version is the function's version here (as in `resonate invoke`), not Django's.
        return super().create_parser(prog_name, subcommand, conflict_handler="resolve", **kwargs)

    def add_arguments(self, parser):
        parser.add_argument("id", help="the promise id (invoking an existing id shows that promise)")
        parser.add_argument("--func", "-f", required=True, help="the registered function name")
        args = parser.add_mutually_exclusive_group()
        args.add_argument("--arg", action="append", type=argument, dest="arguments", help="an argument (repeatable)")
        args.add_argument("--json-args", type=json_array, help="all arguments, as a JSON array")
        parser.add_argument("--version", type=int, default=1, help="the function version (default 1)")
        parser.add_argument("--timeout", "-t", type=duration, default="1h", help="default 1h (counted after --delay)")
        parser.add_argument("--target", default="poll://any@default", help="an address or a worker group name")
        parser.add_argument("--delay", type=duration, default=0, help="do not start before this long from now")
        self.add_output_arguments(parser)

    def handle(self, id, func, arguments, json_args, version, timeout, target, delay, **options):
        now = now_ms()
        param = {"data": encode_data({"func": func, "args": json_args or arguments or [], "version": version})}
        tags = {TARGET: address(target)}
        if delay:
            tags[DELAY] = str(later(now, delay))
        request = {"id": id, "timeoutAt": later(now, timeout + delay), "param": param, "tags": tags}
        reply = call("promise.create", request, now)
        if reply["promise"]["createdAt"] != now:
            self.notice(f"Promise {id} already exists; shown as it is, nothing invoked.")
        if options["json"]:
            self.write_json(reply)
        else:
            self.write_lines(record_lines(reply["promise"]))
