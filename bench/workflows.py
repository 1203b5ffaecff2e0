"""Real workflows through the released Python SDK, in the embedded mode and in production mode, in one run.

    .venv/bin/python bench/workflows.py [--modes embedded,production] [--repeat 20] [--chain 10]
                                        [--load 200] [--workers 1]

For each mode it starts the deployment as README.md does (embedded: one `serve` process on SQLite;
production: two `serve` processes, a Celery worker and Beat, PostgreSQL and Redis), SDK worker
processes of one group (tests/e2e/sdk/py_app.py) connected to one server process and a client
connected to the other, then measures:

- hello: `run` then `rpc` of a one-line function, p50 and p99 over --repeat rounds (after a warm-up);
- chain: a workflow of --chain `ctx.rpc` steps, one after another (each suspends the workflow until
  a worker answers and the workflow is resumed): per-step latency, (T(chain) - T(1)) / (chain - 1),
  p50 over --repeat rounds, and steps per second;
- load: --load `rpc` invocations started at once, invocations per second until the last result.
"""

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")

from tests.e2e.conftest import FAST, Cluster, embedded_env, migrate, start_embedded  # noqa: E402
from tests.e2e.servers import Process  # noqa: E402

PG_ADMIN = "host=127.0.0.1 user=postgres dbname=postgres"


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def fresh_postgres(name):
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        connection.execute(f"CREATE DATABASE {name}")
    url = f"postgres://postgres@127.0.0.1:5432/{name}"
    migrate(url)
    return url


SETTINGS = {**FAST, "RESONATE_RETRY_TIMEOUT_MS": "5000", "RESONATE_SSE_MAX_AGE_MS": "120000"}


def deploy(mode, logs):
    """(worker URL, client URL, stop function) of a fresh deployment."""
    if mode == "embedded":
        url = f"sqlite:///{logs / 'embedded.sqlite3'}"
        migrate(url)
        server = start_embedded(embedded_env(url, SETTINGS), logs / "server.log")
        return server.url, server.url, server.process.stop
    import redis

    redis.Redis(db=9).flushdb()
    env = {
        **os.environ,
        **SETTINGS,
        "DATABASE_URL": fresh_postgres("resonate_workflows"),
        "RESONATE_BACKGROUND": "celery",
        "RESONATE_HUB_URL": "redis://127.0.0.1:6379/9",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/9",
        "RESONATE_AUTH_DISABLED": "true",
    }
    cluster = Cluster(env, logs)
    cluster.start()
    return cluster.servers[0].url, cluster.servers[1].url, cluster.stop


async def measure(client_url, group, repeat, chain, load):
    from resonate.resonate import Resonate

    from tests.e2e.sdk import py_app

    resonate = py_app.register(Resonate(url=client_url, group=f"{group}-client"))
    target = resonate.options(target=group)
    run = uuid.uuid4().hex[:8]
    try:

        async def hello(n):
            started = time.monotonic()
            assert await resonate.run(f"{run}-run-{n}", "greet", "run").result() == "hello run"
            assert await target.rpc(f"{run}-rpc-{n}", "greet", "rpc").result() == "hello rpc"
            return (time.monotonic() - started) * 1000

        async def chained(n, steps):
            started = time.monotonic()
            assert await target.rpc(f"{run}-chain-{steps}-{n}", "chain", steps).result() == sum(
                i * i for i in range(steps)
            )
            return (time.monotonic() - started) * 1000

        for n in range(3):  # warm-up: connections, imports, the first SSE streams
            await hello(-1 - n)
        hellos = [await hello(n) for n in range(repeat)]
        singles = [await chained(n, 1) for n in range(repeat)]
        chains = [await chained(n, chain) for n in range(repeat)]
        per_step = (statistics.median(chains) - statistics.median(singles)) / (chain - 1)
        started = time.monotonic()
        results = await asyncio.gather(*(target.rpc(f"{run}-load-{i}", "square", i).result() for i in range(load)))
        assert results == [i * i for i in range(load)]
        load_rate = load / (time.monotonic() - started)
    finally:
        await resonate.stop()
    return {
        "hello p50 ms": statistics.median(hellos),
        "hello p99 ms": percentile(hellos, 99),
        "chain per step p50 ms": per_step,
        "chain steps/s": chain / (statistics.median(chains) / 1000),
        "load invocations/s": load_rate,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="embedded,production")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--chain", type=int, default=10)
    parser.add_argument("--load", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1, help="SDK worker processes")
    args = parser.parse_args()
    figures = {}
    for mode in args.modes.split(","):
        with tempfile.TemporaryDirectory() as directory:
            logs = Path(directory)
            worker_url, client_url, stop = deploy(mode, logs)
            group = f"bench-{uuid.uuid4().hex[:6]}"
            workers = [
                Process(["-m", "tests.e2e.sdk.py_app", worker_url, group], dict(os.environ), logs / f"worker-{n}.log")
                for n in range(args.workers)
            ]
            try:
                time.sleep(3)  # the workers' SSE streams
                figures[mode] = asyncio.run(measure(client_url, group, args.repeat, args.chain, args.load))
            finally:
                for worker in workers:
                    worker.stop()
                stop()
        print(f"{mode}: " + ", ".join(f"{k} {v:.1f}" for k, v in figures[mode].items()), flush=True)
    names = next(iter(figures.values())).keys()
    print(f"\n{'':26}" + "".join(f"{mode:>14}" for mode in figures))
    for name in names:
        print(f"{name:<26}" + "".join(f"{figures[mode][name]:>14.1f}" for mode in figures))


if __name__ == "__main__":
    sys.exit(main())
