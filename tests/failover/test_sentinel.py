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

from tests.chaos.conftest import Deployment, record
from tests.chaos.test_faults import RECOVERY_BOUND_S, ride_out
from tests.e2e.servers import assert_clean_logs
from tests.faults import OwnSentinel, run_deployment

pytestmark = [pytest.mark.postgres, pytest.mark.chaos]  # their own PostgreSQL and Redis, in the PostgreSQL lane


def test_the_redis_primary_killed_and_its_replica_promoted_by_sentinel_loses_nothing(tmp_path):
    sentinel, promoted_s = OwnSentinel(tmp_path).start(), []

    def kill_the_primary(deployment, load):
        killed = time.monotonic()
        sentinel.kill_primary()  # returns once the sentinels name the replica primary
        promoted_s.append(time.monotonic() - killed)

    try:
        for running in run_deployment(Deployment(tmp_path, redis=sentinel)):
            group = f"sentinel-{uuid.uuid4().hex[:8]}"
            recovery, verdict, _, _ = ride_out(running, group, kill_the_primary, from_its_start=True)
            assert "Invariants hold over" in running.check().stdout
            assert_clean_logs(*running.logs())
    finally:
        sentinel.stop()
    record("Redis primary killed, Sentinel", recovery, verdict)
    print(
        f"\nthe sentinels promoted the replica {promoted_s[0]:.1f} s after the kill; recovered after {recovery:.1f} s"
    )
    assert verdict["errors"] == []
    assert verdict["lost"] == []
    assert verdict["early"] == []
    assert verdict["doubled"] == []
    assert recovery <= RECOVERY_BOUND_S
