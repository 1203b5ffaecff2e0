"""Shapes of the REST API for its OpenAPI schema: the protocol's request serializers and its records.

Requests are the protocol's own serializers (resonate_site/protocol/serializers.py) less the fields the
URL names; perform() validates them, once, as POST / does. Responses are the protocol's reply data.
"""

from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.utils import OpenApiExample, extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from promises.models import PromiseState
from resonate_site.protocol import serializers as protocol
from resonate_site.protocol.fields import Id, Int, StrictString, StringMap
from tasks.models import TaskState

# How the protocol's serializers and strict fields read in the schema.


class StrictSchema(OpenApiSerializerExtension):
    """A protocol serializer, described by its own docstring only (Strict's is about decoding)."""

    target_class = "resonate_site.protocol.serializers.Strict"
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        schema.pop("description", None)
        if type(self.target).__doc__:  # a class's own docstring: __doc__ is not inherited
            schema["description"] = type(self.target).__doc__
        for name, field in self.target.fields.items():
            if not field.required:  # Strict: null stands for absent
                prop = schema["properties"][name]
                schema["properties"][name] = (
                    {"allOf": [prop], "nullable": True} if "$ref" in prop else {**prop, "nullable": True}
                )
        return schema


class IntSchema(OpenApiSerializerFieldExtension):
    target_class = "resonate_site.protocol.fields.Int"
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "integer", "format": "int64", "minimum": self.target.minimum, "maximum": self.target.maximum}


class StringSchema(OpenApiSerializerFieldExtension):
    target_class = "resonate_site.protocol.fields.StrictString"
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "string"} if self.target.allow_empty else {"type": "string", "minLength": 1}


class StringMapSchema(OpenApiSerializerFieldExtension):
    target_class = "resonate_site.protocol.fields.StringMap"
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "object", "additionalProperties": {"type": "string"}}


# Request bodies: the protocol's, less the id the URL names.

TARGET = {"resonate:target": "poll://any@default"}


def example(summary, **value):
    return extend_schema_serializer(examples=[OpenApiExample(summary, value=value)])


@example(
    "A workflow promise offered to the default group",
    id="order-42",
    timeoutAt=4102444800000,
    param={"data": "eyJmdW5jIjoiZiJ9"},
    tags=TARGET,
)
class PromiseCreateRequest(protocol.PromiseCreate):
    """A promise; with a resonate:target tag it gets a task, offered to that address."""


@example("Resolve with a value", state="resolved", value={"data": "NDI="})
class SettleRequest(protocol.PromiseSettle):
    id = None


@example("Resume order-42 when this promise settles", awaiter="order-42")
class CallbackRequest(protocol.PromiseRegisterCallback):
    """The awaiter: a promise with a resonate:target, whose task resumes when this promise settles."""

    awaited = None


@example("Unblock worker w-7 of the default group", address="poll://uni@default/w-7")
class ListenerRequest(protocol.PromiseRegisterListener):
    """Where the unblock message goes: poll://uni@group/id, poll://any@group[/id] or http(s)://…"""

    awaited = None


@example("Worker w-7 takes version 0 for a minute", version=0, pid="w-7", ttl=60000)
class AcquireRequest(protocol.TaskAcquire):
    """The version the task's execute message carried, the acquiring process and its lease in ms."""

    id = None


@example("Give version 1 back", version=1)
class ReleaseRequest(protocol.TaskRelease):
    id = None


@example("Resolve the promise of the task at version 1", version=1, state="resolved", value={"data": "NDI="})
class FulfillRequest(protocol.PromiseSettle):
    """task.fulfill's settle action, flattened: the task's version and the state and value to settle with."""

    id = None
    version = Int()


@example(
    "Every night at two UTC",
    id="nightly",
    cron="0 2 * * *",
    promiseId="{{.id}}.{{.timestamp}}",
    promiseTimeout=3600000,
    promiseTags=TARGET,
)
class ScheduleCreateRequest(protocol.ScheduleCreate):
    """A schedule: standard cron in UTC (5 fields, or 6 with leading seconds) and the promises it creates."""


# Records and replies, as the protocol returns them: optional fields are omitted, never null.
# (State components named here: three unnamed sets of choices called `state` would collide.)


@extend_schema_field({"type": "string", "enum": PromiseState.values}, component_name="PromiseState")
class PromiseStateField(serializers.CharField):
    pass


@extend_schema_field({"type": "string", "enum": TaskState.values}, component_name="TaskState")
class TaskStateField(serializers.CharField):
    pass


class Value(serializers.Serializer):
    headers = StringMap(required=False)
    data = StrictString(required=False)


class PromiseRecord(serializers.Serializer):
    id = Id()
    state = PromiseStateField()
    param = Value()
    value = Value()
    tags = StringMap()
    timeoutAt = Int()
    createdAt = Int()
    settledAt = Int(required=False)


class TaskRecord(serializers.Serializer):
    id = Id()
    state = TaskStateField()
    version = Int()
    resumes = Int()
    ttl = Int(required=False)
    pid = Id(required=False)


class ScheduleRecord(serializers.Serializer):
    id = Id()
    cron = StrictString()
    promiseId = Id()
    promiseTimeout = Int()
    promiseParam = Value()
    promiseTags = StringMap()
    createdAt = Int()
    nextRunAt = Int()
    lastRunAt = Int(required=False)


class PromiseReply(serializers.Serializer):
    promise = PromiseRecord()


@extend_schema_serializer(many=False)
class PromisePage(serializers.Serializer):
    promises = PromiseRecord(many=True)
    cursor = StrictString(required=False, help_text="Present when there is a next page: pass it as `cursor`.")


class TaskReply(serializers.Serializer):
    task = TaskRecord()


class TaskAcquired(serializers.Serializer):
    task = TaskRecord()
    promise = PromiseRecord()
    preload = PromiseRecord(many=True)


@extend_schema_serializer(many=False)
class TaskPage(serializers.Serializer):
    tasks = TaskRecord(many=True)
    cursor = StrictString(required=False, help_text="Present when there is a next page: pass it as `cursor`.")


class ScheduleReply(serializers.Serializer):
    schedule = ScheduleRecord()


@extend_schema_serializer(many=False)
class SchedulePage(serializers.Serializer):
    schedules = ScheduleRecord(many=True)
    cursor = StrictString(required=False, help_text="Present when there is a next page: pass it as `cursor`.")


DONE = {"type": "object", "maxProperties": 0, "description": "`{}`: the status says it all."}


class Error(serializers.Serializer):
    error = serializers.CharField(help_text="What was wrong, as the protocol says it.")
