"""Where a chain of SDK steps spends its time, read off the wire: every request, reply and execute.

    .venv/bin/python bench/chain_trace.py [--modes embedded,production] [--chain 10]

Deploys each mode as bench/workflows.py does (the released Python SDK, one worker process), warms up,
then captures the loopback traffic of the server processes with tshark (apt-get install tshark; it needs
the right to capture, as root) while one workflow of --chain `ctx.rpc` steps runs. It prints, per
protocol operation, how many requests the chain sent and their latency at the server's socket (request
in, reply out), how long at least one request was in flight at a server, and how long from a settling
request's arrival to the next execute on the worker's stream.

Why it exists: bench/workflows.py's "chain per step" divides a whole workflow by its steps; this shows
what a step is made of. The SDK replays a workflow from its start on every resume and re-fences each
earlier child (task.fence of a promise.create it already made), so step k of a chain sends k + 1 fences:
a 10-step chain sends about 120 requests, not 60.
"""

import argparse
import asyncio
import collections
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workflows  # noqa: E402 (sets up sys.path and Django's settings module for the e2e helpers)

from tests.e2e.servers import Process  # noqa: E402

KIND = re.compile(rb'"kind"\s*:\s*"([a-z_.]+)"')


def capture(ports, path):
    command = ["tshark", "-i", "lo", "-q", "-w", str(path), "-f", " or ".join(f"tcp port {port}" for port in ports)]
    return subprocess.Popen(command, stderr=subprocess.DEVNULL)


def segments(path):
    """(seconds, source port, destination port, payload) of every TCP segment that carries data."""
    fields = ["frame.time_epoch", "tcp.srcport", "tcp.dstport", "tcp.payload"]
    command = ["tshark", "-r", str(path), "-Y", "tcp.len>0", "-T", "fields", *(f"-e{f}" for f in fields)]
    for line in subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines():
        at, source, destination, payload = line.split("\t")
        yield float(at), source, destination, bytes.fromhex(payload)


def timeline(path, ports, started, ended):
    """(requests [(in ms, out ms, kind)], executes on a stream [ms]) between started and ended."""
    asked, requests, executes = {}, [], []
    for at, source, destination, payload in segments(path):
        ms = (at - started) * 1000
        if not started <= at <= ended:
            continue
        if destination in ports:
            kind = KIND.search(payload)
            if kind:
                asked[source] = (ms, kind.group(1).decode())
        elif payload.startswith(b"HTTP/") and destination in asked:
            began, kind = asked.pop(destination)
            requests.append((began, ms, kind))
        elif b"data:" in payload and b'"execute"' in payload:
            executes.append(ms)
    return requests, executes


def in_flight(requests):
    """Milliseconds during which at least one request was being served."""
    total, current = 0.0, None
    for began, ended in sorted((r[0], r[1]) for r in requests):
        if current is None or began > current[1]:
            total += 0 if current is None else current[1] - current[0]
            current = [began, ended]
        else:
            current[1] = max(current[1], ended)
    return total + (0 if current is None else current[1] - current[0])


SETTLING = ("task.fulfill", "task.suspend", "task.fence", "promise.create")  # requests whose commit may send an execute


def report(mode, chain, took, requests, executes):
    print(
        f"\n{mode}: a chain of {chain} steps took {took:.0f} ms ({took / chain:.1f} ms a step), "
        f"{len(requests)} requests ({len(requests) / chain:.1f} a step), {len(executes)} executes"
    )
    by_kind = collections.defaultdict(list)
    for began, ended, kind in requests:
        by_kind[kind].append(ended - began)
    print(f"  {'operation':<26}{'requests':>9}{'p50 ms':>9}{'max ms':>9}{'sum ms':>9}")
    for kind, latencies in sorted(by_kind.items(), key=lambda item: -sum(item[1])):
        print(
            f"  {kind:<26}{len(latencies):>9}{statistics.median(latencies):>9.2f}"
            f"{max(latencies):>9.2f}{sum(latencies):>9.1f}"
        )
    busy = in_flight(requests)
    print(
        f"  a request in flight at a server: {busy:.0f} ms ({busy / took:.0%}); none: {took - busy:.0f} ms "
        "(the SDK between requests, and deliveries)"
    )
    # A settlement's execute may reach the stream before its reply leaves (a stream of the committing process gets it
    # from the committing thread): measured from the request's arrival, beside the reply's own time.
    settling = [(began, ended) for began, ended, kind in requests if kind in SETTLING]
    gaps = []
    for at in executes:
        began, ended = max(((b, e) for b, e in settling if b <= at), default=(None, None))
        if began is not None:
            gaps.append((at - began, ended - began))
    if gaps:
        to_execute, to_reply = (statistics.median(column) for column in zip(*gaps, strict=True))
        print(
            f"  a settling request in -> the next execute on the stream: p50 {to_execute:.2f} ms"
            f" (its reply out: p50 {to_reply:.2f} ms)"
        )


async def one_chain(client_url, group, chain, ports, pcap):
    from resonate.resonate import Resonate

    from tests.e2e.sdk import py_app

    resonate = py_app.register(Resonate(url=client_url, group=f"{group}-client"))
    target = resonate.options(target=group)
    try:
        for _ in range(3):  # warm-up: connections, imports, the first streams
            await target.rpc(f"warm-{uuid.uuid4().hex[:8]}", "chain", 2).result()
        tshark = capture(ports, pcap)
        await asyncio.sleep(3)  # tshark's start
        started = time.time()
        await target.rpc(f"chain-{uuid.uuid4().hex[:8]}", "chain", chain).result()
        ended = time.time()
        await asyncio.sleep(0.5)
        tshark.terminate()
        tshark.wait()
    finally:
        await resonate.stop()
    return started, ended


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="embedded,production")
    parser.add_argument("--chain", type=int, default=10)
    args = parser.parse_args()
    for mode in args.modes.split(","):
        with tempfile.TemporaryDirectory() as directory:
            logs = Path(directory)
            worker_url, client_url, stop = workflows.deploy(mode, logs)
            ports = sorted({url.rsplit(":", 1)[1] for url in (worker_url, client_url)})
            group = f"trace-{uuid.uuid4().hex[:6]}"
            worker = Process(["-m", "tests.e2e.sdk.py_app", worker_url, group], dict(os.environ), logs / "worker.log")
            try:
                time.sleep(3)  # the worker's stream
                started, ended = asyncio.run(one_chain(client_url, group, args.chain, ports, logs / "chain.pcap"))
                requests, executes = timeline(logs / "chain.pcap", ports, started, ended)
            finally:
                worker.stop()
                stop()
        report(mode, args.chain, (ended - started) * 1000, requests, executes)


if __name__ == "__main__":
    sys.exit(main())
