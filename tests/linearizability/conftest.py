"""Fixtures of the concurrent histories: production mode to run them on, and the figures printed at the end."""

import json
import logging

import pytest

from tests.faults import run_deployment
from tests.linearizability.deployment import Deployment

logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise

RESULTS = []  # one row per run of histories (Sweep.row), printed at the end of the session
EXCERPTS = []  # the first counterexample found for each defect put in on purpose, printed likewise


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """Production mode, started once for the module's tests."""
    yield from run_deployment(Deployment(tmp_path_factory.mktemp("linearizability")))


def pytest_terminal_summary(terminalreporter):
    if not RESULTS:
        return
    terminalreporter.section("concurrent histories against production mode, checked for linearizability")
    for row in RESULTS:
        terminalreporter.write_line(json.dumps(row))
    for excerpt in EXCERPTS:
        terminalreporter.section("a counterexample the checker found for a server with a defect put in", sep="-")
        terminalreporter.write_line(excerpt)
