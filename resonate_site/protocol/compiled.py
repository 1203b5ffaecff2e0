"""A request shape's validation compiled for the requests it accepts; DRF's own for the rest.

DRF validates a field through half a dozen calls (get_value, validate_empty_values, run_validation,
to_internal_value, run_validators, set_value) and builds an OrderedDict and an errors dict for every
serializer: 8-12 µs for a promise.get's one id, more for an envelope with nested actions. Compiled, a shape
is a plan of its fields, each checked by its own to_internal_value (where the protocol's rules live,
resonate_site/protocol/fields.py), in the order and with the defaults DRF uses.

The plan only accepts. Whatever it does not accept (a missing field, a wrong type, anything a field refuses)
goes through DRF's validation as before, which then accepts it or explains why not: the error messages are
DRF's, exactly. `tests/test_compiled_validation.py` checks, over generated requests of every shape, that the
plan accepts exactly what DRF accepts and returns the same data.

A shape with anything the plan does not model (a serializer-level validate(), validators, nested sources,
a field kind not listed in `_check`) is not compiled: DRF validates it, always.
"""

from rest_framework import serializers
from rest_framework.fields import empty

FIELD_RUN, FIELD_EMPTY = serializers.Field.run_validation, serializers.Field.validate_empty_values
SERIALIZER_RUN = serializers.Serializer.run_validation


class Declined(Exception):
    """The plan does not accept this input: DRF's validation decides, and explains."""


def compile_shape(serializer):
    """accept(data) -> validated dict, raising (anything) when DRF must decide; None if it cannot be compiled."""
    plan = _plan(serializer)
    if plan is None:
        return None

    def accept(data):
        if type(data) is not dict:
            raise Declined
        return plan(data)

    return accept


NO_DEFAULT = object()


def _plan(serializer):
    """The checks of one serializer's fields, or None when something in it is not modelled."""
    shape = type(serializer)
    if not getattr(shape, "nulls_are_absent", False) or serializer.validators:
        return None  # only the Strict shapes (resonate_site/protocol/serializers.py) are modelled
    if shape.validate is not serializers.Serializer.validate or shape.run_validation is not SERIALIZER_RUN:
        return None
    steps = []
    for name, field in serializer.fields.items():
        if field.read_only or len(field.source_attrs) != 1:
            return None
        check = _check(field)
        if check is None:
            return None
        method = getattr(serializer, f"validate_{name}", None)
        default = NO_DEFAULT if field.default is empty else field.default
        steps.append((name, field.source_attrs[0], check, field.required, default, method))

    def plan(data):
        validated = {}
        for name, source, check, required, default, method in steps:
            value = data.get(name)
            if value is None:  # absent, or null: the Strict shapes read an optional field's null as absent
                if required:
                    raise Declined
                if default is NO_DEFAULT:
                    continue
                value = default() if callable(default) else default
            else:
                value = check(value)
            validated[source] = value if method is None else method(value)
        return validated

    return plan


def _check(field):
    """The function that accepts one present, non-null value of this field, or None if it is not modelled."""
    if field.validators:
        return None
    if isinstance(field, (serializers.ListSerializer, serializers.ListField)):
        return _each(
            field.child, field.allow_empty, getattr(field, "min_length", None), getattr(field, "max_length", None)
        )
    if isinstance(field, serializers.Serializer):
        plan = _plan(field)
        return None if plan is None else _mapping(plan)
    kind = type(field)
    if kind.run_validation is not FIELD_RUN or kind.validate_empty_values is not FIELD_EMPTY:
        return None  # DRF's own CharField, IntegerField, … do more than to_internal_value
    if kind.to_internal_value is serializers.Field.to_internal_value:
        return None
    return field.to_internal_value  # the protocol's own fields (resonate_site/protocol/fields.py), DRF's choices


def _mapping(plan):
    def check(value):
        if type(value) is not dict:
            raise Declined
        return plan(value)

    return check


def _each(child, allow_empty, min_length, max_length):
    if min_length is not None or max_length is not None or child.validators:
        return None
    check = _check(child)
    if check is None:
        return None

    def each(value):
        if type(value) is not list or (not allow_empty and not value):
            raise Declined
        validated = []
        for item in value:
            if item is None:  # DRF: "This field may not be null."
                raise Declined
            validated.append(check(item))
        return validated

    return each
