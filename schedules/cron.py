"""Standard Unix cron in UTC (decision D8): validation, the next occurrence, and promise id templates."""

import re
from datetime import UTC, datetime

from croniter import croniter

from floor.protocol import I64_MAX

NEVER = I64_MAX  # not a whole second, so no cron occurrence can equal it
SHORTHANDS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
FIELD = re.compile(r"^[0-9A-Za-z*,/-]+$")
NAME = re.compile(r"[A-Za-z]+")
NAMES = {
    "JAN",
    "FEB",
    "MAR",
    "APR",
    "MAY",
    "JUN",
    "JUL",
    "AUG",
    "SEP",
    "OCT",
    "NOV",
    "DEC",
    "SUN",
    "MON",
    "TUE",
    "WED",
    "THU",
    "FRI",
    "SAT",
}


def _iterator(cron, start):
    seconds_first = len(cron.split()) == 6
    return croniter(cron, start, second_at_beginning=seconds_first)


def cron_error(cron):
    """Why `cron` is not a standard 5-field (or seconds-first 6-field) expression, or None."""
    if cron.strip().lower() in SHORTHANDS:
        return None
    fields = cron.split()
    if len(fields) not in (5, 6):
        return "expected 5 fields (minute hour day month weekday) or 6 with leading seconds"
    for field in fields:
        names = {n.upper() for n in NAME.findall(field)}
        if not FIELD.match(field) or not names <= NAMES:
            return f"unsupported field {field!r}"
    if not croniter.is_valid(cron, second_at_beginning=len(fields) == 6):
        return "a field is out of range"
    if next_cron(cron, 0) == NEVER:
        return "it never fires"
    return None


def next_cron(cron, after):
    """The first occurrence strictly after `after` (ms), in ms; NEVER if there is none before year 10000."""
    try:
        start = datetime.fromtimestamp(after // 1000, UTC)
        return int(_iterator(cron, start).get_next(float)) * 1000
    except (OverflowError, ValueError, OSError):  # past year 9999, or no such date (e.g. 30 February)
        return NEVER


TEMPLATE = re.compile(r"\{\{\.(id|timestamp)\}\}")


def expand(template, schedule_id, timestamp):
    """The promise id of one occurrence: {{.id}} → the schedule id, {{.timestamp}} → the cron time in ms."""
    values = {"id": schedule_id, "timestamp": str(timestamp)}
    return TEMPLATE.sub(lambda m: values[m.group(1)], template)
