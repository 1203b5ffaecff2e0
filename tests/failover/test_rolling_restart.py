"""A rolling restart (`bin/production restart`) under load from both released SDKs (sdk_load.py). The server
processes are replaced one at a time, then the Celery worker, then Beat: no invocation may fail, and the SDKs' own
retries absorb what the restart costs clients (counted from the servers' logs: answers of 500 and above)."""

import functools
import subprocess
import uuid

import pytest

from tests.chaos.conftest import Deployment
from tests.e2e.servers import ROOT, assert_clean_logs
from tests.failover.sdk_load import INVOCATIONS, TS_CLIENTS, SdkLoad, answers_of_500_and_above
from tests.faults import run_deployment

pytestmark = [pytest.mark.beside_sqlite, pytest.mark.chaos, pytest.mark.sdk]


def test_a_rolling_restart_under_both_sdks_fails_no_invocation(tmp_path):
    for running in run_deployment(Deployment(tmp_path / "deployment")):
        with SdkLoad(running.url, f"rolling-{uuid.uuid4().hex[:8]}", tmp_path) as load:
            marks = running.log_marks()
            outcome = load.during(functools.partial(restart, running))
            retried = answers_of_500_and_above(running.logs_since(marks, lines=100_000))
        assert_clean_logs(*running.logs())
    assert outcome.errors == []
    assert outcome.failed() == []
    print(
        f"\nrolling restart under both SDKs: {outcome.seconds:.1f} s, {INVOCATIONS} Python and {TS_CLIENTS}"
        f" TypeScript invocations, 0 failed; answers of 500 and above the SDKs retried: {retried}"
    )


def restart(running):
    done = subprocess.run(["bin/production", "restart"], cwd=ROOT, env=running.env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
