"""Losing a machine (tests/failover): each test brings its own PostgreSQL primary and standby, or Redis Sentinel
group, or database to back up, and runs beside the SQLite pass of bin/test (marker beside_sqlite), whose own tests
leave the machine time to spare. Their rows join the fault suite's table (var/chaos.jsonl)."""

from tests.chaos.conftest import pytest_terminal_summary  # noqa: F401 (the table of RESULTS, at the end of the run)
