"""Strict DRF fields for the protocol: JSON types are checked, never coerced (decision D3)."""

import functools
from urllib.parse import urlsplit

from rest_framework import serializers

from floor.protocol import BRANCH, CASTS, DELAY, I64_MAX, TARGET, poll_parts

MAX_ID_BYTES = 1024  # ids and addresses are index keys; PostgreSQL caps a btree entry near 2.7 kB


class StrictString(serializers.Field):
    """A JSON string; `allow_empty=False` rejects "", `max_bytes` bounds its UTF-8 length."""

    default_error_messages = {
        "type": "must be a string",
        "empty": "must not be empty",
        "nul": "must not contain NUL characters",
        "long": "must be at most {max_bytes} bytes",
    }

    def __init__(self, allow_empty=True, max_bytes=None, **kwargs):
        self.allow_empty, self.max_bytes = allow_empty, max_bytes
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("type")
        if not data and not self.allow_empty:
            self.fail("empty")
        if "\x00" in data:
            self.fail("nul")
        if self.max_bytes is not None and len(data.encode()) > self.max_bytes:
            self.fail("long", max_bytes=self.max_bytes)
        return data

    def to_representation(self, value):
        return value


class Id(StrictString):
    def __init__(self, **kwargs):
        super().__init__(allow_empty=False, max_bytes=MAX_ID_BYTES, **kwargs)


class Int(serializers.Field):
    """A JSON integer in [minimum, 2^63 - 1]; booleans and floats (even 1.0) are rejected."""

    default_error_messages = {
        "type": "must be an integer",
        "range": "must be between {minimum} and {maximum}",
    }

    def __init__(self, minimum=0, maximum=I64_MAX, **kwargs):
        self.minimum, self.maximum = minimum, maximum
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, int) or isinstance(data, bool):
            self.fail("type")
        if not self.minimum <= data <= self.maximum:
            self.fail("range", minimum=self.minimum, maximum=self.maximum)
        return data

    def to_representation(self, value):
        return value


class StringMap(serializers.Field):
    """A JSON object whose values are all strings (tags, headers)."""

    default_error_messages = {
        "type": "must be an object with string values",
        "nul": "must not contain NUL characters",
    }

    def to_internal_value(self, data):
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            self.fail("type")
        if any("\x00" in k or "\x00" in v for k, v in data.items()):
            self.fail("nul")
        return data

    def to_representation(self, value):
        return value


@functools.lru_cache(maxsize=1024)  # a function of the text alone; a worker group's few addresses come again and again
def address_error(address):
    """Why `address` is not one the server can deliver to, or None if it is fine (decision D3)."""
    try:
        url = urlsplit(address)
    except ValueError:
        return "is not a valid URL"
    if url.scheme and not address.startswith(f"{url.scheme}:"):  # urlsplit lowers it; the specification does not
        return "must be a poll://, http:// or https:// address (its scheme in lower case)"
    if url.scheme in ("http", "https"):
        return None if url.netloc else "needs a host"
    if url.scheme == "poll":
        cast, group, _ = poll_parts(address)
        if cast not in CASTS:
            return "must look like poll://uni@group/id or poll://any@group[/id]"
        return None if group else "needs a group"
    return "must be a poll://, http:// or https:// address"


class Address(StrictString):
    def __init__(self, **kwargs):
        super().__init__(allow_empty=False, max_bytes=MAX_ID_BYTES, **kwargs)

    def to_internal_value(self, data):
        data = super().to_internal_value(data)
        problem = address_error(data)
        if problem:
            raise serializers.ValidationError(f"{data!r} {problem}")
        return data


class Tags(StringMap):
    """Promise tags: reserved tags the server acts on must be usable."""

    def to_internal_value(self, data):
        data = super().to_internal_value(data)
        if TARGET in data:
            problem = address_error(data[TARGET])
            if problem:
                raise serializers.ValidationError(f"{TARGET} {data[TARGET]!r} {problem}")
        if DELAY in data:
            delay = data[DELAY]
            if not (delay.isascii() and delay.isdigit() and len(delay) <= 19 and int(delay) <= I64_MAX):
                raise serializers.ValidationError(f"{DELAY} must be a time in ms (a decimal integer), got {delay!r}")
        if BRANCH in data and len(data[BRANCH].encode()) > MAX_ID_BYTES:
            raise serializers.ValidationError(f"{BRANCH} names a promise id: at most {MAX_ID_BYTES} bytes")
        return data


class Anything(serializers.Field):
    """Any JSON value, null included (e.g. an action's `head`)."""

    def __init__(self, **kwargs):
        super().__init__(allow_null=True, **kwargs)

    def to_internal_value(self, data):
        return data

    def to_representation(self, value):
        return value
