"""A Celery worker, unsupervised, rides out a broker outage while it is running tasks (it used to exit: kombu could not
restore the unacknowledged sweep task without a broker)."""

import os
import time

import pytest

from tests.e2e.conftest import FAST
from tests.e2e.servers import Process, runtime_python

pytestmark = [pytest.mark.postgres, pytest.mark.chaos]


def test_a_worker_busy_sweeping_survives_the_broker_going_away_and_takes_tasks_again(database_url, own_redis, tmp_path):
    env = {
        **os.environ,
        **FAST,
        "DATABASE_URL": database_url,
        "RESONATE_BACKGROUND": "celery",
        "RESONATE_HUB_URL": own_redis.url,
        "CELERY_BROKER_URL": own_redis.url,
        "RESONATE_SWEEP_PERIOD_MS": "1000",
    }
    celery = ["-m", "celery", "-A", "resonate_site"]
    worker = Process(
        [*celery, "worker", "--concurrency", "2", "--loglevel", "info"], env, tmp_path / "w.log", runtime_python()
    )
    beat = Process(
        [*celery, "beat", "--schedule", str(tmp_path / "schedule")], env, tmp_path / "b.log", runtime_python()
    )
    try:
        wait_for_log(tmp_path / "w.log", "timeouts.tasks.sweep", 30)  # sweeping when the broker goes
        own_redis.kill()
        time.sleep(3)
        assert worker.popen.poll() is None, f"the worker exited: see {tmp_path / 'w.log'}"
        own_redis.start()
        mark = (tmp_path / "w.log").read_text().count("timeouts.tasks.sweep")
        deadline = time.monotonic() + 10
        while (tmp_path / "w.log").read_text().count("timeouts.tasks.sweep") <= mark:
            assert time.monotonic() < deadline, "the worker took no task after the broker came back"
            assert worker.popen.poll() is None, f"the worker exited: see {tmp_path / 'w.log'}"
            time.sleep(0.2)
    finally:
        beat.stop()
        worker.stop()


def wait_for_log(path, text, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {path} after {timeout} s")
