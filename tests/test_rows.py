"""floor.rows.prepare: the parameters the hot statements send are the ones Django's get_db_prep_save gives."""

import asyncio
import functools
import json
import threading

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import connection, connections, models
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from floor import rows

PROTOCOL_APPS = ("promises", "tasks", "outbox", "schedules")
# The members of the protocol's choices (str and int subclasses), which the hot paths store as they are.
CHOICES = [
    member
    for app in PROTOCOL_APPS
    for choices in vars(apps.get_app_config(app).models_module).values()
    if isinstance(choices, type) and issubclass(choices, models.Choices) and choices.__module__.startswith(app)
    for member in choices
]
FIELDS = [
    field
    for app in PROTOCOL_APPS
    for model in apps.get_app_config(app).get_models()
    for field in model._meta.concrete_fields
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


def values_for(field):
    """What the server stores in this field, and a few values of other types (they take Django's own path)."""
    own = field.target_field if isinstance(field, models.ForeignKey) else field
    if isinstance(own, models.JSONField):
        typical = json_values
    elif isinstance(own, models.BooleanField):
        typical = st.booleans()
    elif isinstance(own, models.IntegerField):
        typical = st.integers(min_value=-(2**63), max_value=2**63 - 1)
    else:
        typical = st.text()
    others = st.none() | st.integers(min_value=0, max_value=9) | st.booleans() | st.text(max_size=3)
    return typical | others | st.sampled_from(CHOICES)


def comparable(param, field):
    """A parameter as what it stores: a jsonb wrapper by the JSON it sends, JSON text by the value it reads back as
    (rows writes orjson's text, Django the json module's, with spaces), anything else by type and value."""
    from psycopg.types.json import Jsonb
    from psycopg.types.numeric import Int2, Int4, Int8

    if isinstance(param, Jsonb):
        text = (param.dumps or json.dumps)(param.obj)
        return "json", json.loads(text)
    if isinstance(field, models.JSONField) and isinstance(param, str):
        return "json", json.loads(param)
    if isinstance(param, Int8 | Int4 | Int2):  # Django's wrapper of an integer column's type: rows binds a bigint
        return int, int(param)
    return type(param), param


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_prepare_gives_what_get_db_prep_save_gives_for_every_field_of_the_protocols_models(data):
    assert len(FIELDS) > 30
    assert {type(member).__name__ for member in CHOICES} >= {"PromiseState", "TaskState", "TimeoutKind"}
    for field in FIELDS:
        value = data.draw(values_for(field), label=f"{field.model.__name__}.{field.name}")
        try:
            expected = comparable(field.get_db_prep_save(value, connection), field)
        except (TypeError, ValueError, ValidationError) as error:  # Django refuses it: so must prepare
            with pytest.raises(type(error)):
                rows.prepare(field, value, connection)
            continue
        assert comparable(rows.prepare(field, value, connection), field) == expected, (field, value)


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_the_parameters_of_a_row_are_what_get_db_prep_save_gives_for_each_of_its_fields(data):
    """rows.row_params (an INSERT's parameters) reads every field of a row at once, and prepares only the values
    whose type a preparer would not pass unchanged: the same parameters as preparing each field."""
    for model in {field.model for field in FIELDS}:
        instance = model()
        fields = rows._fields(model)[0]
        for field in fields:
            setattr(instance, field.attname, data.draw(values_for(field), label=f"{model.__name__}.{field.name}"))
        try:
            expected = [
                comparable(field.get_db_prep_save(getattr(instance, field.attname), connection), field)
                for field in fields
            ]
        except (TypeError, ValueError, ValidationError) as error:
            with pytest.raises(type(error)):
                rows.row_params(instance, connection)
            continue
        params = rows.row_params(instance, connection)
        assert [comparable(param, field) for param, field in zip(params, fields, strict=True)] == expected


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    value=st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",))),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=5),
                inner,
                max_size=3,
            )
        ),
        max_leaves=8,
    )
)
def test_a_json_column_reads_back_as_the_orm_reads_it(value):
    """rows reads JSON columns with orjson (and the field's own converter for what orjson refuses, such as
    integers past 64 bits); the ORM reads them with the json module. Both give the same objects."""
    from promises.models import Promise

    Promise.objects.update_or_create(id="j", defaults={"timeout_at": 1, "created_at": 0, "param": {"v": value}})
    read = rows.fetch(Promise, "j")

    assert json.dumps(read.param, sort_keys=True) == json.dumps(Promise.objects.get(id="j").param, sort_keys=True)


