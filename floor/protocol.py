"""Vocabulary shared by every handler: replies, reserved tags, time arithmetic and the id column."""

import functools
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from django.db import connections, models
from django.db.models.expressions import RawSQL

I64_MAX = 2**63 - 1

TARGET = "resonate:target"
TIMER = "resonate:timer"
EXTERNAL = "resonate:external"
DELAY = "resonate:delay"
BRANCH = "resonate:branch"


class Reply(NamedTuple):
    """What a handler answers: a protocol status and the response data (an error text for 4xx)."""

    status: int
    data: Any


def ok(**data):
    return Reply(200, data)


PROMISE_NOT_FOUND = Reply(404, "Promise not found")
TASK_NOT_FOUND = Reply(404, "Task not found")
SCHEDULE_NOT_FOUND = Reply(404, "Schedule not found")


def later(now, delta):
    """now + delta, saturating at the largest storable time (times are signed 64-bit ms)."""
    return min(now + delta, I64_MAX)


class IdField(models.TextField):
    """A text id compared byte-wise, so cursors page in a stable order (COLLATE "C" on PostgreSQL)."""

    def db_parameters(self, connection):
        params = super().db_parameters(connection)
        if connection.vendor == "postgresql":
            params["collation"] = "C"
        return params


PROTOCOL_VERSION = "2026-04-01"


def page(queryset, cursor, limit):
    """One page of a search, ordered by id: (rows, cursor of the next page or None). The cursor is the last id."""
    if cursor is not None:
        queryset = queryset.filter(pk__gt=cursor)
    rows = list(queryset.order_by("pk")[: limit + 1])
    if len(rows) > limit:
        return rows[:limit], rows[limit - 1].pk
    return rows, None


def tagged(queryset, field, tags):
    """Rows whose JSON `field` holds every given tag with exactly that value."""
    if not tags:
        return queryset
    if connections[queryset.db].vendor == "postgresql":
        return queryset.filter(**{f"{field}__contains": tags})  # JSONB containment
    # SQLite: match keys literally (a JSON path would read "0" as an array index, or choke on quotes).
    column = f'"{queryset.model._meta.db_table}"."{queryset.model._meta.get_field(field).column}"'
    has_tag = f"EXISTS (SELECT 1 FROM json_each({column}) AS tag WHERE tag.key = %s AND tag.value = %s)"
    for key, value in tags.items():
        queryset = queryset.filter(RawSQL(has_tag, (key, value), output_field=models.BooleanField()))
    return queryset


def searched(key, records, cursor):
    """A search reply: {key: records} plus the cursor only when there is a next page."""
    data = {key: records}
    if cursor is not None:
        data["cursor"] = cursor
    return Reply(200, data)


CASTS = ("uni", "any")  # poll://uni@group/id reaches that listener; poll://any@group[/id] any member of the group


def poll_parts(address):
    """(cast, group, id or None) of a poll:// address as written, unchecked (cast "" without an "@"); None when
    it is not a URL or its scheme is not poll."""
    try:
        url = urlsplit(address)
    except ValueError:
        return None
    if url.scheme != "poll":
        return None
    cast, at, group = url.netloc.partition("@")
    return (cast if at else ""), group, url.path.lstrip("/") or None


@functools.lru_cache(maxsize=1024)  # a create's address is parsed four times on its way (its claim, its delivery)
def parse_poll_address(address):
    """poll://uni|any@group[/id] → (cast, group, id or None); None if it is not a poll address."""
    parts = poll_parts(address)
    if parts is None or parts[0] not in CASTS or not parts[1]:
        return None
    return parts
