"""Protocol throughput and latency over HTTP, beside pgbench running the same SQL, in one run.

    .venv/bin/python bench/run.py [--seconds 10] [--clients 1,4,16] [--workers 2] [--threads 4]

Starts the server the way README.md tells production users to (manage.py serve on PostgreSQL, a
fresh database `resonate_bench`), bench/floor.py (the least a Python front can do to send the same SQL: no
validation, no protocol rules, a blocking process per connection; what no Python server on this machine goes
beyond) and the peer resonate-pg (../shared/peers/resonate-pg: the protocol as PL/pgSQL behind a stdlib Python
HTTP server, in a scratch database `rpg_bench`). Then, for promise.create (with a target), promise.get,
promise.settle and the task.create → task.fulfill pair at each client count, back to back: wrk against the
server, the floor and the peer, and pgbench running the SQL the server sends (bench/pgbench/*.sql, prepared as
the server prepares them). Needs wrk and pgbench on the PATH (Debian: apt-get install wrk postgresql-contrib);
--no-peer when the peer is not beside the project, --no-floor to leave the floor out.
"""

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PYTHON = ROOT / ".venv" / "bin" / "python"
DB = "resonate_bench"
DATABASE_URL = f"postgres://postgres@127.0.0.1:5432/{DB}"
PORT = 8009
PEER = ROOT.parent / "shared" / "peers" / "resonate-pg"
PEER_DB, PEER_PORT = "rpg_bench", 18032
PEER_FILL_BATCH = 2_000  # resonate_rpc calls per statement when filling the peer (fill_peer)
FLOOR_PORT = 18033
PREFILL = 20_000  # promises for promise.get
SETTLE_PREFILL = 200_000  # pending promises for pgbench's settle, drawn at random: few draws repeat within a run
SETTLE_PER_THREAD = 60_000  # pending promises per wrk thread per settle run

SCENARIOS = {  # name: (wrk script, pgbench script, requests per unit)
    "promise.create": ("promise_create.lua", "promise_create.sql", 1),
    "promise.get": ("promise_get.lua", "promise_get.sql", 1),
    "promise.settle": ("promise_settle.lua", "promise_settle.sql", 1),
    "task.create+fulfill": ("task_pair.lua", "task_pair.sql", 2),
}


