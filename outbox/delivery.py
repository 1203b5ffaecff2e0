"""Delivering outbox messages: poll:// to SSE streams through the hub, http(s):// by POST with retries.

A deliverer claims due messages (SKIP LOCKED, so deliverers share the work), counts the attempt and
pushes the next attempt time out by a lease, commits, sends, and records the outcome only if the
message is still the one it claimed (setMessage may have replaced it meanwhile). A deliverer that
dies between claim and record leaves the message pending; it is sent again once the lease lapses.
"""

import logging
from enum import Enum

import httpx
from django.db.models import Q

from outbox.hub import hub, parse_poll_address
from outbox.models import DeliveryState, Message
from promises.transactions import run_atomically
from resonate_site.clock import now_ms
from resonate_site.conf import resonate_settings

log = logging.getLogger(__name__)

BATCH = 100


class Outcome(Enum):
    DELIVERED = "delivered"
    DROPPED = "dropped"  # nobody to deliver to; execute is re-sent by the task's timers
    RETRY = "retry"
    UNREACHED = "unreached"  # no stream connected right now: retried briefly, then dropped


def deliver(keys=None, limit=BATCH):
    """Send due messages (only those with `keys` if given); how many were claimed."""
    claimed = run_atomically(claim, keys, now_ms(), limit)
    for message in claimed:
        outcome, detail = send(message)
        run_atomically(record, message, outcome, detail, now_ms())
    return len(claimed)


def deliver_due():
    """Everything due, batch by batch: the periodic pass that catches what on-commit delivery missed."""
    total = 0
    while count := deliver():
        total += count
    return total


def claim(keys, now, limit):
    due = Message.objects.filter(state=DeliveryState.PENDING, next_attempt_at__lte=now)
    if keys is not None:
        due = due.filter(key__in=keys)
    messages = list(due.order_by("next_attempt_at", "id").select_for_update(skip_locked=True)[:limit])
    lease = resonate_settings.PUSH_TIMEOUT_MS + resonate_settings.DELIVERY_BACKOFF_MS
    for message in messages:
        message.attempts += 1
        message.next_attempt_at = now + lease
    Message.objects.bulk_update(messages, ["attempts", "next_attempt_at"])
    return messages


def send(message):
    """Try the message's transport once: (outcome, detail)."""
    body = message.body(server_url=resonate_settings.SERVER_URL)
    if parse_poll_address(message.address) is not None:
        if hub().publish(message.address, body):
            return Outcome.DELIVERED, ""
        return Outcome.UNREACHED, "no live poll connection for this address"
    if message.address.startswith(("http://", "https://")):
        return push(message.address, body)
    return Outcome.DROPPED, f"no transport for address {message.address!r}"


def push(url, body):
    """One HTTP push (decision D13): any 2xx is delivered; anything else is retried later."""
    try:
        response = httpx.post(url, json=body, timeout=resonate_settings.PUSH_TIMEOUT_MS / 1000)
    except httpx.HTTPError as error:
        return Outcome.RETRY, f"{type(error).__name__}: {error}"
    if response.is_success:
        return Outcome.DELIVERED, ""
    return Outcome.RETRY, f"HTTP {response.status_code}"


def record(message, outcome, detail, now):
    """Store the outcome, unless the message was replaced (or settled by another deliverer) meanwhile."""
    same = Message.objects.filter(
        Q(pk=message.pk, attempts=message.attempts, created_at=message.created_at, state=DeliveryState.PENDING)
    )
    if outcome is Outcome.DELIVERED:
        same.update(state=DeliveryState.DELIVERED, delivered_at=now, last_error="")
    elif outcome is Outcome.DROPPED or (
        outcome is Outcome.UNREACHED and message.attempts >= resonate_settings.POLL_ATTEMPTS
    ):
        same.update(state=DeliveryState.DROPPED, last_error=detail)
    elif message.attempts >= resonate_settings.DELIVERY_ATTEMPTS:
        same.update(state=DeliveryState.FAILED, last_error=detail)
    else:
        same.update(next_attempt_at=now + backoff(message.attempts), last_error=detail)
    if outcome is not Outcome.DELIVERED:
        log.info("%s %s to %s: %s (%s)", message.kind, message.subject, message.address, outcome.value, detail)


def backoff(attempts):
    """Delay before attempt n + 1: DELIVERY_BACKOFF_MS doubling per attempt, capped."""
    return min(resonate_settings.DELIVERY_BACKOFF_MS * 2 ** (attempts - 1), resonate_settings.DELIVERY_BACKOFF_MAX_MS)
