"""Prometheus metrics (PROTOCOL.md §8.3's names, and gauges read from the database), GET /metrics, the request log.

With RESONATE_METRICS_DIR every process (server processes, Celery workers) keeps its counters in files there and
/metrics adds them up (prometheus_client's multiprocess mode); without it, counters live in this process's memory.
"""

import logging
import os
import time
from collections import Counter as Tally
from functools import cache
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, transaction
from django.http import HttpResponse
from django.views.decorators.http import require_safe

from resonate_site.conf import resonate_settings


def multiprocess_dir():
    """Where every process of this machine keeps its metrics, or "" for this process's memory."""
    return resonate_settings.METRICS_DIR or os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")


def export_multiprocess_dir():
    """prometheus_client chooses between memory and files when it is first imported, from PROMETHEUS_MULTIPROC_DIR."""
    if directory := multiprocess_dir():
        os.makedirs(directory, exist_ok=True)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory


export_multiprocess_dir()

from prometheus_client import (  # noqa: E402
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.core import GaugeMetricFamily  # noqa: E402
from prometheus_client.multiprocess import MultiProcessCollector  # noqa: E402

from outbox.models import DeliveryState, Message  # noqa: E402
from promises.models import Promise, PromiseState  # noqa: E402
from resonate_site.clock import now_ms  # noqa: E402
from schedules.models import Schedule  # noqa: E402
from tasks.models import Task, TimeoutKind  # noqa: E402

if multiprocess_dir() and values.ValueClass is values.MutexValue:
    raise ImproperlyConfigured(
        "prometheus_client was imported before resonate_site.metrics; set PROMETHEUS_MULTIPROC_DIR in the environment"
    )

log = logging.getLogger(__name__)
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
    for kind, count in Tally(message.kind for message in messages).items():
        MESSAGES.labels(kind).inc(count)


DELIVERY_STATUS = {DeliveryState.DELIVERED: "success", DeliveryState.DROPPED: "dropped"}


def deliveries_recorded(states):
    """Count the attempts by the state they left their message in: still pending (a retry) or failed is an error."""
    for status, count in Tally(DELIVERY_STATUS.get(state, "error") for state in states).items():
        DELIVERIES.labels(status).inc(count)


def schedule_promises_fired(count):
    """Count a schedule's promises once they are committed: a batch retried or rolled back counts nothing."""
    if count:
        transaction.on_commit(lambda: SCHEDULE_PROMISES.inc(count))


# The sweep's categories (schedules/timeouts.py TRANSITIONS): entries whose deadline is at or before `now`.
DUE = {
    "promise": lambda now: Promise.objects.filter(timeout_armed=True, timeout_at__lte=now),
    "retry": lambda now: Task.objects.filter(timeout_kind=TimeoutKind.RETRY, timeout_at__lte=now),
    "lease": lambda now: Task.objects.filter(timeout_kind=TimeoutKind.LEASE, timeout_at__lte=now),
    "schedule": lambda now: Schedule.objects.filter(next_run_at__lte=now),
}


class DatabaseGauges:
    """Gauges counted in the database at scrape time, so every process reports the same numbers."""

    def families(self):
        return (
            GaugeMetricFamily("resonate_promises_pending", "Promises pending and not past their deadline"),
            GaugeMetricFamily(
                "resonate_timeouts_due", "Timeouts whose time has come but that have not fired", labels=["kind"]
            ),
            GaugeMetricFamily("resonate_messages_undelivered", "Messages in the outbox waiting to be delivered"),
        )

    def describe(self):
        return self.families()

    def collect(self):
        """The gauges, counted at most once per GAUGES_MAX_AGE_S per process: a scrape (or anyone who can
        reach /metrics) does not make the database count pending promises on every request."""
        global _counted
        at, counts = _counted
        if counts is None or time.monotonic() - at > GAUGES_MAX_AGE_S:
            try:
                counts = self.count(now_ms())
            except DatabaseError as error:  # the counters are still worth serving
                log.warning("metrics: the database gauges are left out: %s", error)
                return []
            _counted = (time.monotonic(), counts)
        pending, due, undelivered = self.families()
        pending.add_metric([], counts["pending"])
        for kind in DUE:
            due.add_metric([kind], counts[kind])
        undelivered.add_metric([], counts["undelivered"])
        return [pending, due, undelivered]

    @staticmethod
    def count(now):
        counts = {"pending": Promise.objects.with_projected_state(PromiseState.PENDING, now).count()}
        counts.update({kind: entries(now).count() for kind, entries in DUE.items()})
        counts["undelivered"] = Message.objects.undelivered().count()
        return counts


GAUGES_MAX_AGE_S = 10
_counted = (0.0, None)  # (when, counts) of the last count in this process


if not multiprocess_dir():
    REGISTRY.register(DatabaseGauges())


def registry():
    """What /metrics shows: in multiprocess mode, every process's files added up, read afresh."""
    directory = multiprocess_dir()
    if not directory:
        return REGISTRY
    combined = CollectorRegistry()
    MultiProcessCollector(combined, path=directory)
    combined.register(DatabaseGauges())
    return combined


@require_safe
def metrics(request):
    """GET /metrics in the Prometheus text format. Like /health it needs no authentication."""
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)


def process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def clear_if_unused(directory):
    """Empty the metrics directory unless another process still writes there; whether it did.

    At a fresh start every counter then restarts from zero together, which Prometheus reads as a reset.
    While a Celery worker outlives a server restart, the files stay: removing part of them would make
    the totals drop, which Prometheus would read as a reset followed by a burst.
    """
    files = {path: writer(path) for path in Path(directory).glob("*.db")}
    others = {pid for pid in files.values() if pid is not None and pid != os.getpid()}
    if any(process_alive(pid) for pid in others):
        return False
    for path, pid in files.items():
        if pid in others:
            path.unlink(missing_ok=True)
    return True


def writer(path):
    """The process id in a metrics file's name (counter_1234.db, gauge_livesum_1234.db), or None."""
    pid = path.stem.rsplit("_", 1)[-1]
    return int(pid) if pid.isdigit() else None
