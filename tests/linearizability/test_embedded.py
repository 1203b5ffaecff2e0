"""Concurrent histories against the embedded mode (`manage.py serve` on SQLite) are linearizable against the
executable specification and lose no acknowledged write: there the requests open at once share one transaction and
one commit (floor.transactions.run_together), a path no sequential history reaches. The same checker and workloads
as test_production.py; LINEARIZABILITY_HISTORIES sets how many histories per test."""

import re
import urllib.request

import pytest

from tests.faults import run_deployment
from tests.linearizability.deployment import EmbeddedDeployment
from tests.linearizability.sweep import run_sweep
from tests.linearizability.test_production import CLIENTS, HISTORIES, OPS, STOP_AFTER, assert_clean

pytestmark = pytest.mark.beside_postgres  # a SQLite database of its own: runs in the PostgreSQL pass's lane


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    yield from run_deployment(EmbeddedDeployment(tmp_path_factory.mktemp("linearizability-embedded")))


def committed_together(deployment):
    with urllib.request.urlopen(f"{deployment.urls[0]}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = re.search(r"^resonate_requests_committed_together_total (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_concurrent_histories_are_linearizable_where_requests_commit_together(deployment, tmp_path):
    marks, before = deployment.log_marks(), committed_together(deployment)

    found = run_sweep("embedded", deployment, HISTORIES or 20, tmp_path, CLIENTS, OPS, stop_after=STOP_AFTER)

    assert_clean(found, deployment, marks)
    together = committed_together(deployment) - before
    assert together >= found.ops // 10, f"{together} of {found.ops} requests committed together: the path went untested"


def test_branched_histories_are_linearizable_where_requests_commit_together(deployment, tmp_path):
    marks = deployment.log_marks()

    found = run_sweep("embedded-preload", deployment, HISTORIES or 8, tmp_path, CLIENTS, OPS, branched=True)

    assert_clean(found, deployment, marks)
