"""Backup and restore, as README's runbook has it: `pg_dump -Fc` taken while production mode works, restored with
`pg_restore` into a fresh database, production mode started on it (migrated first, as after an upgrade).

Everything the dump holds must finish on the restored deployment: workflows whose tasks were pending get their
executes, timers that were pending fire (late by the restore), every message the outbox held goes out. Work done
after the dump is done again there (its unblocks arrive twice, its workflows run twice): a restore goes back to
the dump's moment, and the protocol delivers at least once.
"""

import subprocess
import time
import uuid

import pytest

from tests.chaos.conftest import Deployment, record
from tests.chaos.load import Load
from tests.chaos.test_faults import RATE, WARMUP_S
from tests.e2e.servers import assert_clean_logs
from tests.faults import run_deployment

# Its own PostgreSQL database and Redis; in the PostgreSQL pass, whose lane is shorter (tests/failover/conftest.py)
pytestmark = [pytest.mark.postgres, pytest.mark.chaos]


def test_a_dump_taken_under_load_and_restored_into_a_fresh_database_finishes_all_it_held(tmp_path):
    dump = tmp_path / "resonate.dump"
    first = Deployment(tmp_path / "first")
    load = None
    try:
        for running in run_deployment(first):
            load = Load(running.url, f"backup-{uuid.uuid4().hex[:8]}", rate=RATE)
            load.start()
            time.sleep(WARMUP_S + 1)
            load.stop()  # nothing new from here: what the dump holds is what must finish; the rest is in flight
            started = time.monotonic()
            subprocess.run(["pg_dump", "-Fc", "-f", str(dump), running.direct_url], check=True)
            dump_s = time.monotonic() - started
            unfinished = len(load.missing())
            assert_clean_logs(*running.logs())
        second = Deployment(tmp_path / "second", port=first.port, restore=dump)  # the address the clients know
        for running in run_deployment(second):
            restored = time.monotonic()
            while True:  # the ledger saw work finished after the dump: the restored database must finish it again
                load.settle(timeout=60)
                verdict = load.verdict()
                if not verdict["lost"] or time.monotonic() - restored > 60:
                    break
                time.sleep(0.5)
            settled_s = time.monotonic() - restored
            assert "Invariants hold over" in running.check().stdout
            assert_clean_logs(*running.logs())
    finally:
        if load is not None:
            load.close()
    record("pg_dump under load, restored", settled_s, verdict)
    print(f"\npg_dump took {dump_s:.2f} s with {unfinished} things unfinished; all finished {settled_s:.1f} s after")
    assert unfinished > 0  # the dump was taken with work in flight
    assert verdict["errors"] == []
    assert verdict["lost"] == []
    assert verdict["early"] == []
