"""The Prometheus counters every process keeps (PROTOCOL.md §8.3's names), and the request log.

With RESONATE_METRICS_DIR every process (server processes, Celery workers) keeps its counters in files there and
/metrics (resonate_site.metrics) adds them up (prometheus_client's multiprocess mode); without it, counters live
in this process's memory.
"""

import atexit
import logging
import os
import threading
import time
from bisect import bisect_left
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
    "Protocol requests whose writes were one commit with others open at once (the embedded mode's transactions,"
    " PostgreSQL's creates)",
)

# Requests refused before any operation ran; every other 4xx (404, 409, 422) is an ordinary protocol answer.
REFUSED = {400, 401, 403, 413}


def request_answered(envelope, seconds, kinds):
    """Count, time and log one request on POST / by its reply envelope. A kind not in `kinds` counts as "unknown"."""
    kind, corr_id, status = envelope["kind"], envelope["head"]["corrId"], envelope["head"]["status"]
    key = (kind if kind in kinds else "unknown", status)
    tally = _tally()
    with tally.lock:
        counted = tally.requests.get(key)
        if counted is None:
            counted = tally.requests[key] = [0, 0.0] + [0] * len(UPPER_BOUNDS)
        counted[0] += 1
        counted[1] += seconds
        counted[2 + bisect_left(UPPER_BOUNDS, seconds)] += 1  # the first bucket whose bound is at least `seconds`
    level = logging.WARNING if status >= 500 else logging.INFO if status in REFUSED else logging.DEBUG
    if request_log.isEnabledFor(level):
        ms = round(seconds * 1000, 3)
        extra = {"kind": kind, "corrId": corr_id, "status": status, "duration_ms": ms}
        request_log.log(level, "%s %s %s %.1f ms", kind, corr_id, status, ms, extra=extra)


UPPER_BOUNDS = (*BUCKETS, float("inf"))  # the histogram's buckets, as prometheus_client bounds them


@cache
def request_series(kind, status):
    """The counter and histogram of one kind and status; labels() takes a lock and a lookup.

    The kind is the client's string: only known kinds become labels, so the cache and the label set stay finite.
    """
    return REQUESTS.labels(kind, str(status)), REQUEST_SECONDS.labels(kind)


def messages_claimed(messages):
    if len(messages) == 1:  # most often: a create's execute, a settlement's one unblock
        added(message_series(messages[0].kind))
        return
    for kind, count in Tally(message.kind for message in messages).items():
        added(message_series(kind), count)


@cache
def message_series(kind):
    """One kind's counter (execute, unblock): labels() and a Counter of kinds were 8% of a create's CPU."""
    return MESSAGES.labels(kind)


DELIVERY_STATUS = {"delivered": "success", "dropped": "dropped"}  # by outbox.models.DeliveryState


def deliveries_recorded(states):
    """Count the attempts by the state they left their message in: still pending (a retry) or failed is an error."""
    if len(states) == 1:
        added(delivery_series(DELIVERY_STATUS.get(states[0], "error")))
        return
    for status, count in Tally(DELIVERY_STATUS.get(state, "error") for state in states).items():
        added(delivery_series(status), count)


@cache
def delivery_series(status):
    return DELIVERIES.labels(status)


def schedule_promises_fired(counts):
    """Count a schedule's promises once they are committed (floor.transactions.after_commit): a batch retried or
    rolled back counts nothing."""
    added(SCHEDULE_PROMISES, sum(counts))


def requests_committed_together(count):
    added(TOGETHER, count)


# Counted per thread, folded in every FLUSH_S
#
# A series of prometheus_client takes a lock and runs its own Python at each count (a histogram's observe walks its
# buckets; in multiprocess mode each value is also written to its file): at 16 clients, promise.get spent about 6%
# of the server's CPU on its one request's counts (bench/HISTORY.md, 2026-12-06). Each thread instead adds its
# counts to a tally of its own, under a lock only the flush also takes, and the tallies are folded into the series
# every FLUSH_S by a thread of this process, at every scrape of /metrics by the process that answers it, and when
# the process exits. A scrape of another process's counts (multiprocess mode) sees them at most FLUSH_S late; a
# process killed outright loses at most its last FLUSH_S of counts.

FLUSH_S = 1.0


class _Tally:
    """One thread's counts since the last flush: {series: amount to add}, and {(kind, status): [requests, seconds
    in all, one count per bucket of UPPER_BOUNDS]}."""

    __slots__ = ("lock", "counts", "requests", "thread")

    def __init__(self):
        self.lock = threading.Lock()
        self.counts, self.requests = {}, {}
        self.thread = threading.current_thread()

    def taken(self):
        """(counts, requests) since the last flush, the tally emptied."""
        with self.lock:
            taken = self.counts, self.requests
            self.counts, self.requests = {}, {}
        return taken


_local = threading.local()  # this thread's _Tally
_tallies = []  # every thread's, for flush()
_tallies_lock = threading.Lock()
_flusher = None


def _tally():
    """This thread's tally, made (and the flusher started) at its first count."""
    return _local.__dict__.get("tally") or _new_tally()


def _new_tally():
    global _flusher
    tally = _local.tally = _Tally()
    with _tallies_lock:
        _tallies.append(tally)
        if _flusher is None:
            _flusher = threading.Thread(target=_flush_every, name="resonate-counters", daemon=True)
            _flusher.start()
    return tally


def added(series, amount=1):
    """Add `amount` to a counter series (a Counter, or one child of its labels), at the next flush."""
    tally = _tally()
    with tally.lock:
        tally.counts[series] = tally.counts.get(series, 0) + amount


def flush():
    """Fold every thread's counts into the Prometheus series. A thread that has ended and counted nothing since is
    forgotten."""
    with _tallies_lock:
        tallies = list(_tallies)
    for tally in tallies:
        counts, requests = tally.taken()
        for series, amount in counts.items():
            series.inc(amount)
        for (kind, status), (count, seconds, *buckets) in requests.items():
            requests_of, durations = request_series(kind, status)
            requests_of.inc(count)
            observed(durations, seconds, buckets)
        if not tally.thread.is_alive():
            with _tallies_lock, tally.lock:
                if not tally.counts and not tally.requests and tally in _tallies:
                    _tallies.remove(tally)


def observed(histogram, seconds, buckets):
    """What histogram.observe() of each duration would have added: their sum, and per bucket how many fell in it.
    prometheus_client has no call for several observations at once; tests/test_metrics.py checks that this
    adds what observe() adds, bucket by bucket."""
    histogram._sum.inc(seconds)
    for value, count in zip(histogram._buckets, buckets, strict=True):
        if count:
            value.inc(count)


def _flush_every():
    while True:
        time.sleep(FLUSH_S)
        try:
            flush()
        except Exception:  # counting must never stop; the next flush tries again
            logging.getLogger(__name__).exception("could not fold the counts into the metrics")


def _forked():
    """A forked process (a Celery worker) starts with no counts of its parent's, and its own flusher."""
    global _local, _tallies, _tallies_lock, _flusher
    _local, _tallies, _tallies_lock, _flusher = threading.local(), [], threading.Lock(), None


os.register_at_fork(after_in_child=_forked)
atexit.register(flush)
