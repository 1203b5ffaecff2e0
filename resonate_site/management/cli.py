"""What the management commands share: time and JSON arguments, running an operation, output, progress bars."""

import base64
import binascii
import re
import signal
import threading
from argparse import ArgumentTypeError
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import orjson
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from floor.clock import EPOCH, now_ms, utc_datetime
from resonate_site.protocol.envelope import answered

UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d|w)")


# Argument types (argparse `type=`): each returns the value the protocol wants, or says what is wrong.


def duration(text):
    """A length of time in ms: 500ms, 90s, 5m, 1h30m, 2d, 1w, or a bare number of milliseconds."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    parts = DURATION_PART.findall(text)
    if not parts or "".join(n + unit for n, unit in parts) != text:
        raise ArgumentTypeError(f"{text!r} is not a duration (like 500ms, 90s, 5m, 1h30m, 2d)")
    return sum(int(n) * UNIT_MS[unit] for n, unit in parts)


def moment(text):
    """A point in time in ms: a duration ago (2d), a ms timestamp, or an ISO 8601 date or time (UTC unless given)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    if DURATION_PART.match(text):
        return now_ms() - duration(text)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ArgumentTypeError(
            f"{text!r} is not a time (a duration ago like 2d, a ms timestamp, or an ISO date like 2026-01-31)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return (parsed - EPOCH) // timedelta(milliseconds=1)


def json_value(text):
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as error:
        raise ArgumentTypeError(f"not valid JSON ({error}): {text!r}") from None


def json_object(text):
    value = json_value(text)
    if not isinstance(value, dict):
        raise ArgumentTypeError(f"must be a JSON object, got {text!r}")
    return value


def json_array(text):
    value = json_value(text)
    if not isinstance(value, list):
        raise ArgumentTypeError(f"must be a JSON array, got {text!r}")
    return value


def positive(text):
    if not text.isdigit() or int(text) < 1:
        raise ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return int(text)


# Payloads: the SDKs put base64 of JSON in param.data and value.data.


def encode_data(value):
    return base64.b64encode(orjson.dumps(value)).decode()


def decode_data(text):
    """The JSON value inside base64 `data`, or the text itself when it is not base64 of JSON."""
    try:
        return orjson.loads(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError, TypeError):
        return text


def payload(value):
    """param/value data for a `--data JSON` argument: {} when not given."""
    return {} if value is None else {"data": encode_data(value)}


# Running operations.


def call(kind, data, now=None):
    """Run one protocol operation (envelope.perform, one transaction); its reply data, or a CommandError."""
    status, reply = answered(kind, data, now)
    if status >= 400:
        about = f": {data['id']}" if "id" in data else ""
        raise CommandError(f"{reply}{about} ({kind} answered {status})")
    return reply


@contextmanager
def stopped_by_signals():
    """A `stopping()` that turns true on SIGTERM or SIGINT, so a loop finishes what it is doing and stops cleanly."""
    stop = threading.Event()
    previous = {signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop.is_set
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# Output.


def plural(n, noun):
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def iso(ms):
    at = utc_datetime(ms)
    return "never" if at is None else at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def shown(key, value):
    """One field of a record for people: times also in ISO 8601, base64 data decoded."""
    if key.endswith("At") and isinstance(value, int):
        return f"{iso(value)} ({value})"
    if isinstance(value, dict) and isinstance(value.get("data"), str):
        value = {**value, "data": decode_data(value["data"])}
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    return str(value)


def record_lines(record):
    width = max(len(key) for key in record)
    return [f"{key:<{width}}  {shown(key, value)}" for key, value in record.items()]


def cell(key, value):
    return iso(value) if key.endswith("At") and isinstance(value, int) else shown(key, value)


def table_lines(rows, columns):
    """Records as aligned columns, a header line first."""
    cells = [[cell(c, row[c]) if c in row else "" for c in columns] for row in rows]
    widths = [max([len(c), *(len(line[n]) for line in cells)]) for n, c in enumerate(columns)]
    lines = [columns, *cells]
    return ["  ".join(text.ljust(w) for text, w in zip(line, widths, strict=True)).rstrip() for line in lines]


class ResonateCommand(BaseCommand):
    """A command with `--json` output on stdout and tqdm progress bars on stderr."""

    def add_output_arguments(self, parser, progress=False):
        parser.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")
        if progress:
            parser.add_argument(
                "--progress", action="store_true", help="show a progress bar even when stderr is not a terminal"
            )

    def subcommand(self, actions, name, help, progress=False):
        parser = actions.add_parser(name, help=help, description=help)
        self.add_output_arguments(parser, progress)
        return parser

    def write_json(self, value):
        self.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())

    def write_lines(self, lines):
        for line in lines:
            self.stdout.write(line)

    def notice(self, text):
        self.stderr.write(self.style.WARNING(text))

    def progress(self, options, **kwargs):
        """A tqdm bar on stderr, shown when stderr is a terminal or with --progress."""
        visible = options.get("progress") or self.stderr.isatty()
        # The raw stream: tqdm redraws with "\r", and OutputWrapper would end every write with a newline.
        return tqdm(file=self.stderr._out, disable=not visible, **kwargs)
