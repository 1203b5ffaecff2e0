"""Schemathesis against the committed api/openapi.yaml, on the Django app in-process (WSGI).

Every operation of the schema, with generated inputs both valid and invalid for it: no answer may be a
5xx, and every answer must be one the schema documents (status, content type, body schema). Each
operation starts from a small seed (the schema's example ids, and "0", which Hypothesis tries first),
so generated requests reach live promises, tasks and schedules, not only 404s. The example count keeps the file
under a minute per backend; API_FUZZ_EXAMPLES=<n> runs n per operation, API_FUZZ_STATS=1 prints the
statuses seen.
"""

import os
from collections import Counter
from pathlib import Path

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from resonate_site.protocol.envelope import perform
from resonate_site.wsgi import application
from tests.conftest import TARGET

SCHEMA = Path(__file__).resolve().parent.parent / "api" / "openapi.yaml"
FAR = 4_102_444_800_000  # 2100-01-01
STATUSES = Counter()  # (operation, status) -> answers

schema = schemathesis.openapi.from_path(SCHEMA)
schema.app = application


@pytest.fixture(scope="module", autouse=True)
def report_statuses():
    yield
    if os.environ.get("API_FUZZ_STATS"):
        for (operation, status), count in sorted(STATUSES.items()):
            print(f"{operation:40} {status}: {count}")


@pytest.fixture(autouse=True)
def connection_kept_across_requests():
    """As Django's test client does: the end of a request must not close the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def token(db):
    """A user's token, and the seed: the schema's example ids (order-42, nightly) and Hypothesis' first ("0")."""
    for id in ("0", "00", "order-42"):
        perform("promise.create", {"id": id, "timeoutAt": FAR, "tags": {"resonate:target": TARGET}})
    perform("promise.create", {"id": "1", "timeoutAt": FAR})
    for id in ("0", "nightly"):
        perform(
            "schedule.create",
            {"id": id, "cron": "0 2 * * *", "promiseId": "{{.id}}.{{.timestamp}}", "promiseTimeout": 1},
        )
    return Token.objects.create(user=User.objects.create_user("fuzzer", is_staff=True)).key


@schema.parametrize()
@settings(
    max_examples=int(os.environ.get("API_FUZZ_EXAMPLES", 50)),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_api(case, token):
    # Input the schema allows may still be refused (400): it cannot say every rule of the protocol (the
    # address grammar, cron syntax, ids of at most 1024 bytes without NUL).
    excluded = [positive_data_acceptance]
    if negates(case, "tags"):
        # deepObject values are text on the wire: a `tags` value negated to null or 1 arrives as the
        # tag value "null" or "1", which is valid.
        excluded.append(negative_data_rejection)
    response = case.call_and_validate(headers={"Authorization": f"Token {token}"}, excluded_checks=excluded)
    STATUSES[case.operation.label, response.status_code] += 1


def negates(case, parameter):
    data = case.meta.phase.data
    return parameter in {getattr(data, "parameter", None), *(m.parameter for m in getattr(data, "mutations", ()))}
