"""GET /metrics (counters, the database gauges, multiprocess mode) and the log line of each protocol request."""

import json
import logging
import os
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import httpx
import pytest
from django.db import transaction
from django.test import Client
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.parser import text_string_to_metric_families

from floor import counters
from floor.counters import BUCKETS
from outbox.delivery import deliver_due
from resonate_site import metrics as metrics_module
from resonate_site.metrics import clear_if_unused
from resonate_site.protocol import envelope
from tests.conftest import create, targeted
from tests.e2e.servers import ROOT
from timeouts.sweep import sweep

FAR = 4_102_444_800_000  # 2100: never due while these tests run


def scrape(client, fresh=True):
    """Every sample of GET /metrics: {(name, frozenset of labels): value}; `fresh`: gauges counted anew."""
    if fresh:
        metrics_module._counted = (0.0, None)
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    families = text_string_to_metric_families(response.content.decode())
    return {(s.name, frozenset(s.labels.items())): s.value for family in families for s in family.samples}


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def change(before, after, name, **labels):
    return value(after, name, **labels) - value(before, name, **labels)


# Requests on POST /


def test_requests_are_counted_by_kind_and_status(protocol, client):
    before = scrape(client)
    protocol("promise.create", create("p", timeout_at=FAR), now=0)
    protocol("promise.get", {"id": "p"}, now=1)
    protocol("promise.get", {"id": "absent"}, now=1)
    after = scrape(client)
    assert change(before, after, "resonate_request_total", kind="promise.create", status="200") == 1
    assert change(before, after, "resonate_request_total", kind="promise.get", status="200") == 1
    assert change(before, after, "resonate_request_total", kind="promise.get", status="404") == 1
    assert change(before, after, "resonate_request_duration_seconds_count", kind="promise.get") == 2


def test_a_kind_the_server_does_not_know_is_counted_as_unknown(protocol, client):
    before = scrape(client)
    assert protocol("no.such.kind", {}).status == 400
    assert protocol.raw(b"not json").status == 400
    after = scrape(client)
    assert change(before, after, "resonate_request_total", kind="unknown", status="400") == 2
    assert not any(dict(labels).get("kind") == "no.such.kind" for _, labels in after)


def test_a_body_too_large_is_counted_as_a_413(protocol, client, settings):
    settings.RESONATE = {**settings.RESONATE, "MAX_BODY_BYTES": 10}
    before = scrape(client)
    assert protocol.raw(b'{"kind": "promise.get", "head": {}, "data": {}}').status == 413
    after = scrape(client)
    assert change(before, after, "resonate_request_total", kind="unknown", status="413") == 1


def test_a_request_that_crashes_is_counted_as_a_500(db, client, monkeypatch):
    def crash(body):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(envelope, "answer", crash)
    before = scrape(client)
    response = Client(raise_request_exception=False).post("/", b"{}", content_type="application/json")
    assert response.status_code == 500
    assert change(before, scrape(client), "resonate_request_total", kind="unknown", status="500") == 1


def test_metrics_need_no_authentication_and_only_answer_reads(db, client):
    assert client.get("/metrics").status_code == 200
    assert client.post("/metrics").status_code == 405


# Counts folded in at a flush (floor.counters: each thread tallies its own, folded in every FLUSH_S)

DURATIONS = st.floats(min_value=0, max_value=100, allow_nan=False) | st.sampled_from([*BUCKETS, 0.0])


@examples(max_examples=60, deadline=None)
@given(durations=st.lists(DURATIONS, max_size=30))
def test_a_flush_adds_what_observe_would_have_added(durations):
    """Bucket by bucket, the sum and the count: the same as a histogram fed each duration by observe(), bounds
    included (a duration equal to a bound falls in that bound's bucket)."""
    reference = Histogram("reference", "", buckets=BUCKETS, registry=CollectorRegistry())
    for seconds in durations:
        reference.observe(seconds)
    counters.flush()
    before = histogram_samples()
    for seconds in durations:
        counters.request_answered(
            {"kind": "promise.get", "head": {"corrId": "c", "status": 200}}, seconds, {"promise.get"}
        )
    counters.flush()
    after = histogram_samples()
    expected = {
        (s.name.replace("reference", "resonate_request_duration_seconds"), s.labels.get("le")): s.value
        for s in reference.collect()[0].samples
        if not s.name.endswith("_created")
    }
    for (name, le), value in expected.items():
        assert after.get((name, le), 0.0) - before.get((name, le), 0.0) == pytest.approx(value, abs=1e-9), (name, le)


