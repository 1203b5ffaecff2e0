"""Losing a machine (tests/failover): each test brings its own PostgreSQL primary and standby, or Redis Sentinel
group, or database to back up, and runs in one lane of bin/test, so that its two lanes take about as long: beside the
SQLite pass (marker beside_sqlite), or, for the backup and Sentinel tests, in the PostgreSQL pass (marker postgres),
the SQLite lane running the fault suite after its pass. Their rows join the fault suite's table (var/chaos.jsonl)."""

from tests.chaos.conftest import pytest_terminal_summary  # noqa: F401 (the table of RESULTS, at the end of the run)
