"""Workers stay connected for more than five minutes and still receive work (decision D12).

The Python SDK's HTTP client gives a stream 300 s in all and then stops listening for good; the
server ends every stream after SSE_MAX_AGE_MS (120 s here, the default) so the SDK reconnects first.
This runs with the production defaults for streams, so it takes six minutes: pytest --slow.
"""

import time
import uuid

import pytest

from tests.e2e.conftest import FAST
from tests.e2e.sdk.conftest import client, record, run, run_node

pytestmark = [pytest.mark.sdk, pytest.mark.slow]

CONNECTED_FOR = 310  # seconds: past the Python SDK's 300 s client timeout


@pytest.fixture(scope="module")
def server_settings():
    """Streams as in production: they last 120 s, with a keep-alive comment every 15 s."""
    return {k: v for k, v in FAST.items() if not k.startswith("RESONATE_SSE_")}


def test_workers_connected_for_over_five_minutes_still_receive_work(deployment, workers, group):
    [python] = workers(group)
    [typescript] = workers(f"{group}-ts", language="typescript")

    async def call(id):
        async with client(deployment.client_url, group) as resonate:
            return await resonate.options(target=group).rpc(id, "greet", "later").result()

    assert run(call(f"early-{uuid.uuid4().hex[:8]}")) == "hello later"
    time.sleep(CONNECTED_FOR)
    assert python.popen.poll() is None and typescript.popen.poll() is None
    started = time.monotonic()
    assert run(call(f"late-{uuid.uuid4().hex[:8]}"), timeout=30) == "hello later"
    record(deployment, f"python worker after {CONNECTED_FOR} s", "rpc", (time.monotonic() - started) * 1000, "ms")
    answer = run_node(["hello", deployment.client_url, f"{group}-ts", f"late-{uuid.uuid4().hex[:8]}"], timeout=30)
    assert answer == {"run": "hello run", "rpc": "hello rpc"}
