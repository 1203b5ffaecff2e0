"""The compiled plans (resonate_site/protocol/compiled.py) accept exactly what DRF's validation accepts, with the
same data; whatever they decline, DRF decides. Requests are generated from each shape's own fields: mostly
valid, each field at times absent, null, of another JSON type or out of range."""

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from resonate_site.protocol import fields as f
from resonate_site.protocol.compiled import compile_shape
from resonate_site.protocol.dispatch import OPERATIONS
from resonate_site.protocol.serializers import Cron, PromiseCreate, PromiseSettle, decode

ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**65), 2**65),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
)
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=6)
ADDRESSES = st.sampled_from(["poll://any@g", "poll://uni@g/w", "http://h/x", "https://h"])
BAD_ADDRESSES = st.sampled_from(["poll://g", "ftp://x", "http://", "poll://any@", "\x00"])
TAGS = st.dictionaries(st.sampled_from(["k", "resonate:target", "resonate:delay"]) | TEXT, ADDRESSES | TEXT, max_size=3)
BAD_TAGS = st.sampled_from(
    [{"resonate:target": "ftp://x"}, {"resonate:delay": "x"}, {"resonate:delay": "9" * 20}, {"k": 1}, {"k\x00": "v"}]
)


def mostly(valid, *edges):
    """Mostly what a field accepts; now and then an edge of it, or any other JSON."""
    return st.one_of(*[valid] * 6, *edges, ODD)


def field_values(field):
    """Values for one field: mostly what it accepts, sometimes what it does not."""
    if isinstance(field, serializers.ListSerializer | serializers.ListField):
        return mostly(st.lists(field_values(field.child), max_size=3), st.lists(st.none(), min_size=1, max_size=1))
    if isinstance(field, serializers.Serializer):
        return mostly(shape_values(field))
    if isinstance(field, serializers.ChoiceField):
        return mostly(st.sampled_from(list(field.choices)), st.just(""))
    if isinstance(field, f.Int):
        edges = st.sampled_from([field.minimum - 1, field.maximum + 1, True, 1.0])
        return mostly(st.integers(field.minimum, min(field.maximum, 2**64)), edges)
    if isinstance(field, Cron):
        return mostly(st.sampled_from(["* * * * *", "0 * * * *"]), st.sampled_from(["61 * * * *", "x", ""]))
    if isinstance(field, f.Address):
        return mostly(ADDRESSES, BAD_ADDRESSES)
    if isinstance(field, f.Tags):
        return mostly(TAGS, BAD_TAGS)
    if isinstance(field, f.StringMap):
        return mostly(st.dictionaries(TEXT, TEXT, max_size=3), st.just({"k": 1}), st.just({"k": "\x00"}))
    if isinstance(field, f.StrictString):
        return mostly(TEXT, st.sampled_from(["", "\x00", "a" * 1025, "\U0001f600" * 300]))
    if isinstance(field, f.Anything):  # an action's head, or a fence's action data: shaped as either action's
        return mostly(shape_values(PromiseCreate()) | shape_values(PromiseSettle()))
    raise AssertionError(f"no values for {field!r}: add them, so that its shape is tested")


def shape_values(serializer):
    present = {name: field_values(field) for name, field in serializer.fields.items()}
    return st.fixed_dictionaries(present) | st.fixed_dictionaries(present) | st.fixed_dictionaries({}, optional=present)


def drf(prototype, data):
    try:
        return dict(prototype.run_validation(data))
    except ValidationError:
        return None


def plain(value):
    """JSON with its types (True is not 1), keys sorted: OrderedDict and dict compare equal."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str)


SHAPES = sorted({operation.request for operation in OPERATIONS.values()}, key=lambda shape: shape.__name__)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: shape.__name__)
def test_a_compiled_plan_accepts_what_drf_accepts_and_nothing_else(shape):
    prototype = shape()
    accept = compile_shape(prototype)
    assert accept is not None, f"{shape.__name__} is not compiled"

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=mostly(shape_values(prototype)))
    def check(data):
        expected = drf(prototype, data)
        try:
            got = accept(data)
        except Exception:
            got = None
        if expected is None:
            assert got is None, f"the plan accepted what DRF refuses: {data!r}"
        else:
            assert got is not None, f"the plan declined what DRF accepts: {data!r}"
            assert plain(got) == plain(expected), data
        assert plain(drf(prototype, data)) == plain(expected)  # validating left no state behind

    check()


def test_decode_gives_drfs_own_errors_for_what_the_plan_declines():
    with pytest.raises(ValidationError) as refused:
        decode(OPERATIONS["promise.create"].request, {"id": "", "timeoutAt": True})
    assert refused.value.detail == {"id": ["must not be empty"], "timeoutAt": ["must be an integer"]}


def test_a_shape_with_what_the_plan_does_not_model_is_left_to_drf():
    class WithValidate(serializers.Serializer):
        nulls_are_absent = True
        id = f.Id()

        def validate(self, attrs):
            return attrs

    class NotStrict(serializers.Serializer):
        id = f.Id()

    class WithCharField(serializers.Serializer):
        nulls_are_absent = True
        name = serializers.CharField()

    assert compile_shape(WithValidate()) is None
    assert compile_shape(NotStrict()) is None
    assert compile_shape(WithCharField()) is None