MODELS = [model for app in PROTOCOL_APPS for model in apps.get_app_config(app).get_models()]


def instance_state(instance, related=None):
    """What an instance holds: its attributes, its _state, and what it caches (a related instance by the keyword it
    was given under); with `related` ({keyword: related instance}), what each of those holds too."""
    roles = {id(instance): "the instance"} | {id(v): name for name, v in (related or {}).items()}

    def cached(model_instance):
        return {k: roles.get(id(v), id(v)) for k, v in model_instance._state.fields_cache.items()}

    attributes = {k: v for k, v in instance.__dict__.items() if k != "_state"}
    others = {name: (v._state.db, v._state.adding, cached(v)) for name, v in (related or {}).items()}
    return attributes, cached(instance), instance._state.adding, instance._state.db, others


@pytest.mark.parametrize("model", MODELS, ids=lambda model: model.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_new_builds_what_the_models_own_constructor_builds(model, data):
    """rows.new(model, **values) against model(**values): every protocol model, any subset of its fields given, a
    relation given as its key or as a related instance (new, or read from a database: then both refuse a relation
    across two databases alike). Each builds with related instances of its own, equal to the other's, as a relation
    changes the related instance (its database, its cache of the instance)."""
    fields = [field for field in model._meta.concrete_fields]
    chosen = data.draw(st.lists(st.sampled_from(fields), unique=True, max_size=len(fields)))
    values, relations = {}, {}
    for field in chosen:
        if isinstance(field, models.ForeignKey):  # given as the related instance, or as its key
            key, db = data.draw(st.text(min_size=1, max_size=4)), data.draw(st.sampled_from([None, "default", "other"]))
            if data.draw(st.booleans()):
                relations[field.name] = (field.related_model, key, db)
            else:
                values[field.attname] = key
        else:
            values[field.attname] = data.draw(values_for(field))

    def build(construct):
        related = {}
        for name, (related_model, key, db) in relations.items():
            related[name] = related_model(pk=key)
            related[name]._state.db = db
        try:
            return instance_state(construct(**values, **related), related)
        except ValueError as refused:  # the database router refuses the relation
            return "refused", str(refused)

    assert build(functools.partial(rows.new, model)) == build(model)


RELATIONS = [
    (model, field) for model in MODELS for field in model._meta.concrete_fields if isinstance(field, models.ForeignKey)
]
RELATION_IDS = [f"{model.__name__}.{field.name}" for model, field in RELATIONS]


@pytest.mark.parametrize(("model", "field"), RELATIONS, ids=RELATION_IDS)
def test_new_sets_a_relation_and_its_key_given_together_as_the_models_own_constructor_does(model, field):
    """Model.__init__ sets the relation first, then the key given beside it (which drops the cached instance)."""

    def build(construct):
        related = field.related_model(pk="related")
        return instance_state(construct(**{field.name: related, field.attname: "other"}), {field.name: related})

    assert build(functools.partial(rows.new, model)) == build(model)


class Refusing:
    """A database router that refuses every relation."""

    def allow_relation(self, obj1, obj2, **hints):
        return False


@pytest.mark.parametrize(("model", "field"), RELATIONS, ids=RELATION_IDS)
def test_new_leaves_a_relation_to_the_database_router_when_there_is_one(model, field):
    from django.test import override_settings

    with override_settings(DATABASE_ROUTERS=[f"{__name__}.Refusing"]):
        for construct in (functools.partial(rows.new, model), model):
            with pytest.raises(ValueError, match="router prevents this relation"):
                construct(**{field.name: field.related_model(pk="related")})


@pytest.mark.parametrize("model", MODELS, ids=lambda model: model.__name__)
def test_new_gives_each_instance_its_own_default_objects(model):
    first, second = rows.new(model), rows.new(model)
    for field in model._meta.concrete_fields:
        if field.has_default() and callable(field.default):
            assert first.__dict__[field.attname] is not second.__dict__[field.attname]


@pytest.mark.parametrize("signal", ["pre_init", "post_init"])
def test_new_sends_a_models_init_signals_once_someone_listens(signal):
    from django.db.models import signals

    from promises.models import Promise

    heard = []

    def listener(sender, **kwargs):
        heard.append(sender)

    getattr(signals, signal).connect(listener, sender=Promise)
    try:
        rows.new(Promise, id="p")
    finally:
        getattr(signals, signal).disconnect(listener, sender=Promise)
    assert heard == [Promise]
    rows.new(Promise, id="q")
    assert heard == [Promise]


def test_new_refuses_what_the_models_own_constructor_refuses():
    from promises.models import Promise

    with pytest.raises(TypeError, match="unexpected keyword"):
        rows.new(Promise, id="p", colour="red")


@pytest.mark.django_db
def test_a_row_read_by_the_hot_paths_is_the_instance_the_orm_reads():
    from promises.models import Promise
    from tasks.models import Task

    Promise.objects.create(id="r", timeout_at=1, created_at=0, tags={"resonate:target": "poll://any@g"})
    Task.objects.create(promise_id="r", version=3, state="pending")

    for model, pk in ((Promise, "r"), (Task, "r")):
        hot, orm = rows.fetch(model, pk), model.objects.get(pk=pk)
        assert instance_state(hot) == instance_state(orm)


@pytest.mark.postgres  # lock_then_write is PostgreSQL's one-string path
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("locked", [True, False])
def test_lock_then_write_writes_only_when_its_lock_found_the_row(locked):
    """A row inserted by a transaction that commits after the lock's statement began is not locked, but the writes'
    later snapshot sees it: what a condition read of it may change before the writes. Here the condition finds a
    row whatever the lock found, as it would for such a row; the writes are made only when the lock found its row."""
    from promises.models import Promise

    Promise.objects.create(id="other", state="pending", timeout_at=10**13, created_at=0)
    if locked:
        Promise.objects.create(id="p", state="pending", timeout_at=10**13, created_at=0)
    anything = ('SELECT 1 FROM "promises_promise" WHERE "id" = %s', ["other"])
    write = rows.updating([rows.new(Promise, id="other", state="resolved")], "state")

    found, written = rows.lock_then_write(Promise, "p", anything, [write])

    assert [promise.id for promise in found] == (["p"] if locked else [])
    assert written is locked
    assert Promise.objects.get(id="other").state == ("resolved" if locked else "pending")


def test_connection_of_is_the_connection_django_gives_the_thread():
    """rows.connection_of keeps each thread's connection object as `connections` gives it: the same one in a thread,
    another in another thread, and, where an event loop runs (async code: a connection per task), Django's own."""
    mine = rows.connection_of()
    assert mine is connections["default"]
    assert rows.connection_of() is mine
    seen = []
    other = threading.Thread(target=lambda: seen.extend([rows.connection_of(), connections["default"]]))
    other.start()
    other.join()
    assert seen[0] is seen[1]
    assert seen[0] is not mine

    async def in_a_loop():
        return rows.connection_of(), connections["default"]

    ours, djangos = asyncio.run(in_a_loop())
    assert ours is djangos
    assert ours is not mine
