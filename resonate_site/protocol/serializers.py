"""Request shapes of every protocol operation: the `data` of each envelope kind, decoded strictly.

Validated data uses the handlers' snake_case names (`timeoutAt` → `timeout_at`). Optional fields
that are absent or null take their defaults.
"""

import functools

from rest_framework import serializers

from promises.models import PromiseState
from resonate_site.protocol.compiled import compile_shape
from resonate_site.protocol.fields import Address, Anything, Id, Int, StrictString, StringMap, Tags
from schedules.cron import cron_error
from tasks.models import TaskState

SETTLE_STATES = [PromiseState.RESOLVED, PromiseState.REJECTED, PromiseState.REJECTED_CANCELED]


def decode(request, data):
    """The validated data of one request shape, or DRF's ValidationError with the same errors is_valid() gives.

    The shape's compiled plan first (resonate_site/protocol/compiled.py), which only accepts; whatever it does
    not accept goes through DRF's own validation (run_validation, exactly what is_valid() runs), which accepts
    it or explains why not. Both run on one instance of each shape kept for the life of the process: building
    a serializer deep-copies all its fields, which was 80% of validating a promise.create (81 -> 15 us).
    Validating keeps no state on the instance, so threads can share it.
    """
    accept, prototype = _shape(request)
    if accept is not None:
        try:
            return accept(data)
        except Exception:  # not accepted as it stands: DRF decides, and explains
            pass
    return dict(prototype.run_validation(data))


@functools.cache
def _shape(request):
    prototype = request()
    return compile_shape(prototype), prototype


class Strict(serializers.Serializer):
    """A serializer whose optional fields treat an explicit null like an absent field."""

    nulls_are_absent = True  # what the compiled plans model (resonate_site/protocol/compiled.py)

    def to_internal_value(self, data):
        if isinstance(data, dict):
            data = {
                k: v for k, v in data.items() if not (v is None and k in self.fields and not self.fields[k].required)
            }
        return super().to_internal_value(data)


class ValueData(Strict):
    headers = StringMap(required=False)
    data = StrictString(required=False)


def value_field(**kwargs):
    return ValueData(required=False, default=dict, **kwargs)


def tags_field(**kwargs):
    return Tags(required=False, default=dict, **kwargs)


class Limit(Int):
    def __init__(self, default, **kwargs):
        super().__init__(minimum=1, maximum=1000, required=False, default=default, **kwargs)


class ById(Strict):
    id = Id()


# promise.*


class PromiseCreate(Strict):
    id = Id()
    timeoutAt = Int(source="timeout_at")
    param = value_field()
    tags = tags_field()


class PromiseSettle(Strict):
    id = Id()
    state = serializers.ChoiceField(SETTLE_STATES)
    value = value_field()


class PromiseRegisterCallback(Strict):
    awaited = Id()
    awaiter = Id()


class PromiseRegisterListener(Strict):
    awaited = Id()
    address = Address()


class PromiseSearch(Strict):
    state = serializers.ChoiceField(PromiseState.values, required=False)
    tags = StringMap(required=False, default=dict)
    limit = Limit(default=100)
    cursor = StrictString(required=False)


# task.*


def action(data_serializer, kinds=None):
    """A nested request envelope {kind, head, data} whose data has the given shape."""

    class Action(Strict):
        kind = serializers.ChoiceField(kinds) if kinds else StrictString()
        head = Anything(required=False)
        data = data_serializer

    return Action()


class TaskCreate(Strict):
    pid = Id()
    ttl = Int()
    action = action(PromiseCreate())


class TaskAcquire(Strict):
    id = Id()
    version = Int()
    pid = Id()
    ttl = Int()


class TaskFence(Strict):
    id = Id()
    version = Int()
    action = action(Anything(), kinds=["promise.create", "promise.settle"])

    def validate_action(self, action):
        inner = PromiseCreate if action["kind"] == "promise.create" else PromiseSettle
        try:
            data = decode(inner, action["data"])
        except serializers.ValidationError as error:
            raise serializers.ValidationError({"data": error.detail}) from None
        return {**action, "data": data}


class TaskRef(Strict):
    id = Id()
    version = Int()


class TaskHeartbeat(Strict):
    pid = Id()
    tasks = TaskRef(many=True)


class TaskSuspend(Strict):
    id = Id()
    version = Int()
    actions = serializers.ListField(child=action(PromiseRegisterCallback()), allow_empty=True)


class TaskFulfill(Strict):
    id = Id()
    version = Int()
    action = action(PromiseSettle())


class TaskRelease(Strict):
    id = Id()
    version = Int()


class TaskSearch(Strict):
    state = serializers.ChoiceField(TaskState.values, required=False)
    limit = Limit(default=100)
    cursor = StrictString(required=False)


# schedule.*


class Cron(StrictString):
    def to_internal_value(self, data):
        data = super().to_internal_value(data)
        problem = cron_error(data)
        if problem:
            raise serializers.ValidationError(f"invalid cron expression {data!r}: {problem}")
        return data


class ScheduleCreate(Strict):
    id = Id()
    cron = Cron()
    promiseId = Id(source="promise_id")
    promiseTimeout = Int(source="promise_timeout")
    promiseParam = value_field(source="promise_param")
    promiseTags = tags_field(source="promise_tags")


class ScheduleSearch(Strict):
    tags = StringMap(required=False, default=dict)
    limit = Limit(default=10)
    cursor = StrictString(required=False)


# debug.*


class DebugTick(Strict):
    time = Int()


class Empty(Strict):
    pass
