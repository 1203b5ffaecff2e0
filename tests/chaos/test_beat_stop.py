"""Celery Beat stopped by SIGTERM, as a supervisor or a test teardown stops it, exits cleanly wherever it was.

Celery's own handler closed the scheduler and raised SystemExit from inside a publish's socket read: Beat logged
"Couldn't apply scheduled task sweep: I/O operation on closed file" with a traceback (a CI teardown met it).
resonate_site/beat.py's exit_between_ticks lets the tick under way finish, then stops."""

import time

import pytest
import redis

from tests.e2e.conftest import production_env
from tests.e2e.servers import Process, runtime_python

pytestmark = [pytest.mark.postgres, pytest.mark.chaos]


@pytest.fixture
def beat(database_url, own_redis, tmp_path):
    # a delivery pass and a sweep due every 200 ms: Beat publishes at each tick (once a second)
    env = production_env(database_url, own_redis.url, RESONATE_SWEEP_PERIOD_MS="200")
    log = tmp_path / "beat.log"
    args = ["-m", "celery", "-A", "resonate_site", "beat", "--schedule", str(tmp_path / "schedule")]
    process = Process([*args, "--loglevel", "info"], env, log, runtime_python())
    queue = redis.Redis.from_url(own_redis.url)
    deadline = time.monotonic() + 30
    while queue.llen("celery") < 3:  # it has published a few wake-ups: it ticks
        assert process.popen.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "Beat published nothing in 30 s:\n" + log.read_text()
        time.sleep(0.05)
    # Half a tick on: the third wake-up is a tick's first, whose second follows 10-40 ms later. A test that paused
    # Redis now could catch that second publish under way, logged before the test looked (a CI run met it).
    time.sleep(0.5)
    yield process, log
    process.stop()


def test_beat_stopped_in_the_middle_of_a_publish_finishes_it_and_exits_cleanly(beat, own_redis):
    process, log = beat
    own_redis.pause()  # Beat's next publish waits for the broker's answer (its socket timeout is 2 s)
    try:
        since = len(log.read_text())
        deadline = time.monotonic() + 5
        while "Sending due task" not in log.read_text()[since:]:  # logged as the publish starts (Beat ticks each 1 s)
            assert time.monotonic() < deadline, "Beat sent nothing in 5 s:\n" + log.read_text()
            time.sleep(0.01)
        time.sleep(0.2)
        process.popen.terminate()
        time.sleep(0.4)
        assert process.popen.poll() is None, "Beat gave up its publish at SIGTERM:\n" + log.read_text()
    finally:
        own_redis.resume()
    assert process.popen.wait(timeout=10) == 0  # the publish answered, Beat exits
    assert_clean(log.read_text())


def test_beat_stopped_between_ticks_exits_at_once(beat):
    process, log = beat
    started = time.monotonic()
    process.popen.terminate()
    assert process.popen.wait(timeout=10) == 0
    assert time.monotonic() - started < 3
    assert_clean(log.read_text())


def assert_clean(text):
    assert "Traceback" not in text, text
    assert "Couldn't apply" not in text, text
    assert "ERROR" not in text and "CRITICAL" not in text, text
