"""GET /metrics: the counters of floor.counters, and gauges counted in the database at scrape time."""

import logging
import os
import time
from pathlib import Path

from django.db import DatabaseError
from django.http import HttpResponse
from django.views.decorators.http import require_safe

from floor.counters import flush, multiprocess_dir  # before prometheus_client: it chooses where the counters are kept

# isort: split
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from floor.clock import now_ms
from outbox.models import Message
from promises.models import Promise, PromiseState
from timeouts.due import count_due

log = logging.getLogger(__name__)


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
        for kind, count in counts["due"].items():
            due.add_metric([kind], count)
        undelivered.add_metric([], counts["undelivered"])
        return [pending, due, undelivered]

    @staticmethod
    def count(now):
        counts = {"pending": Promise.objects.with_projected_state(PromiseState.PENDING, now).count()}
        counts["due"] = count_due(now)
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
    """GET /metrics in the Prometheus text format. Like /health it needs no authentication. This process's counts
    are folded in first (floor.counters.flush): they are up to date; another process's are at most FLUSH_S late."""
    flush()
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