def histogram_samples():
    family = next(f for f in counters.REQUEST_SECONDS.collect())
    return {(s.name, s.labels.get("le")): s.value for s in family.samples if s.labels.get("kind") == "promise.get"}


def test_counts_wait_for_a_flush_and_every_thread_s_are_folded_in(db, client):
    """A count is in its thread's tally until a flush; /metrics flushes first, and the flusher thread does within
    FLUSH_S, for counts made on any thread."""
    series = counters.message_series("execute")
    counters.flush()
    before = series._value.get()
    counters.messages_claimed([SimpleNamespace(kind="execute")])
    assert series._value.get() == before  # tallied, not yet folded in (the flusher wakes once a second)
    worker = threading.Thread(target=counters.messages_claimed, args=([SimpleNamespace(kind="execute")] * 2,))
    worker.start()
    worker.join()
    assert change({}, scrape(client), "resonate_messages_total", kind="execute") == before + 3  # the scrape flushed
    counters.messages_claimed([SimpleNamespace(kind="execute")])
    deadline = time.monotonic() + 5 * counters.FLUSH_S
    while series._value.get() < before + 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert series._value.get() == before + 4  # the flusher thread, without a scrape


def test_a_celery_pool_process_folds_its_counts_in_before_it_exits():
    """A pool process ends with os._exit, which skips atexit: Celery's worker_process_shutdown flushes instead."""
    from celery import signals

    import resonate_site.celery  # noqa: F401 (connects its signal handlers)

    series = counters.message_series("unblock")
    counters.flush()
    before = series._value.get()
    counters.messages_claimed([SimpleNamespace(kind="unblock")])
    signals.worker_process_shutdown.send(sender=None, pid=os.getpid(), exitcode=0)
    assert series._value.get() == before + 1


def test_a_thread_that_has_ended_is_forgotten_once_its_counts_are_folded_in():
    worker = threading.Thread(target=counters.added, args=(counters.SCHEDULE_PROMISES, 2))
    worker.start()
    worker.join()
    (tally,) = [t for t in counters._tallies if t.thread is worker]
    counters.flush()
    assert tally not in counters._tallies


# Gauges read from the database


def test_the_gauges_count_what_the_database_holds(protocol, client):
    protocol("promise.create", create("waiting", timeout_at=FAR), now=1_000)
    protocol("promise.create", create("settled", timeout_at=FAR), now=1_000)
    protocol("promise.settle", {"id": "settled", "state": "resolved"}, now=1_000)
    protocol("promise.create", create("timer", timeout_at=2_000, tags={"resonate:timer": "true"}), now=1_000)
    protocol("promise.create", targeted("work", timeout_at=FAR), now=1_000)  # a task, its retry timer, an execute
    schedule = {"id": "nightly", "cron": "0 0 * * *", "promiseId": "n.{{.timestamp}}", "promiseTimeout": 60_000}
    protocol("schedule.create", schedule, now=1_000)
    samples = scrape(client)
    assert value(samples, "resonate_promises_pending") == 2  # waiting and work; the timer's deadline has passed
    assert value(samples, "resonate_timeouts_due", kind="promise") == 1
    assert value(samples, "resonate_timeouts_due", kind="retry") == 1
    assert value(samples, "resonate_timeouts_due", kind="lease") == 0
    assert value(samples, "resonate_timeouts_due", kind="schedule") == 1
    assert value(samples, "resonate_messages_undelivered") == 1


def test_the_gauges_are_counted_at_most_once_per_interval(protocol, client):
    before = scrape(client)[("resonate_promises_pending", frozenset())]
    assert protocol("promise.create", {"id": "p", "timeoutAt": 10**13}).status == 200
    assert scrape(client, fresh=False)[("resonate_promises_pending", frozenset())] == before  # still cached
    assert scrape(client)[("resonate_promises_pending", frozenset())] == before + 1


