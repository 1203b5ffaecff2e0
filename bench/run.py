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

--embedded measures the embedded mode instead (manage.py serve on SQLite, sweeping and delivering in its own
process, as README.md's first command runs it) beside production mode in the same run, with its Celery worker and
Beat sweeping as the embedded mode does (--no-background: without them), and the SQLite floor
(bench/floor_sqlite.py: the least a Python front can do on SQLite, for promise.create and promise.get).

--rounds N measures each point N times, interleaved (server, floor, peer, then again), and reports the median rate
and the median p50 and p99: this VM's speed drifts over minutes. --markdown prints only the table, for
bench/README.md.
"""

import argparse
import contextlib
import os
import re
import shutil
import signal
import sqlite3
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
EMBEDDED_PORT, SQLITE_FLOOR_PORT = 8010, 18034
EMBEDDED_DB = BENCH / "results" / "embedded.sqlite3"
SQLITE_FLOOR_DB = BENCH / "results" / "sqlite-floor.sqlite3"
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


SQLITE_PENDING = ("pending", "{}", "{}", "{}", 4102444800000, 1, None, 0, 0, None)


def fresh_embedded_database():
    """A new SQLite database for the embedded mode, migrated, with promise.get's promises."""
    for path in (EMBEDDED_DB, SQLITE_FLOOR_DB):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    subprocess.run(
        [PYTHON, "manage.py", "migrate", "-v", "0"],
        cwd=ROOT,
        check=True,
        env={**os.environ, "DATABASE_URL": f"sqlite:///{EMBEDDED_DB}"},
    )
    sqlite_fill(f"g-{n}" for n in range(1, PREFILL + 1))
    shutil.copyfile(EMBEDDED_DB, SQLITE_FLOOR_DB)  # the floor's own: two processes on one file wait for each other


def sqlite_fill(ids):
    with contextlib.closing(sqlite3.connect(EMBEDDED_DB, timeout=30)) as db, db:
        db.executemany(
            'INSERT INTO "promises_promise" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
            ((id, *SQLITE_PENDING) for id in ids),
        )


def prefill_embedded_settle(run, threads):
    sqlite_fill(f"s-{run}-{t}-{n}" for t in range(1, threads + 1) for n in range(1, SETTLE_PER_THREAD + 1))


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


def start_answering(label, command, port, env, cwd=None):
    """Start a protocol server (its output in results/<label>.log), once it answers a promise.get."""
    log = open(BENCH / "results" / f"{label}.log", "w")  # noqa: SIM115 (the process outlives this function)
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    body = b'{"kind":"promise.get","head":{"corrId":"r","version":"2026-04-01"},"data":{"id":"g-1"}}'
    for _ in range(100):
        try:
            urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/", data=body), timeout=1)
            return process
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{label} did not start; see bench/results/{label}.log")


def start_sqlite_floor():
    command = [
        PYTHON,
        str(BENCH / "floor_sqlite.py"),
        "--port",
        str(SQLITE_FLOOR_PORT),
        "--database",
        str(SQLITE_FLOOR_DB),
    ]
    return start_answering("sqlite-floor", command, SQLITE_FLOOR_PORT, os.environ)


def start_embedded():
    """manage.py serve as README.md's first command runs it: SQLite, sweeping and delivering in its own process."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{EMBEDDED_DB}",
        "RESONATE_BACKGROUND": "embedded",
        "RESONATE_HUB_URL": "",
        "RESONATE_AUTH_DISABLED": "true",  # measured without auth, as production mode is
        **QUIET_RETRIES,
    }
    command = [PYTHON, "manage.py", "serve", "--port", str(EMBEDDED_PORT), "--log-level", "warning"]
    return start_answering("embedded", command, EMBEDDED_PORT, env, cwd=ROOT)


def production_env(threads=None):
    return {
        **os.environ,
        **({"RESONATE_WSGI_THREADS": str(threads)} if threads else {}),
        "DATABASE_URL": DATABASE_URL,
        # Production mode, as README.md describes it (its Celery worker and Beat only with start_background).
        "RESONATE_BACKGROUND": "celery",
        "RESONATE_HUB_URL": "redis://127.0.0.1:6379/9",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/9",
        "RESONATE_AUTH_DISABLED": "true",  # measured without auth
        # As README.md's production mode sets it: every process counts in files there (prometheus_client's
        # multiprocess mode), which serve empties at start. Without it (before 2026-12-06) counts stayed in memory.
        "RESONATE_METRICS_DIR": str(BENCH / "results" / "metrics"),
        **QUIET_RETRIES,
    }


# A pending task's execute is re-sent every RETRY_TIMEOUT_MS (5 s). Nobody takes the tasks promise.create makes here,
# so with the default a run's creates (tens of thousands) came due again and again, and every later point measured
# that sweep as much as its own requests, in whichever mode sweeps in the measured process. Sweeping is measured by
# bench/timers.py; here each task's execute goes out once.
QUIET_RETRIES = {"RESONATE_RETRY_TIMEOUT_MS": "600000"}


def start_server(workers, threads):
    env = production_env(threads)
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


def start_background():
    """Production mode's background, as bin/production runs it: a Celery worker (4 processes) and Beat. Then it sweeps
    timeouts (a pending task's execute is re-sent every 5 s) as the embedded mode does in its own process."""
    import redis

    redis.Redis(db=9).flushdb()
    started = []
    for label, command in (
        ("celery-worker", ["worker", "--concurrency", "4", "--without-gossip", "--without-mingle"]),
        ("celery-beat", ["beat", "--schedule", str(BENCH / "results" / "beat-schedule")]),
    ):
        log = open(BENCH / "results" / f"{label}.log", "w")  # noqa: SIM115 (the process outlives this function)
        started.append(
            subprocess.Popen(
                [PYTHON, "-m", "celery", "-A", "resonate_site", *command, "--loglevel", "warning"],
                cwd=ROOT,
                env=production_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    time.sleep(5)  # Beat's first sweep has started
    return started


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
    parser.add_argument("--embedded", action="store_true", help="the embedded mode beside production mode")
    parser.add_argument(
        "--no-background",
        action="store_true",
        help="with --embedded: production mode without its Celery worker and Beat (nothing sweeps there)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="each point this many times, interleaved: medians")
    parser.add_argument("--markdown", action="store_true", help="print only the table")
    args = parser.parse_args()
    for tool in ("wrk", "pgbench", "psql"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not installed (Debian: apt-get install wrk postgresql-contrib)")
    (BENCH / "results").mkdir(exist_ok=True)
    clients = [int(c) for c in args.clients.split(",")]
    scenarios = {k: v for k, v in SCENARIOS.items() if not args.only or k in args.only.split(",")}
    peer = not args.no_peer and not args.embedded

    fresh_database()
    if args.embedded:
        fresh_embedded_database()
    if peer:
        if not PEER.is_dir():
            raise SystemExit(f"the peer is not at {PEER} (use --no-peer)")
        fresh_peer()
    # All started at once, and each point measured on each of them back to back: this VM's speed drifts over
    # minutes, and a ratio is only worth what the two figures' moments have in common.
    started, targets = [], []
    try:
        if args.embedded:
            started.append(start_embedded())
            targets.append(("embedded", EMBEDDED_PORT, prefill_embedded_settle))
        started.append(start_server(args.workers, args.threads))
        targets.append(("server", PORT, prefill_settle))
        if args.embedded and not args.no_background:
            started.extend(start_background())
        if not args.no_floor and args.embedded:
            started.append(start_sqlite_floor())
            targets.append(("sqlite-floor", SQLITE_FLOOR_PORT, None))
        elif not args.no_floor:
            started.append(start_floor(max(clients)))
            targets.append(("floor", FLOOR_PORT, prefill_settle))
        if peer:
            started.append(start_peer())
            targets.append(("peer", PEER_PORT, prefill_peer_settle))
        measured = {}  # (label, operation, clients): [result of each round]
        for name, (lua, sql, per_unit) in scenarios.items():
            for c in clients:
                for _ in range(args.rounds):
                    for label, port, prefill in targets:
                        if label == "sqlite-floor" and name not in SQLITE_FLOOR_SCENARIOS:
                            continue
                        result = drive(label, port, prefill, name, lua, c, args.seconds)
                        measured.setdefault((label, name, c), []).append(result)
                    if not args.embedded:
                        measured.setdefault(("pgbench", name, c), []).append(
                            baseline(name, sql, per_unit, c, args.seconds)
                        )
    finally:
        for process in started:
            stop(process)
    results = {key: median_of(rounds) for key, rounds in measured.items()}
    text = (report_embedded if args.embedded else report)(results, scenarios, clients, args)
    print(text if args.markdown else "\n" + text)
    kind = "embedded" if args.embedded else "protocol"
    (BENCH / "results" / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}.md").write_text(text + "\n")


SQLITE_FLOOR_SCENARIOS = ("promise.create", "promise.get")  # what bench/floor_sqlite.py answers


def median_of(rounds):
    """One result from several rounds of one point: the median rate, p50 and p99; the refusals of all of them."""
    middle = {key: statistics.median(r[key] for r in rounds) for key in ("rate", "p50", "p99")}
    return {
        **middle,
        "errors": sum(r.get("errors", 0) for r in rounds),
        "requests": sum(r.get("requests", 0) for r in rounds),
        "rounds": len(rounds),
    }


def drive(label, port, prefill, name, lua, clients, seconds):
    """One scenario at one client count against the server on `port`, with wrk: its result."""
    run = f"{label[0]}{name.split('.')[-1][:4]}{clients}x{time.time_ns() // 1_000_000}"
    if name == "promise.settle":
        prefill(run, min(clients, 2))
    quiet_machine()
    result = wrk(lua, clients, seconds, run, one_connection_per_thread=name.startswith("task."), port=port)
    print(f"{label:12} {name:22} c={clients:<3} {fmt(result)}", file=sys.stderr, flush=True)
    return result


QUIET_BUSY = 0.15  # the share of the machine's CPU time in use below which a point may start
QUIET_WAIT_S = 20.0  # the longest a point waits for it


def quiet_machine():
    """Wait (QUIET_WAIT_S at most) until the machine is quiet: what the previous point left to do in the background
    (production's Celery worker retrying the messages nobody listens to, every 500 ms for 10 s; the embedded mode
    dropping them at the end of their grace) runs before the next point, not during it. Otherwise one target's
    deferred work is counted against whichever target comes next."""
    until = time.monotonic() + QUIET_WAIT_S
    while time.monotonic() < until:
        before = _cpu_times()
        time.sleep(0.5)
        after = _cpu_times()
        total = sum(after) - sum(before)
        idle = (after[3] + after[4]) - (before[3] + before[4])  # idle and iowait
        if total <= 0 or 1 - idle / total < QUIET_BUSY:
            return


def _cpu_times():
    with open("/proc/stat") as stat:
        return [int(field) for field in stat.readline().split()[1:]]


def baseline(name, sql, per_unit, clients, seconds):
    """pgbench running the server's statements for one scenario at one client count: its result."""
    if name == "promise.settle":  # its promises pending again: the settle writes, as the server's do
        psql(
            "UPDATE promises_promise SET state = 'pending', settled_at = NULL"
            " WHERE id LIKE 'pg-%' AND state <> 'pending'"
        )
    result = pgbench(sql, clients, seconds)
    result["rate"] *= per_unit  # one pgbench transaction of task_pair.sql is two requests
    print(f"{'pgbench':12} {name:22} c={clients:<3} {fmt(result)}", file=sys.stderr, flush=True)
    return result


def fmt(r):
    extra = f"  errors={r['errors']}" if r.get("errors") else ""
    return f"{r['rate']:8.0f}/s  p50 {r['p50']:7.2f} ms  p99 {r['p99']:7.2f} ms{extra}"


def heading(args, what):
    rounds = f", median of {args.rounds} interleaved rounds" if args.rounds > 1 else ""
    return (  # a line of its own, not a heading: the table goes into bench/README.md's sections as it is
        f"*{what}, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, production: {args.workers} server"
        f" processes x {args.threads or 'default'} threads, {args.seconds} s per point{rounds}, a task's execute"
        f" re-sent after {int(QUIET_RETRIES['RESONATE_RETRY_TIMEOUT_MS']) // 1000} s*"
    )


def report(results, scenarios, clients, args):
    """One line per operation and client count. Every ratio is of answers with status 200 a second: a refusal is
    not an answer (the peer's were the harness's doing until 2026-12-04: fill_peer)."""
    lines = [
        heading(args, "POST / on PostgreSQL vs pgbench, the floor and resonate-pg"),
        "",
        "| operation | clients | server req/s | p50 ms | p99 ms | refused | pgbench req/s | server/pgbench"
        " | floor req/s | floor p99 ms | floor/pgbench | server/floor | resonate-pg req/s | refused | p99 ms"
        " | server/peer |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in scenarios:
        for c in clients:
            r = results[("server", name, c)]
            b, f, p = (results.get((label, name, c)) for label in ("pgbench", "floor", "peer"))
            ok = answered(r)
            base = f"{b['rate']:.0f} | {ok / b['rate']:.0%}" if b else "- | -"
            least = "- | - | - | -"
            if f and b:  # the floor's own p99: what the least Python front met on this machine at that moment
                least = f"{answered(f):.0f} | {f['p99']:.2f} | {answered(f) / b['rate']:.0%} | {ok / answered(f):.0%}"
            versus = "- | - | - | -"
            if p:
                versus = f"{answered(p):.0f} | {p['errors']} | {p['p99']:.2f} | {ok / answered(p):.2f}x"
            lines.append(
                f"| {name} | {c} | {ok:.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {r['errors']} | {base} | {least}"
                f" | {versus} |"
            )
    return "\n".join(lines)


def report_embedded(results, scenarios, clients, args):
    """One line per operation and client count: the embedded mode, production mode, and the SQLite floor."""
    lines = [
        heading(args, "POST / in the embedded mode (SQLite) vs production mode (PostgreSQL) and the SQLite floor"),
        "",
        "| operation | clients | embedded req/s | p50 ms | p99 ms | refused | production req/s | p99 ms"
        " | embedded/production | SQLite floor req/s | embedded/floor |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in scenarios:
        for c in clients:
            e, p, f = (results.get((label, name, c)) for label in ("embedded", "server", "sqlite-floor"))
            ok = answered(e)
            floor = f"{answered(f):.0f} | {ok / answered(f):.0%}" if f else "- | -"
            lines.append(
                f"| {name} | {c} | {ok:.0f} | {e['p50']:.2f} | {e['p99']:.2f} | {e['errors']} | {answered(p):.0f}"
                f" | {p['p99']:.2f} | {ok / answered(p):.2f}x | {floor} |"
            )
    return "\n".join(lines)


def answered(result):
    """Answers with status 200 a second."""
    return result["rate"] * (1 - result["errors"] / result["requests"]) if result["requests"] else 0.0


if __name__ == "__main__":
    sys.exit(main())
