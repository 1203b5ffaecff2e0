"""outbox.delivery.drop_unheard: where every join is heard (the embedded mode), a poll:// message whose grace has
ended, in a group with no stream, is dropped by one statement of the delivery pass, as its last attempt would drop
it. The attempts' own path is the reference: both must leave every message as the other does."""

import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from floor.clock import now_ms
from floor.conf import resonate_settings
from floor.counters import DELIVERIES, MESSAGES, flush
from outbox import delivery
from outbox.hub import Stream
from outbox.models import DeliveryState, Message, MessageKind

GROUPS = ("a", "b", "c")
IDS = ("w1", "w2")


class Loop:
    """Stands for a stream's event loop: records what the hub hands the stream."""

    def __init__(self):
        self.handed = []

    def call_soon_threadsafe(self, put, event, identity):
        self.handed.append(identity[0])


@pytest.fixture
def memory_hub(settings, monkeypatch):
    import outbox.hub

    settings.RESONATE = {**settings.RESONATE, "HUB_URL": ""}
    monkeypatch.setattr(outbox.hub, "_hub", None)
    monkeypatch.setattr(delivery, "_joins_heard", lambda: True)
    return outbox.hub.hub()


def listen(hub, streams):
    """Streams of (group, id) in the hub, all on one recording loop."""
    loop = Loop()
    hub.streams.clear()
    for group, id in streams:
        stream = Stream(group, id, loop)
        hub.streams.setdefault(group, {})[stream.key] = stream
    return loop


def address(cast, group, id):
    return f"poll://{cast}@{group}" + (f"/{id}" if id else "")


addresses = st.one_of(
    st.builds(address, st.just("any"), st.sampled_from(GROUPS), st.sampled_from((None, *IDS))),
    st.builds(address, st.just("uni"), st.sampled_from(GROUPS), st.sampled_from(IDS)),
)
# Where a message stands: never tried; tried, its grace ended or not; due now or later; or settled already.
situations = st.tuples(
    addresses,
    st.sampled_from(("untried", "grace ended", "in its grace")),
    st.booleans(),  # due now
    st.sampled_from((DeliveryState.PENDING, DeliveryState.PENDING, DeliveryState.DELIVERED, DeliveryState.DROPPED)),
)


def store(situations, now):
    grace = resonate_settings.POLL_GRACE_MS
    messages = []
    for n, (to, tried, due, state) in enumerate(situations):
        message = Message.build(MessageKind.UNBLOCK, f"p{n}", to, {"promise": {"id": f"p{n}"}}, now=now - 2 * grace)
        message.state, message.attempts = state, 0 if tried == "untried" else 2
        message.unreached_since = {"untried": None, "grace ended": now - grace - 5_000, "in its grace": now - 5_000}[
            tried
        ]
        message.next_attempt_at = now - 1_000 if due else now + 60_000
        messages.append(message)
    Message.objects.all().delete()
    Message.objects.store(messages)


def outcome(now):
    """Each message's bookkeeping; a grace that started at this run's attempt (its clock) as "at the attempt"."""
    return {
        m.key: (
            m.state,
            m.attempts,
            "at the attempt" if m.unreached_since is not None and m.unreached_since >= now else m.unreached_since,
            m.last_error if m.state == DeliveryState.DROPPED else None,
        )
        for m in Message.objects.all()
    }


@pytest.mark.django_db
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    situations=st.lists(situations, min_size=1, max_size=12),
    streams=st.just(()) | st.sets(st.tuples(st.sampled_from(GROUPS), st.sampled_from(IDS)), min_size=1, max_size=3),
)
def test_the_delivery_pass_leaves_every_message_as_the_attempts_alone_would(
    memory_hub, monkeypatch, situations, streams
):
    now = now_ms()
    store(situations, now)
    loop = listen(memory_hub, streams)
    assert delivery.joins_heard()
    delivery.deliver_due()
    with_drop, handed = outcome(now), sorted(loop.handed)

    store(situations, now)
    loop = listen(memory_hub, streams)
    with monkeypatch.context() as patched:
        patched.setattr(delivery, "UNHEARD_GROUPS_MAX", -1)  # every message through its attempt
        delivery.deliver_due()
    assert with_drop == outcome(now)
    assert handed == sorted(loop.handed)


@pytest.mark.django_db(transaction=True)
def test_messages_nobody_heard_are_dropped_in_one_statement_counted_and_logged_once(memory_hub, caplog):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    now = now_ms()
    store([(address("any", "a", None), "grace ended", True, DeliveryState.PENDING)] * 3, now)
    listen(memory_hub, [("b", "w1")])  # another group listens
    flush()  # counts are folded into the series at a flush (floor.counters)
    dropped_before, claimed_before = DELIVERIES.labels("dropped")._value.get(), MESSAGES.labels("unblock")._value.get()
    caplog.set_level(logging.INFO, logger="outbox.delivery")

    assert delivery.run_atomically(delivery.drop_unheard, now, memory_hub.groups_listening(), 50) == 3
    assert {m.state for m in Message.objects.all()} == {DeliveryState.DROPPED}
    flush()
    assert DELIVERIES.labels("dropped")._value.get() - dropped_before == 3
    assert MESSAGES.labels("unblock")._value.get() - claimed_before == 3
    assert [r.getMessage()[:13] for r in caplog.records if r.levelno == logging.INFO] == ["3 messages dr"]
    with CaptureQueriesContext(connection) as queries:  # nothing left: one statement finds nothing
        assert delivery.run_atomically(delivery.drop_unheard, now, set(), 50) == 0
    assert sum(q["sql"].startswith("UPDATE") for q in queries.captured_queries) == 1


@pytest.mark.django_db
def test_a_message_whose_group_has_a_stream_or_whose_grace_has_not_ended_is_not_dropped(memory_hub):
    now = now_ms()
    store(
        [
            (address("uni", "a", "w2"), "grace ended", True, DeliveryState.PENDING),  # a stream of its group: attempted
            (address("any", "b", None), "in its grace", True, DeliveryState.PENDING),  # a join made it due: attempted
            (address("any", "c", "w1"), "grace ended", True, DeliveryState.PENDING),  # nobody in c: dropped
        ],
        now,
    )
    assert delivery.drop_unheard(now, {"a"}, 50) == 1
    assert [m.state for m in Message.objects.order_by("subject")] == [
        DeliveryState.PENDING,
        DeliveryState.PENDING,
        DeliveryState.DROPPED,
    ]


@pytest.mark.django_db
def test_without_heard_joins_the_pass_drops_nothing_by_itself(memory_hub, monkeypatch):
    """PostgreSQL, or a hub in Redis: a process cannot know every stream, and each message has its attempt."""
    monkeypatch.setattr(delivery, "_joins_heard", lambda: False)
    monkeypatch.setattr(delivery, "drop_unheard", lambda *args: pytest.fail("dropped without heard joins"))
    now = now_ms()
    store([(address("any", "a", None), "grace ended", True, DeliveryState.PENDING)], now)
    assert delivery.deliver_due() == 1
    assert Message.objects.get().state == DeliveryState.DROPPED  # by its attempt
