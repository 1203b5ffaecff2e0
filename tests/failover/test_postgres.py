"""Losing the database's machine: a PostgreSQL primary stopped at once (pg_ctl stop -m immediate) under load, its
streaming standby promoted 1.2 s later, as Patroni, repmgr or a managed database's failover does.

Each test runs its own primary and standby (tests.faults.PgCluster: the machine's PostgreSQL binaries, ports and a
directory of their own) under its own bin/production, and reaches the promoted standby as production would: by
libpq's multi-host DATABASE_URL (target_session_attrs=read-write: libpq keeps the host that takes writes), or
through one address that moves to the new primary (a virtual IP, PgBouncer: here a PgProxy re-pointed).

With synchronous replication every acknowledged write is on the standby: nothing may be lost, and every part of
the deployment must serve again within 10 s of the promotion. With asynchronous replication and a standby 200 ms
behind, the commits the standby had not received when the primary went are lost, as PostgreSQL allows; the run
measures how many, and holds everything else (nothing early, the invariants, recovery).
"""

import functools
import time
import uuid

import pytest

from tests.chaos.conftest import Deployment, record
from tests.chaos.load import Load
from tests.chaos.test_faults import AFTER_S, RATE, RECOVERY_BOUND_S, WARMUP_S, recovered_after
from tests.e2e.servers import assert_clean_logs
from tests.failover.sdk_load import SdkLoad
from tests.faults import PgCluster, PgProxy, run_deployment

pytestmark = [pytest.mark.beside_sqlite, pytest.mark.chaos]  # their own PostgreSQL and Redis

PROMOTED_AFTER_S = 1.2  # from the primary's loss to the standby's promotion


def multi_host(cluster):
    return cluster.multi_host_url


def run_failover(tmp_path, name, cluster, served_url=None, moving=None, settle_s=60, sdks=False):
    """Load, the primary lost, the standby promoted (and the moving address re-pointed): the ledger's verdict. With
    `sdks`, both released SDKs invoke throughout too (sdk_load.py), and none of their invocations may fail."""
    deployment = Deployment(tmp_path, cluster=cluster, served_url=served_url or cluster.multi_host_url)
    for running in run_deployment(deployment):
        load = Load(running.url, f"failover-{uuid.uuid4().hex[:8]}", rate=RATE)
        try:
            load.start()
            time.sleep(WARMUP_S)
            if sdks:
                fail_over = functools.partial(lose_the_primary, cluster, moving, running, load)
                with SdkLoad(running.url, f"failover-sdk-{uuid.uuid4().hex[:8]}", tmp_path) as sdk_load:
                    outcome = sdk_load.during(fail_over)
                assert outcome.errors == []
                assert outcome.failed() == []
                recovery = outcome.result
            else:
                recovery = lose_the_primary(cluster, moving, running, load)
            time.sleep(AFTER_S)
            load.stop()
            load.settle(timeout=settle_s)
            verdict = load.verdict()
        finally:
            load.close()
        checked = running.check()  # manage.py invariants, on the promoted standby
        assert "Invariants hold over" in checked.stdout
        assert_clean_logs(*running.logs())
    record(name, recovery, verdict)
    assert verdict["errors"] == []
    assert verdict["early"] == []
    assert recovery <= RECOVERY_BOUND_S
    return verdict


def lose_the_primary(cluster, moving, running, load):
    """The primary lost, the standby promoted 1.2 s later (and the moving address re-pointed); then the time until the
    whole deployment serves again (recovered_after), counted from the promotion."""
    cluster.crash_primary()
    time.sleep(PROMOTED_AFTER_S)
    cluster.promote()
    if moving is not None:
        moving(f"upstream 127.0.0.1:{cluster.ports['standby']}")
    return recovered_after(running, load, time.monotonic())


def test_a_synchronous_standby_promoted_loses_nothing_through_the_multi_host_url(tmp_path):
    cluster = PgCluster(synchronous=True).start()
    try:
        verdict = run_failover(tmp_path, "PostgreSQL failover, synchronous, multi-host URL", cluster, sdks=True)
    finally:
        cluster.stop()
    assert verdict["lost"] == []
    assert verdict["doubled"] == []


def test_a_synchronous_standby_promoted_loses_nothing_through_an_address_that_moves(tmp_path):
    cluster = PgCluster(synchronous=True).start()
    endpoint = PgProxy(tmp_path, upstream=f"127.0.0.1:{cluster.ports['primary']}")
    try:
        verdict = run_failover(
            tmp_path,
            "PostgreSQL failover, synchronous, moving address",
            cluster,
            served_url=lambda database: endpoint.url(database),
            moving=endpoint,
        )
    finally:
        endpoint.stop()
        cluster.stop()
    assert verdict["lost"] == []
    assert verdict["doubled"] == []


def test_an_asynchronous_standby_behind_loses_at_most_what_it_had_not_received(tmp_path):
    """What asynchronous replication costs, measured (README: the figure, and synchronous replication advised). Work
    acknowledged and lost is done again: a workflow the standby never saw finish is executed and fulfilled a second
    time (the ledger's doubled), as after any lost reply."""
    cluster = PgCluster(synchronous=False, replication_delay_ms=200).start()
    try:
        verdict = run_failover(
            tmp_path, "PostgreSQL failover, asynchronous, standby 200 ms behind", cluster, settle_s=20
        )  # what was lost never finishes: 20 s is ten retry timeouts for the rest
    finally:
        cluster.stop()
    print(f"\nasynchronous failover: {len(verdict['lost'])} of {verdict['workflows']} workflows lost")
