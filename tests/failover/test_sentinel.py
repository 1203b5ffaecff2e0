"""Losing Redis's machine: the primary of a Redis Sentinel group killed under load (tests.faults.OwnSentinel: a
primary, a replica and three sentinels of the suite's own). The hub and Celery's broker both reach Redis through
the sentinels (RESONATE_HUB_URL and CELERY_BROKER_URL as sentinel://…), and follow the promoted replica.

Redis holds nothing that must survive (messages wait in the outbox, wake-ups are sent again by Beat): nothing may
be lost, and every part of the deployment must serve again within 10 s of the kill, the sentinels' own failover
(about 2-5 s here) included.
"""

import time
import uuid

import pytest

from tests.chaos.conftest import RESULTS, Deployment
from tests.chaos.load import Load
from tests.chaos.test_faults import AFTER_S, RATE, RECOVERY_BOUND_S, WARMUP_S, recovered_after
from tests.e2e.servers import assert_clean_logs
from tests.faults import OwnSentinel, run_deployment

pytestmark = [pytest.mark.beside_sqlite, pytest.mark.chaos]  # their own PostgreSQL and Redis


def test_the_redis_primary_killed_and_its_replica_promoted_by_sentinel_loses_nothing(tmp_path):
    sentinel = OwnSentinel(tmp_path).start()
    try:
        for running in run_deployment(Deployment(tmp_path, redis=sentinel)):
            load = Load(running.url, f"sentinel-{uuid.uuid4().hex[:8]}", rate=RATE)
            try:
                load.start()
                time.sleep(WARMUP_S)
                killed = time.monotonic()
                sentinel.kill_primary()
                promoted_s = time.monotonic() - killed
                recovery = recovered_after(running, load, killed)
                time.sleep(AFTER_S)
                load.stop()
                load.settle(timeout=60)
                verdict = load.verdict()
            finally:
                load.close()
            assert "Invariants hold over" in running.check().stdout
            assert_clean_logs(*running.logs())
    finally:
        sentinel.stop()
    RESULTS.append(
        {
            "fault": "Redis primary killed, Sentinel",
            "recovery s": round(recovery, 2),
            **{key: len(value) if isinstance(value, list) else value for key, value in verdict.items()},
            "health worst ms": None,
            "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
    )
    print(f"\nthe sentinels promoted the replica {promoted_s:.1f} s after the kill; recovered after {recovery:.1f} s")
    assert verdict["errors"] == []
    assert verdict["lost"] == []
    assert verdict["early"] == []
    assert verdict["doubled"] == []
    assert recovery <= RECOVERY_BOUND_S