def psql(sql, db=DB):
    subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-q", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def fresh_database():
    psql(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", db="postgres")
    psql(f"CREATE DATABASE {DB}", db="postgres")
    subprocess.run(
        [PYTHON, "manage.py", "migrate", "-v", "0"],
        cwd=ROOT,
        check=True,
        env={**os.environ, "DATABASE_URL": DATABASE_URL},
    )
    pending = "'pending', '{{}}', '{{}}', '{{}}', 4102444800000, 1, NULL, false, false, NULL"
    psql(f"INSERT INTO promises_promise SELECT 'g-' || n, {pending.format()} FROM generate_series(1, {PREFILL}) n")
    psql(
        f"INSERT INTO promises_promise SELECT 'pg-' || n, {pending.format()}"
        f" FROM generate_series(1, {SETTLE_PREFILL}) n"
    )


def prefill_settle(run, threads):
    pending = "'pending', '{}', '{}', '{}', 4102444800000, 1, NULL, false, false, NULL"
    psql(
        f"INSERT INTO promises_promise SELECT 's-{run}-' || t || '-' || n, {pending} "
        f"FROM generate_series(1, {threads}) t, generate_series(1, {SETTLE_PER_THREAD}) n"
    )
    psql("VACUUM ANALYZE")


def rpc(kind, data):
    """SQL for one resonate-pg call, for filling its database as the server's is filled."""
    head = "jsonb_build_object('corrId', 'fill', 'version', '2026-04-01')"
    return f"resonate.resonate_rpc(jsonb_build_object('kind', '{kind}', 'head', {head}, 'data', {data}))"


def fresh_peer():
    psql(f"DROP DATABASE IF EXISTS {PEER_DB} WITH (FORCE)", db="postgres")
    psql(f"CREATE DATABASE {PEER_DB}", db="postgres")
    subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-q", "-v", "ON_ERROR_STOP=1", "-d", PEER_DB]
        + ["-f", str(PEER / "resonate.sql")],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    fill_peer("'g-' || n", PREFILL, "g-%")


def fill_peer(id_sql, count, like):
    """Create `count` pending promises on the peer through its own resonate_rpc (id_sql: the id, of n), 2,000 to a
    statement, and check they are all there. One statement calling resonate_rpc 20,000 times (as this harness did
    until 2026-12-04) left 12,493 promises behind, every call answered 200: the peer then refused 35-60% of
    promise.get and promise.settle as not found, and its figures for them counted those refusals."""
    create = rpc("promise.create", f"jsonb_build_object('id', {id_sql}, 'timeoutAt', 4102444800000)")
    for start in range(1, count + 1, PEER_FILL_BATCH):
        stop = min(start + PEER_FILL_BATCH - 1, count)
        psql(f"SELECT count({create}) FROM generate_series({start}, {stop}) n", db=PEER_DB)
    found = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-At", "-d", PEER_DB, "-c"]
        + [f"SELECT count(*) FROM resonate.promises WHERE id LIKE '{like}'"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if int(found) != count:
        raise SystemExit(f"the peer holds {found} of the {count} promises {like} filled: its figures would count 404s")


def prefill_peer_settle(run, threads):
    for t in range(1, threads + 1):
        fill_peer(f"'s-{run}-{t}-' || n", SETTLE_PER_THREAD, f"s-{run}-{t}-%")
    psql("VACUUM ANALYZE", db=PEER_DB)


def start_peer():
    env = {**os.environ, "DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{PEER_DB}", "PORT": str(PEER_PORT)}
    return start_answering("peer", [PYTHON, str(PEER / "shim.py")], PEER_PORT, env)


def start_floor(processes):
    command = [PYTHON, str(BENCH / "floor.py"), "--port", str(FLOOR_PORT), "--processes", str(processes)]
    return start_answering("floor", [*command, "--database", DATABASE_URL], FLOOR_PORT, os.environ)


def start_answering(label, command, port, env):
    """Start a protocol server of run.py's own (its output in results/<label>.log), once it answers a promise.get."""
    log = open(BENCH / "results" / f"{label}.log", "w")  # noqa: SIM115 (the process outlives this function)
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    body = b'{"kind":"promise.get","head":{"corrId":"r","version":"2026-04-01"},"data":{"id":"g-1"}}'
    for _ in range(100):
        try:
            urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/", data=body), timeout=1)
            return process
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{label} did not start; see bench/results/{label}.log")


def start_server(workers, threads):
    env = {
        **os.environ,
        **({"RESONATE_WSGI_THREADS": str(threads)} if threads else {}),
        "DATABASE_URL": DATABASE_URL,
        # Production mode, as README.md describes it (delivery is queued for Celery; no worker runs here).
        "RESONATE_BACKGROUND": "celery",
        "RESONATE_HUB_URL": "redis://127.0.0.1:6379/9",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/9",
        "RESONATE_AUTH_DISABLED": "true",  # measured without auth
    }
    log = open(BENCH / "results" / "server.log", "w")  # noqa: SIM115 (the server outlives this function)
    server = subprocess.Popen(
        [PYTHON, "manage.py", "serve", "--port", str(PORT), "--workers", str(workers), "--log-level", "warning"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/ready", timeout=1)
            return server
        except OSError:
            time.sleep(0.2)
    raise SystemExit("server did not become ready; see bench/results/server.log")


def stop(server):
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=30)


MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def wrk(script, clients, seconds, run, one_connection_per_thread=False, port=PORT):
    threads = clients if one_connection_per_thread else min(clients, 2)
    env = {**os.environ, "BENCH_DIR": str(BENCH / "wrk"), "BENCH_RUN": run, "BENCH_PREFILL": str(PREFILL)}
    out = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{clients}",
            f"-d{seconds}s",
            "--latency",
            "-s",
            str(BENCH / "wrk" / script),
            f"http://127.0.0.1:{port}/",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    p50, p99 = (latency(re.search(rf"\s{q}%\s+([\d.]+)(us|ms|s)\b", out)) for q in ("50", "99"))
    errors = re.search(r"refused answers: (\d+)", out)  # HTTP or head.status not 200 (bench/wrk/common.lua)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    return {
        "rate": rate,
        "requests": requests,
        "p50": p50,
        "p99": p99,
        "errors": int(errors.group(1)) if errors else 0,
        "socket_errors": socket_errors.group(1) if socket_errors else "",
    }


def latency(match):
    return float(match.group(1)) * MS[match.group(2)]


def pgbench(script, clients, seconds):
    with tempfile.TemporaryDirectory() as logs:
        out = subprocess.run(
            [
                "pgbench",
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-n",
                "-M",
                "prepared",  # as the server sends its hot statements (floor.rows.cursor_of): planned once
                "-c",
                str(clients),
                "-j",
                str(min(clients, 2)),
                "-T",
                str(seconds),
                "-D",
                f"prefill={PREFILL}",
                "-D",
                f"settle_prefill={SETTLE_PREFILL}",
                "-f",
                str(BENCH / "pgbench" / script),
                "-l",
                "--log-prefix",
                f"{logs}/tx",
                DB,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        tps = float(re.search(r"tps = ([\d.]+)", out).group(1))
        latencies = sorted(
            int(line.split()[2]) / 1000 for log in Path(logs).iterdir() for line in log.read_text().splitlines()
        )
    return {"rate": tps, "p50": percentile(latencies, 50), "p99": percentile(latencies, 99)}


def percentile(values, q):
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--workers", type=int, default=2, help="server processes")
    parser.add_argument("--threads", type=int, help="protocol threads per server process (default: the server's)")
    parser.add_argument("--only", help="comma-separated scenario names")
    parser.add_argument("--no-peer", action="store_true", help="leave out resonate-pg")
    parser.add_argument("--no-floor", action="store_true", help="leave out bench/floor.py")
    args = parser.parse_args()
    for tool in ("wrk", "pgbench", "psql"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not installed (Debian: apt-get install wrk postgresql-contrib)")
    (BENCH / "results").mkdir(exist_ok=True)
    clients = [int(c) for c in args.clients.split(",")]
    scenarios = {k: v for k, v in SCENARIOS.items() if not args.only or k in args.only.split(",")}

    fresh_database()
    if not args.no_peer:
        if not PEER.is_dir():
            raise SystemExit(f"the peer is not at {PEER} (use --no-peer)")
        fresh_peer()
    # All started at once, and each point measured on each of them back to back: this VM's speed drifts over
    # minutes, and a ratio is only worth what the two figures' moments have in common.
    started, targets = [], []
    try:
        started.append(start_server(args.workers, args.threads))
        targets.append(("server", PORT, prefill_settle))
        if not args.no_floor:
            started.append(start_floor(max(clients)))
            targets.append(("floor", FLOOR_PORT, prefill_settle))
        if not args.no_peer:
            started.append(start_peer())
            targets.append(("peer", PEER_PORT, prefill_peer_settle))
        rows = []
        for name, (lua, sql, per_unit) in scenarios.items():
            for c in clients:
                for label, port, prefill in targets:
                    rows.append(drive(label, port, prefill, name, lua, c, args.seconds))
                rows.append(baseline(name, sql, per_unit, c, args.seconds))
    finally:
        for process in started:
            stop(process)
    report(rows, args)


def drive(label, port, prefill, name, lua, clients, seconds):
    """One scenario at one client count against the server on `port`, with wrk: a (name, clients, result) row."""
    run = f"{label[0]}{name.split('.')[-1][:4]}{clients}x{int(time.time())}"
    if name == "promise.settle":
        prefill(run, min(clients, 2))
    result = wrk(lua, clients, seconds, run, one_connection_per_thread=name.startswith("task."), port=port)
    print(f"{label:7} {name:22} c={clients:<3} {fmt(result)}", flush=True)
    return (name if label == "server" else f"{label} {name}", clients, result)


def baseline(name, sql, per_unit, clients, seconds):
    """pgbench running the server's statements for one scenario at one client count: a row."""
    if name == "promise.settle":  # its promises pending again: the settle writes, as the server's do
        psql(
            "UPDATE promises_promise SET state = 'pending', settled_at = NULL"
            " WHERE id LIKE 'pg-%' AND state <> 'pending'"
        )
    result = pgbench(sql, clients, seconds)
    result["rate"] *= per_unit  # one pgbench transaction of task_pair.sql is two requests
    print(f"pgbench {name:22} c={clients:<3} {fmt(result)}", flush=True)
    return (f"pgbench {name}", clients, result)


def fmt(r):
    extra = f"  errors={r['errors']}" if r.get("errors") else ""
    return f"{r['rate']:8.0f}/s  p50 {r['p50']:7.2f} ms  p99 {r['p99']:7.2f} ms{extra}"


def report(rows, args):
    """One line per operation and client count. Ratios to the peer are of answers with status 200: the peer
    refuses some settles and gets under load, and a refusal is not an answer."""
    others = {}
    for name, c, r in rows:
        label, _, operation = name.partition(" ")
        if operation:
            others[(label, operation, c)] = r
    lines = [
        f"# POST / on PostgreSQL vs pgbench, the floor and resonate-pg, {time.strftime('%Y-%m-%d %H:%M')},"
        f" {os.cpu_count()} cores, {args.workers} server processes x {args.threads or 'default'} threads,"
        f" {args.seconds} s per point",
        "",
        "| operation | clients | server req/s | p50 ms | p99 ms | refused | pgbench req/s | server/pgbench"
        " | floor req/s | floor/pgbench | server/floor | resonate-pg req/s | refused | p99 ms | server/peer |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, c, r in rows:
        if " " in name:
            continue
        b, f, p = (others.get((label, name, c)) for label in ("pgbench", "floor", "peer"))
        ok = answered(r)
        base = f"{b['rate']:.0f} | {ok / b['rate']:.0%}" if b else "- | -"
        least = "- | - | -"
        if f and b:
            least = f"{answered(f):.0f} | {answered(f) / b['rate']:.0%} | {ok / answered(f):.0%}"
        versus = f"{p['rate']:.0f} | {p['errors']} | {p['p99']:.2f} | {ok / answered(p):.2f}x" if p else "- | - | - | -"
        lines.append(
            f"| {name} | {c} | {r['rate']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {r['errors']} | {base} | {least}"
            f" | {versus} |"
        )
    text = "\n".join(lines)
    print("\n" + text)
    (BENCH / "results" / f"protocol-{time.strftime('%Y%m%d-%H%M%S')}.md").write_text(text + "\n")


def answered(result):
    """Answers with status 200 a second."""
    return result["rate"] * (1 - result["errors"] / result["requests"]) if result["requests"] else 0.0


if __name__ == "__main__":
    sys.exit(main())