def test_fired_timeouts_and_delivered_messages_leave_the_gauges(protocol, client, monkeypatch):
    monkeypatch.setattr(httpx, "post", lambda url, **kwargs: httpx.Response(200))
    protocol("promise.create", create("timer", timeout_at=2_000, tags={"resonate:timer": "true"}), now=1_000)
    protocol("promise.create", targeted("work", timeout_at=FAR, tags={"resonate:target": "http://w.test/"}), now=1_000)
    sweep(3_000)
    deliver_due()
    samples = scrape(client)
    assert value(samples, "resonate_timeouts_due", kind="promise") == 0
    assert value(samples, "resonate_messages_undelivered") == 0


# Background work: delivery and schedules


def test_messages_and_delivery_outcomes_are_counted_when_delivery_runs(protocol, client, monkeypatch):
    monkeypatch.setattr(httpx, "post", lambda url, **kwargs: httpx.Response(200 if "ok" in url else 500))
    protocol("promise.create", targeted("a", tags={"resonate:target": "http://ok.test/"}, timeout_at=FAR), now=0)
    protocol("promise.create", targeted("b", tags={"resonate:target": "http://down.test/"}, timeout_at=FAR), now=0)
    protocol("promise.create", targeted("c", timeout_at=FAR), now=0)  # a poll:// address nobody listens on
    before = scrape(client)
    assert deliver_due() == 3
    after = scrape(client)
    assert change(before, after, "resonate_messages_total", kind="execute") == 3
    assert change(before, after, "resonate_deliveries_total", status="success") == 1
    # Both retried later: the push after its backoff, the poll message while it waits for a stream (its
    # grace starts at this first attempt that found none).
    assert change(before, after, "resonate_deliveries_total", status="error") == 2
    assert change(before, after, "resonate_deliveries_total", status="dropped") == 0


@pytest.mark.django_db
def test_claims_and_attempts_count_alone_and_by_the_batch(client):
    """One message (a create's execute) and a batch of mixed kinds and outcomes add up the same way."""
    from types import SimpleNamespace

    from floor.counters import deliveries_recorded, messages_claimed
    from outbox.models import DeliveryState

    before = scrape(client)
    messages_claimed([SimpleNamespace(kind="execute")])
    messages_claimed([SimpleNamespace(kind=kind) for kind in ("unblock", "execute", "unblock")])
    deliveries_recorded([DeliveryState.PENDING])
    deliveries_recorded(["delivered", "dropped", "delivered", DeliveryState.PENDING])
    after = scrape(client)
    assert change(before, after, "resonate_messages_total", kind="execute") == 2
    assert change(before, after, "resonate_messages_total", kind="unblock") == 2
    assert change(before, after, "resonate_deliveries_total", status="success") == 2
    assert change(before, after, "resonate_deliveries_total", status="dropped") == 1
    assert change(before, after, "resonate_deliveries_total", status="error") == 2


def test_schedule_promises_are_counted_once_the_sweep_commits(protocol, client, django_capture_on_commit_callbacks):
    every_minute = {"id": "s", "cron": "* * * * *", "promiseId": "s.{{.timestamp}}", "promiseTimeout": 60_000}
    protocol("schedule.create", every_minute, now=0)
    before = scrape(client)
    with django_capture_on_commit_callbacks(execute=True):
        sweep(5 * 60_000, batch=100)
    assert change(before, scrape(client), "resonate_schedule_promises_total") == 5


def test_a_sweep_that_rolls_back_counts_no_schedule_promises(protocol, client, django_capture_on_commit_callbacks):
    every_minute = {"id": "s", "cron": "* * * * *", "promiseId": "s.{{.timestamp}}", "promiseTimeout": 60_000}
    protocol("schedule.create", every_minute, now=0)
    before = scrape(client)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError), transaction.atomic():
        sweep(5 * 60_000)
        raise RuntimeError("rolled back")
    assert change(before, scrape(client), "resonate_schedule_promises_total") == 0


# Several processes (prometheus_client multiprocess mode)

