"""How an attempt's outcome decides a message's fate (outbox/delivery.py settled_as)."""

import pytest

from outbox.delivery import Outcome, settled_as
from outbox.models import DeliveryState, Message
from resonate_site.conf import resonate_settings


def message(attempts, created_at=0):
    return Message(attempts=attempts, created_at=created_at, next_attempt_at=created_at)


def test_a_poll_message_with_no_stream_waits_for_one_until_its_grace_ends():
    grace, retry = resonate_settings.POLL_GRACE_MS, resonate_settings.POLL_RETRY_MS
    assert settled_as(message(30), Outcome.UNREACHED, grace - 1) == (DeliveryState.PENDING, grace - 1 + retry, None)
    assert settled_as(message(30), Outcome.UNREACHED, grace)[0] == DeliveryState.DROPPED


def test_a_push_is_retried_with_doubling_backoff_then_fails():
    backoff = resonate_settings.DELIVERY_BACKOFF_MS
    assert settled_as(message(1), Outcome.RETRY, 100) == (DeliveryState.PENDING, 100 + backoff, None)
    assert settled_as(message(2), Outcome.RETRY, 100) == (DeliveryState.PENDING, 100 + 2 * backoff, None)
    assert settled_as(message(resonate_settings.DELIVERY_ATTEMPTS), Outcome.RETRY, 100)[0] == DeliveryState.FAILED


@pytest.mark.parametrize("attempts", [1, 5])
def test_delivered_and_dropped_are_final(attempts):
    assert settled_as(message(attempts), Outcome.DELIVERED, 7) == (DeliveryState.DELIVERED, 0, 7)
    assert settled_as(message(attempts), Outcome.DROPPED, 7)[0] == DeliveryState.DROPPED
