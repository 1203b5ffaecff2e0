"""The released TypeScript SDK (@resonatehq/sdk 0.11.5) runs real workflows against this server, unchanged.

Workers and clients are Node.js processes running tests/e2e/sdk/ts/app.mjs. The SDK asks for Node
22; on Node 20 a preloaded polyfill (ts/polyfill.mjs) adds the one missing API, Promise.withResolvers.
"""

import base64
import json
import time
import uuid

import pytest

from tests.e2e.sdk.conftest import record, run_node
from tests.e2e.servers import Client

pytestmark = pytest.mark.sdk


def fresh(name):
    return f"ts-{name}-{uuid.uuid4().hex[:10]}"


def test_hello_run_and_rpc(deployment, workers, group):
    workers(group, language="typescript")
    id = fresh("hello")
    started = time.monotonic()
    assert run_node(["hello", deployment.client_url, group, id]) == {"run": "hello run", "rpc": "hello rpc"}
    record(deployment, "typescript hello (with node start)", "run + rpc", (time.monotonic() - started) * 1000, "ms")
    status, data = Client(deployment.client_url)("promise.get", {"id": f"{id}-rpc"})
    assert status == 200 and data["promise"]["state"] == "resolved"
    assert json.loads(base64.b64decode(data["promise"]["value"]["data"])) == "hello rpc"
    assert data["promise"]["tags"]["resonate:target"] == f"poll://any@{group}"


def test_fan_out_and_fan_in_local_and_remote_children(deployment, workers, group):
    workers(group, n=2, language="typescript")
    id, n = fresh("fan"), 25
    squares = sum(i * i for i in range(n))
    started = time.monotonic()
    assert run_node(["fanout", deployment.client_url, group, id, str(n)], timeout=120) == {
        "local": squares,
        "remote": squares,
    }
    record(deployment, "typescript fan-out 25 + 25", "duration", (time.monotonic() - started) * 1000, "ms")


def test_durable_sleep_wakes_on_time(deployment, workers, group):
    workers(group, language="typescript")
    instants = run_node(["sleep", deployment.client_url, group, fresh("nap"), "2"])
    lateness = instants["after"] - instants["before"] - 2000
    record(deployment, "typescript durable sleep 2 s", "wake lateness", lateness, "ms")
    assert 0 <= lateness < 5000, f"woke {lateness} ms after the deadline"
