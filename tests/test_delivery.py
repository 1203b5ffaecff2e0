"""How an attempt's outcome decides a message's fate (outbox/delivery.py settled_as); which retries are dropped."""

import pytest

from floor.conf import resonate_settings
from outbox.delivery import Outcome, settled_as
from outbox.models import DeliveryState, Message


def message(attempts, created_at=0, unreached_since=None):
    return Message(
        attempts=attempts, created_at=created_at, next_attempt_at=created_at, unreached_since=unreached_since
    )


def test_a_poll_message_with_no_stream_waits_for_one_until_its_grace_ends():
    grace, retry = resonate_settings.POLL_GRACE_MS, resonate_settings.POLL_RETRY_MS
    first = settled_as(message(1), Outcome.UNREACHED, 100)
    assert first == (DeliveryState.PENDING, 100 + retry, None, 100)
    waited = message(30, unreached_since=100)
    assert settled_as(waited, Outcome.UNREACHED, 100 + grace - 1) == (
        DeliveryState.PENDING,
        100 + grace - 1 + retry,
        None,
        100,
    )
    assert settled_as(waited, Outcome.UNREACHED, 100 + grace).state == DeliveryState.DROPPED


def test_where_every_join_is_heard_a_poll_message_with_no_stream_waits_for_a_join_or_the_end_of_its_grace(
    monkeypatch,
):
    """The embedded mode on SQLite: a stream of its group connecting makes it due (due_on_join); it is not tried every
    POLL_RETRY_MS meanwhile. Its one more attempt comes as its grace ends, counted from its first that found none."""
    from outbox import delivery

    grace = resonate_settings.POLL_GRACE_MS
    monkeypatch.setattr(delivery, "_joins_heard", lambda: True)
    assert settled_as(message(1), Outcome.UNREACHED, 100) == (DeliveryState.PENDING, 100 + grace, None, 100)
    assert settled_as(message(3, unreached_since=100), Outcome.UNREACHED, 2_000).next_attempt_at == 100 + grace
    assert settled_as(message(3, unreached_since=100), Outcome.UNREACHED, 100 + grace).state == DeliveryState.DROPPED
    # The hub out of reach is not a missing stream: retried as before (the in-memory hub never is).
    assert settled_as(message(1), Outcome.HUB_DOWN, 100).next_attempt_at == 100 + resonate_settings.POLL_RETRY_MS


def test_the_grace_runs_from_the_first_attempt_that_found_no_stream_not_from_creation():
    """A message that waited out an outage (no deliverer, no hub, no database) still gets its whole grace."""
    late = resonate_settings.POLL_GRACE_MS * 3
    assert settled_as(message(1, created_at=0), Outcome.UNREACHED, late).state == DeliveryState.PENDING


def test_while_the_hub_is_down_a_poll_message_is_retried_and_its_grace_does_not_run():
    retry = resonate_settings.POLL_RETRY_MS
    assert settled_as(message(5), Outcome.HUB_DOWN, 100) == (DeliveryState.PENDING, 100 + retry, None, None)
    assert settled_as(message(5, unreached_since=40), Outcome.HUB_DOWN, 100).unreached_since == 40


def test_a_push_is_retried_with_doubling_backoff_then_fails():
    backoff = resonate_settings.DELIVERY_BACKOFF_MS
    assert settled_as(message(1), Outcome.RETRY, 100) == (DeliveryState.PENDING, 100 + backoff, None, None)
    assert settled_as(message(2), Outcome.RETRY, 100) == (DeliveryState.PENDING, 100 + 2 * backoff, None, None)
    assert settled_as(message(resonate_settings.DELIVERY_ATTEMPTS), Outcome.RETRY, 100).state == DeliveryState.FAILED


@pytest.mark.parametrize("attempts", [1, 5])
def test_delivered_and_dropped_are_final(attempts):
    assert settled_as(message(attempts), Outcome.DELIVERED, 7) == (DeliveryState.DELIVERED, 0, 7, None)
    assert settled_as(message(attempts), Outcome.DROPPED, 7).state == DeliveryState.DROPPED


def test_a_retried_execute_whose_task_is_no_longer_pending_at_its_version_is_dropped_not_retried(protocol, settings):
    """A cancelled promise's execute waiting for a stream: workers would only get 409s for the poll grace."""
    from floor.clock import now_ms
    from outbox.delivery import deliver
    from outbox.models import MessageKind

    def execute(id):
        return Message.objects.get(kind=MessageKind.EXECUTE, subject=id)

    settings.RESONATE = {**settings.RESONATE, "POLL_RETRY_MS": 0}
    far = now_ms() + 3_600_000
    for id in ("cancelled", "waiting"):
        protocol("promise.create", {"id": id, "timeoutAt": far, "tags": {"resonate:target": "poll://any@nobody"}})
        deliver([execute(id).key])  # no stream in group "nobody": it waits for one
        assert execute(id).state == DeliveryState.PENDING
    protocol("promise.settle", {"id": "cancelled", "state": "rejected_canceled"})

    deliver([execute(id).key for id in ("cancelled", "waiting")])
    dropped, waiting = execute("cancelled"), execute("waiting")
    assert (dropped.state, dropped.last_error) == (
        DeliveryState.DROPPED,
        "task cancelled is no longer pending at version 0",
    )
    assert (waiting.state, waiting.attempts) == (DeliveryState.PENDING, 2)  # still pending at its version: kept
