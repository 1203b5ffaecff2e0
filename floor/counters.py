"""The Prometheus counters every process keeps (PROTOCOL.md §8.3's names), and the request log.

With RESONATE_METRICS_DIR every process (server processes, Celery workers) keeps its counters in files there and
/metrics (resonate_site.metrics) adds them up (prometheus_client's multiprocess mode); without it, counters live
in this process's memory.
"""

import logging
import os
from collections import Counter as Tally
from functools import cache

from django.core.exceptions import ImproperlyConfigured

from floor.conf import resonate_settings


def multiprocess_dir():
    """Where every process of this machine keeps its metrics, or "" for this process's memory."""
    return resonate_settings.METRICS_DIR or os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")


def export_multiprocess_dir():
    """prometheus_client chooses between memory and files when it is first imported, from PROMETHEUS_MULTIPROC_DIR."""
    if directory := multiprocess_dir():
        os.makedirs(directory, exist_ok=True)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory


export_multiprocess_dir()

from prometheus_client import Counter, Histogram, values  # noqa: E402

if multiprocess_dir() and values.ValueClass is values.MutexValue:
    raise ImproperlyConfigured(
        "prometheus_client was imported before floor.counters; set PROMETHEUS_MULTIPROC_DIR in the environment"
    )

request_log = logging.getLogger("resonate.request")

# Protocol requests take from a fraction of a millisecond to a few (bench/README.md): finer buckets at the low end.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

REQUESTS = Counter("resonate_request", "Protocol requests on POST /", ["kind", "status"])
REQUEST_SECONDS = Histogram(
    "resonate_request_duration_seconds", "Time to answer a protocol request", ["kind"], buckets=BUCKETS
)
MESSAGES = Counter("resonate_messages", "execute and unblock messages claimed from the outbox for delivery", ["kind"])
DELIVERIES = Counter("resonate_deliveries", "Delivery attempts by outcome: success, error or dropped", ["status"])
SCHEDULE_PROMISES = Counter("resonate_schedule_promises", "Promises created by schedules")
TOGETHER = Counter(
    "resonate_requests_committed_together",
    "Protocol requests whose transaction was one commit with others open at once (the embedded mode)",
)

# Requests refused before any operation ran; every other 4xx (404, 409, 422) is an ordinary protocol answer.
REFUSED = {400, 401, 403, 413}


def request_answered(envelope, seconds, kinds):
    """Count, time and log one request on POST / by its reply envelope. A kind not in `kinds` counts as "unknown"."""
    kind, corr_id, status = envelope["kind"], envelope["head"]["corrId"], envelope["head"]["status"]
    requests, durations = request_series(kind if kind in kinds else "unknown", status)
    requests.inc()
    durations.observe(seconds)
    level = logging.WARNING if status >= 500 else logging.INFO if status in REFUSED else logging.DEBUG
    if request_log.isEnabledFor(level):
        ms = round(seconds * 1000, 3)
        extra = {"kind": kind, "corrId": corr_id, "status": status, "duration_ms": ms}
        request_log.log(level, "%s %s %s %.1f ms", kind, corr_id, status, ms, extra=extra)


@cache
def request_series(kind, status):
    """The counter and histogram of one kind and status; labels() takes a lock and a lookup, half the cost per request.

    The kind is the client's string: only known kinds become labels, so the cache and the label set stay finite.
    """
    return REQUESTS.labels(kind, str(status)), REQUEST_SECONDS.labels(kind)


def messages_claimed(messages):
    if len(messages) == 1:  # most often: a create's execute, a settlement's one unblock
        message_series(messages[0].kind).inc()
        return
    for kind, count in Tally(message.kind for message in messages).items():
        message_series(kind).inc(count)


@cache
def message_series(kind):
    """One kind's counter (execute, unblock): labels() and a Counter of kinds were 8% of a create's CPU."""
    return MESSAGES.labels(kind)


DELIVERY_STATUS = {"delivered": "success", "dropped": "dropped"}  # by outbox.models.DeliveryState


def deliveries_recorded(states):
    """Count the attempts by the state they left their message in: still pending (a retry) or failed is an error."""
    if len(states) == 1:
        delivery_series(DELIVERY_STATUS.get(states[0], "error")).inc()
        return
    for status, count in Tally(DELIVERY_STATUS.get(state, "error") for state in states).items():
        delivery_series(status).inc(count)


@cache
def delivery_series(status):
    return DELIVERIES.labels(status)


def schedule_promises_fired(counts):
    """Count a schedule's promises once they are committed (floor.transactions.after_commit): a batch retried or
    rolled back counts nothing."""
    SCHEDULE_PROMISES.inc(sum(counts))


def requests_committed_together(count):
    TOGETHER.inc(count)
