"""The released Python SDK (resonate-sdk 0.8.1) runs real workflows against this server, unchanged.

Workers are separate processes running tests/e2e/sdk/py_app.py; clients are SDK instances in this
process. Only the SDK's public API is used; the server is checked through POST / where a scenario
says what must be stored.
"""

import asyncio
import base64
import json
import signal
import time
import uuid

import pytest
from resonate.types import Value

from tests.e2e.sdk.conftest import client, record, run
from tests.e2e.servers import Client, now_ms

pytestmark = pytest.mark.sdk


def fresh(name):
    return f"{name}-{uuid.uuid4().hex[:10]}"


def decoded(value):
    return json.loads(base64.b64decode(value["data"]))


def test_hello_run_and_rpc(deployment, workers, group, journal):
    workers(group)
    run_id, rpc_id = fresh("hello-run"), fresh("hello-rpc")

    async def scenario():
        async with client(deployment.client_url, group) as resonate:
            ran = await resonate.run(run_id, "greet", "run").result()
            called = await resonate.options(target=group).rpc(rpc_id, "greet", "rpc").result()
            return ran, called

    started = time.monotonic()
    assert run(scenario()) == ("hello run", "hello rpc")
    record(deployment, "hello", "run + rpc", (time.monotonic() - started) * 1000, "ms")

    server = Client(deployment.client_url)
    for id, result in [(run_id, "hello run"), (rpc_id, "hello rpc")]:
        status, data = server("promise.get", {"id": id})
        assert status == 200 and data["promise"]["state"] == "resolved"
        assert decoded(data["promise"]["value"]) == result
        assert decoded(data["promise"]["param"])["func"] == "greet"
    assert server("promise.get", {"id": rpc_id})[1]["promise"]["tags"]["resonate:target"] == f"poll://any@{group}"
    assert server("task.get", {"id": rpc_id})[1]["task"]["state"] == "fulfilled"


def test_idempotent_the_same_id_runs_once_for_every_caller(deployment, workers, group, journal):
    workers(group, n=2)
    run_key, rpc_key = fresh("once-run"), fresh("once-rpc")

    async def scenario():
        async with (
            client(deployment.client_url, group) as a,
            client(deployment.worker_url, group) as b,
        ):
            concurrently = await asyncio.gather(
                a.run(run_key, "once", run_key).result(),
                b.run(run_key, "once", run_key).result(),
                a.options(target=group).rpc(rpc_key, "once", rpc_key).result(),
                b.options(target=group).rpc(rpc_key, "once", rpc_key).result(),
            )
            again = [
                await b.run(run_key, "once", run_key).result(),
                await a.options(target=group).rpc(rpc_key, "once", rpc_key).result(),
            ]
            return concurrently + again

    results = run(scenario())
    assert results == [f"once:{run_key}"] * 2 + [f"once:{rpc_key}"] * 2 + [f"once:{run_key}", f"once:{rpc_key}"]
    assert len(journal.events("once", run_key)) == 1
    assert len(journal.events("once", rpc_key)) == 1


def test_fan_out_and_fan_in_local_and_remote_children(deployment, workers, group, journal):
    workers(group, n=2)
    id, n = fresh("fan"), 25

    async def scenario():
        async with client(deployment.client_url, group) as resonate:
            return await resonate.options(target=group).rpc(id, "fan_out", n).result()

    started = time.monotonic()
    squares = sum(i * i for i in range(n))
    assert run(scenario(), timeout=120) == {"local": squares, "remote": squares}
    record(deployment, "fan-out 25 local + 25 remote", "duration", (time.monotonic() - started) * 1000, "ms")

    server = Client(deployment.client_url)
    status, data = server("promise.search", {"tags": {"resonate:origin": id}, "limit": 100})
    assert status == 200
    children = [p for p in data["promises"] if p["id"] != id]
    assert len(children) == 2 * n and all(p["state"] == "resolved" for p in children)
    remote = [p for p in children if "resonate:target" in p["tags"]]
    assert len(remote) == n  # each rpc child is a promise with a task the workers ran


def test_durable_sleep_wakes_on_time(deployment, workers, group, journal):
    workers(group)
    id, seconds = fresh("nap"), 2

    async def scenario():
        async with client(deployment.client_url, group) as resonate:
            return await resonate.options(target=group).rpc(id, "napper", seconds).result()

    instants = run(scenario())
    slept = instants["after"] - instants["before"]
    lateness = slept - seconds * 1000
    record(deployment, "durable sleep 2 s", "wake lateness", lateness, "ms")
    assert lateness >= 0, f"woke {-lateness} ms early"
    assert lateness < 5000, f"woke {lateness} ms late"