# A process that only counts: RESONATE_METRICS_DIR must reach prometheus_client before it is imported.
COUNTING = """
import sys
import django
django.setup()
from floor import counters as metrics
for n in range(int(sys.argv[1])):
    metrics.request_answered({"kind": "promise.get", "head": {"corrId": str(n), "status": 200}}, 0.001, {"promise.get"})
metrics.SCHEDULE_PROMISES.inc(int(sys.argv[1]))
"""


def run_counting_process(directory, count):
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env |= {"RESONATE_METRICS_DIR": str(directory), "DJANGO_SETTINGS_MODULE": "resonate_site.settings"}
    subprocess.run([sys.executable, "-c", COUNTING, str(count)], cwd=ROOT, env=env, check=True, timeout=60)


def test_metrics_add_up_the_counters_of_every_process(db, client, settings, tmp_path):
    run_counting_process(tmp_path, 2)
    run_counting_process(tmp_path, 3)
    settings.RESONATE = {**settings.RESONATE, "METRICS_DIR": str(tmp_path)}
    samples = scrape(client)
    assert value(samples, "resonate_request_total", kind="promise.get", status="200") == 5
    assert value(samples, "resonate_request_duration_seconds_count", kind="promise.get") == 5
    assert value(samples, "resonate_request_duration_seconds_bucket", kind="promise.get", le="0.001") == 5
    assert value(samples, "resonate_schedule_promises_total") == 5
    assert ("resonate_promises_pending", frozenset()) in samples


def test_a_fresh_start_clears_the_files_of_stopped_processes(tmp_path):
    run_counting_process(tmp_path, 1)
    assert list(tmp_path.glob("*.db"))
    assert clear_if_unused(tmp_path)
    assert not list(tmp_path.glob("*.db"))


def test_the_files_stay_while_another_process_still_writes_there(tmp_path):
    run_counting_process(tmp_path, 1)
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as live:
        try:
            (tmp_path / f"counter_{live.pid}.db").touch()
            assert not clear_if_unused(tmp_path)
            assert len(list(tmp_path.glob("counter_*.db"))) == 2
        finally:
            live.kill()


# The request log


def test_each_request_is_logged_with_its_kind_corr_id_status_and_duration(protocol, caplog):
    caplog.set_level(logging.DEBUG, logger="resonate.request")
    protocol("promise.get", {"id": "absent"}, now=0)
    protocol("no.such.kind", {})
    found, refused = [r for r in caplog.records if r.name == "resonate.request"]
    assert (found.kind, found.corrId, found.status, found.levelno) == ("promise.get", "c1", 404, logging.DEBUG)
    assert (refused.kind, refused.corrId, refused.status, refused.levelno) == ("no.such.kind", "c2", 400, logging.INFO)
    assert found.duration_ms > 0


LOGGING = """
import logging
import django
django.setup()
from floor.counters import request_answered
request_answered({"kind": "promise.get", "head": {"corrId": "c7", "status": 200}}, 0.0021, {"promise.get"})
request_answered({"kind": "task.acquire", "head": {"corrId": "c8", "status": 503}}, 0.5, {"task.acquire"})
logging.getLogger("elsewhere").info("a line with %s", "a quote \\" in it")
"""


def test_json_logs_are_one_json_object_per_line():
    env = {**os.environ, "RESONATE_LOG_FORMAT": "json", "LOG_LEVEL": "debug"}
    env["DJANGO_SETTINGS_MODULE"] = "resonate_site.settings"
    run = subprocess.run([sys.executable, "-c", LOGGING], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stderr.splitlines()]
    requests = [line for line in lines if line["logger"] == "resonate.request"]
    assert [(r["kind"], r["corrId"], r["status"], r["level"]) for r in requests] == [
        ("promise.get", "c7", 200, "DEBUG"),
        ("task.acquire", "c8", 503, "WARNING"),
    ]
    assert requests[0]["duration_ms"] == 2.1
    assert {"timestamp", "level", "logger", "message"} <= set(requests[0])
    assert {"logger": "elsewhere", "message": 'a line with a quote " in it'}.items() <= lines[-1].items()
