"""A Celery worker, unsupervised, rides out broker outages while it is running tasks and holding reserved ones.

It used to exit twice over: kombu could not restore the unacknowledged sweep task without a broker (tasks are now
acknowledged on receipt), and, when the broker went just after coming back, kombu's Redis transport failed putting
back the wake-ups the worker had reserved (AttributeError, "Unrecoverable error"; resonate_site/celery.py)."""

import time

import pytest

from tests.e2e.conftest import production_env
from tests.e2e.servers import Process, runtime_python

pytestmark = [pytest.mark.postgres, pytest.mark.chaos]


def test_a_worker_busy_sweeping_survives_the_broker_going_away_and_takes_tasks_again(database_url, own_redis, tmp_path):
    env = production_env(database_url, own_redis.url, RESONATE_SWEEP_PERIOD_MS="1000")
    log = tmp_path / "w.log"
    celery = ["-m", "celery", "-A", "resonate_site"]
    # Started as README and deploy/supervisord.conf start it: without mingle, whose hello on reconnecting exits the
    # worker when the broker goes again meanwhile (a Celery behaviour the deployment switches off).
    worker_args = ["worker", "--concurrency", "1", "--without-gossip", "--without-mingle", "--loglevel", "info"]
    worker = Process([*celery, *worker_args], env, log, runtime_python())
    beat = Process(
        [*celery, "beat", "--schedule", str(tmp_path / "schedule")], env, tmp_path / "b.log", runtime_python()
    )
    try:
        wait_for_log(log, "timeouts.tasks.sweep", 30)  # sweeping when the broker goes
        for _ in range(3):
            back = broker_away_and_back(own_redis, worker, log)
            # Back, the worker takes what Beat queued meanwhile: one task runs, the next waits reserved. The broker
            # goes again at once, while it holds them.
            until(worker, log, back, lambda text: text.count("] received") >= 2, "took no task", timeout=15)
        back = broker_away_and_back(own_redis, worker, log)
        until(worker, log, back, lambda text: "succeeded" in text, "ran no task", timeout=10)
    finally:
        beat.stop()
        worker.stop()


def broker_away_and_back(own_redis, worker, log):
    """Redis gone for 3 s, then started again: where the worker's log stood when it came back."""
    own_redis.kill()
    time.sleep(3)
    assert worker.popen.poll() is None, exited(log)
    back = len(log.read_text())
    own_redis.start()
    return back


def until(worker, log, since, seen, failure, timeout):
    """Wait until seen(the worker's log since `since`), the worker alive throughout."""
    deadline = time.monotonic() + timeout
    while not seen(log.read_text()[since:]):
        assert time.monotonic() < deadline, f"the worker {failure} after the broker came back"
        assert worker.popen.poll() is None, exited(log)
        time.sleep(0.02)


def exited(log):
    """The failure's message: the end of the worker's log, since CI keeps no files (the cause is in the log)."""
    return "the worker exited; its log ended:\n" + "\n".join(log.read_text().splitlines()[-40:])


def wait_for_log(path, text, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {path} after {timeout} s")