@pytest.mark.parametrize("settle", ["resolve", "reject"])
def test_human_in_the_loop_a_promise_settled_by_another_client(deployment, workers, group, journal, settle):
    workers(group)
    key = fresh(f"approval-{settle}")

    async def scenario():
        async with client(deployment.client_url, group) as resonate, client(deployment.worker_url, group) as human:
            handle = resonate.options(target=group).rpc(key, "approval", key)
            [awaiting] = await asyncio.to_thread(journal.wait, "awaiting", key)
            if settle == "resolve":
                await human.promises.resolve(awaiting["promise"], Value(data="yes"))
            else:
                await human.promises.reject(awaiting["promise"], Value(data="no"))
            return await handle.result()

    answer = run(scenario())
    if settle == "resolve":
        assert answer == "approved:yes"
    else:
        assert answer.startswith("rejected:") and "no" in answer


def test_failures_reach_the_caller_and_a_retry_policy_retries(deployment, workers, group, journal):
    workers(group)
    broken, flaky = fresh("broken"), fresh("flaky")

    async def scenario():
        async with client(deployment.client_url, group) as resonate:
            target = resonate.options(target=group)
            with pytest.raises(Exception, match="out of order"):
                await target.rpc(broken, "broken", "out of order").result()
            return await target.rpc(flaky, "flaky", flaky, 2).result()

    assert run(scenario()) == f"{flaky} succeeded on attempt 3"
    assert len(journal.events("flaky", flaky)) == 3
    assert Client(deployment.client_url)("promise.get", {"id": broken})[1]["promise"]["state"] == "rejected"


def test_crash_recovery_another_worker_finishes_and_completed_steps_do_not_rerun(deployment, workers, group, journal):
    [crashing] = workers(group, ttl=2, env={"SDK_HANG_IN_STEP_TWO": "1"})
    key = fresh("steps")

    async def scenario():
        async with client(deployment.client_url, group) as resonate:
            handle = resonate.options(target=group).rpc(key, "steps", key)
            await asyncio.to_thread(journal.wait, "start", key, 2)  # steps one and two have started
            crashing.kill(signal.SIGKILL)  # in the middle of step two
            killed = time.monotonic()
            await asyncio.to_thread(workers, group, ttl=2)
            result = await handle.result()
            return result, time.monotonic() - killed

    result, recovery = run(scenario(), timeout=90)
    assert result == ["one", "two", "three"]
    record(deployment, "crash recovery (lease 2 s)", "kill to result", recovery * 1000, "ms")
    started = [(e["step"], e["pid"]) for e in journal.events("start", key)]
    done = [e["step"] for e in journal.events("done", key)]
    assert [step for step, _ in started] == ["one", "two", "two", "three"]
    assert started[1][1] == crashing.popen.pid and started[2][1] != crashing.popen.pid
    assert done == ["one", "two", "three"]  # step one completed before the crash and never ran again


def test_schedules_fire_repeatedly_and_get_and_delete_work(deployment, workers, group, journal):
    workers(group)
    name = fresh("every-second")

    async def scenario():
        async with client(deployment.client_url, group) as resonate:
            schedule = await resonate.options(target=group).schedule(name, "* * * * * *", "tick", args=(name,))
            await asyncio.to_thread(journal.wait, "tick", name, 3, 20)
            stored = await resonate.schedules.get(name)
            await schedule.delete()
            deleted_at = now_ms()
            with pytest.raises(Exception, match="404|not found|[Nn]ot [Ff]ound"):
                await resonate.schedules.get(name)
            return stored, deleted_at

    stored, deleted_at = run(scenario())
    assert stored.cron == "* * * * * *"
    time.sleep(2.5)  # long enough for a deleted schedule to fire twice more
    status, data = Client(deployment.client_url)(
        "promise.search", {"tags": {"resonate:target": f"poll://any@{group}"}, "limit": 100}
    )
    fired = data["promises"]
    assert status == 200 and len(fired) >= 3
    assert all(p["createdAt"] <= deleted_at for p in fired), "the schedule fired after it was deleted"
    journal.wait("tick", name, count=len(fired))  # every firing ran its function ...
    time.sleep(0.5)
    assert len(journal.events("tick", name)) == len(fired)  # ... once


def test_detached_work_and_handles_by_id(deployment, workers, group, journal):
    workers(group)
    parent, direct = fresh("detaching"), fresh("direct")

    async def scenario():
        async with client(deployment.client_url, group) as a, client(deployment.worker_url, group) as b:
            child = await a.options(target=group).rpc(parent, "parent_of_detached", parent).result()
            started = a.options(target=group).rpc(direct, "slow_square", 5)
            await started.id()  # created on the server
            by_id = await b.get(direct)
            detached = await b.get(child)
            return await by_id.result(), await detached.result(), await started.result()

    assert run(scenario()) == (25, 49, 25)


def test_load_200_concurrent_invocations_complete(deployment, workers, group, journal):
    workers(group, n=2)
    prefix, n = fresh("load"), 200

    async def scenario():
        async with client(deployment.client_url, group) as resonate:
            target = resonate.options(target=group)
            started = time.monotonic()
            results = await asyncio.gather(*(target.rpc(f"{prefix}-{i}", "square", i).result() for i in range(n)))
            return results, time.monotonic() - started

    results, elapsed = run(scenario(), timeout=180)
    assert results == [i * i for i in range(n)]
    record(deployment, "load: 200 concurrent rpc", "invocations/s", n / elapsed, "/s")
