"""Issue 26, item 5: statements sent together prepared by name (a), as PL/pgSQL functions (b), or not prepared (c).

    git worktree add --detach /tmp/design-a 644d4a8                   # design a: the code before functions
    .venv/bin/python bench/prepare_designs.py http --a-tree /tmp/design-a [--rounds 5] [--seconds 10] [--clients 16]

    .venv/bin/python bench/prepare_designs.py trace                   # the SQL each design sends, per operation
    .venv/bin/python bench/prepare_designs.py inprocess [--rounds 5] [--count 2000] [--threshold off] [--workflow]
    .venv/bin/python bench/prepare_designs.py http [--rounds 5] [--seconds 10] [--clients 16]
    .venv/bin/python bench/prepare_designs.py instructions [--rounds 1] [--only promise.settle,task.fulfill]
    .venv/bin/python bench/prepare_designs.py tables bench/results/prepare-designs-….json   # again, with ratios

The designs are bench/prepare_variant.py's, each in processes of its own (RESONATE_PREPARE_DESIGN), run one after
the other in rounds (a b c, then b c a, then c a b, …) so that this VM's drift falls on all three alike. Design a
runs from the checkout --a-tree names (the code as it stood at 644d4a8, with the same .venv); without it, b and c
alone.

inprocess: one process per design and round answers `count` requests of each operation through
resonate_site.protocol.envelope.answer (after `count / 10` to warm up): promise.create (with a target),
promise.settle (of pending promises), task.create, then task.fulfill of the tasks it created. Per request: the
process's CPU (time.process_time), its PostgreSQL backend's CPU (/proc/<pid>/schedstat), wall p50.

http: three `manage.py serve --workers 2` (one per design, started anew each round, one database), then wrk at
`clients` for `seconds` per operation and design, as bench/run.py drives them (its wrk scripts): req/s, p50, p99,
and per request the CPU of the server processes and of their PostgreSQL backends (/proc/<pid>/stat).

instructions: bench/instructions.py (valgrind) with each design's settings: the server process's instructions per
request, which the VM's load does not move.

Databases resonate_bench_pd_*, made and dropped here. Results: bench/results/prepare-designs-*.{md,json}.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PYTHON = ROOT / ".venv" / "bin" / "python"
DESIGNS = ("a", "b", "c")
DATABASE = "resonate_bench_pd_{}"
PORTS = {"a": 18141, "b": 18142, "c": 18143}
APPLICATION = "resonate_bench_pd_{}"  # application_name of a design's server connections
FAR = 4102444800000
SETTLE_PER_THREAD = 40_000  # pending promises per wrk thread per settle run
OPERATIONS = ("promise.create", "promise.settle", "task.create", "task.fulfill")
# --workflow: a workflow step's operations after those, on the tasks promise.create made: acquired (version 0 -> 1),
# a fence creating a child, a suspend awaiting it. Statements sent together that design b has no function for.
WORKFLOW = ("task.acquire", "task.fence", "task.suspend")
PREFIX = {"promise.create": "c", "promise.settle": "s", "task.create": "t", "task.fulfill": "t"}
PREFIX.update(dict.fromkeys(WORKFLOW, "c"))
HTTP_SCENARIOS = {"promise.create": "promise_create.lua", "promise.settle": "promise_settle.lua"}
HTTP_SCENARIOS["task.create+fulfill"] = "task_pair.lua"


def url(database):
    return f"postgres://postgres@127.0.0.1:5432/{database}"


def psql(sql, database="postgres"):
    subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-q", "-v", "ON_ERROR_STOP=1", "-d", database, "-c", sql],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def fresh_database(database):
    """A migrated database."""
    drop_database(database)
    psql(f"CREATE DATABASE {database}")
    subprocess.run([PYTHON, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True, env=design_env("b", database))


def drop_database(database):
    psql(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


TREES = {"b": ROOT, "c": ROOT}  # where each design's code is; main() adds a's


def design_env(design, database):
    tree = TREES.get(design, ROOT)
    return {
        **os.environ,
        "DATABASE_URL": url(database),
        "DJANGO_SETTINGS_MODULE": "prepare_variant",
        "PYTHONPATH": os.pathsep.join([str(tree / "bench"), str(tree)]),
        "RESONATE_PREPARE_DESIGN": design,
    }


def rotations(rounds):
    """The designs' order in each round: a b c, b c a, c a b, a b c, …"""
    return [DESIGNS[r % len(DESIGNS) :] + DESIGNS[: r % len(DESIGNS)] for r in range(rounds)]


# In a process of one design (the `child` subcommand) -----------------------------------------------------------


def child(design, database, what, count, workflow=False):
    os.environ.update(design_env(design, database))
    sys.path[:0] = [str(BENCH), str(ROOT)]
    import django

    django.setup()
    if what == "trace":
        trace()
    else:
        print(json.dumps(measure(count, OPERATIONS + (WORKFLOW if workflow else ()))))


def body(kind, data):
    return json.dumps({"kind": kind, "head": {"corrId": "bench", "version": "2026-04-01"}, "data": data}).encode()


def requests(kind, ids):
    if kind == "promise.create":
        tags = {"resonate:target": "poll://any@bench"}
        return [
            body(kind, {"id": i, "timeoutAt": FAR, "param": {"data": "eyJmdW5jIjoiZiJ9"}, "tags": tags}) for i in ids
        ]
    if kind == "promise.settle":
        return [body(kind, {"id": i, "state": "resolved", "value": {"data": "NDI="}}) for i in ids]
    if kind == "task.create":
        tags = {"resonate:target": "poll://any@bench"}
        action = {"kind": "promise.create", "head": {}}
        return [
            body(
                kind,
                {"pid": "bench", "ttl": 60000, "action": {**action, "data": {"id": i, "timeoutAt": FAR, "tags": tags}}},
            )
            for i in ids
        ]
    if kind == "task.acquire":
        return [body(kind, {"id": i, "version": 0, "pid": "bench", "ttl": 60000}) for i in ids]
    if kind == "task.fence":
        tags = {"resonate:target": "poll://any@bench"}
        child = {"kind": "promise.create", "head": {}}
        return [
            body(
                kind,
                {"id": i, "version": 1, "action": {**child, "data": {"id": f"{i}.1", "timeoutAt": FAR, "tags": tags}}},
            )
            for i in ids
        ]
    if kind == "task.suspend":
        awaiting = {"kind": "promise.register_callback", "head": {}}
        return [
            body(kind, {"id": i, "version": 1, "actions": [{**awaiting, "data": {"awaited": f"{i}.1", "awaiter": i}}]})
            for i in ids
        ]
    settle = {"kind": "promise.settle", "head": {}}
    return [
        body(
            kind,
            {
                "id": i,
                "version": 1,
                "action": {**settle, "data": {"id": i, "state": "resolved", "value": {"data": "NDI="}}},
            },
        )
        for i in ids
    ]


def pending(prefix, count):
    """Pending promises without a task, as bench/run.py prefills them for promise.settle."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO promises_promise SELECT %s || n, 'pending', '{}', '{}', '{}', %s, 1, NULL, false, false, NULL"
            " FROM generate_series(1, %s) n",
            [prefix, FAR, count],
        )


def backend_ns(pid):
    """CPU time of a process's main thread so far (ns): a PostgreSQL backend has only that one."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def measure(count, operations):
    """{operation: {client_us, postgres_us, p50_ms}} per request, over `count` requests after count/10 to warm up."""
    from django.db import connection

    from resonate_site.protocol.envelope import answer

    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        ((backend,),) = cursor.fetchall()
    run = f"{os.getpid()}-{int(time.time() * 1000)}"
    warm = max(count // 10, 20)
    pending(f"s-{run}-", warm + count)
    found = {}
    for kind in operations:
        ids = [f"{PREFIX[kind]}-{run}-{n}" for n in range(1, warm + count + 1)]
        bodies = requests(kind, ids)
        for request in bodies[:warm]:
            check(kind, answer(request))
        walls = []
        postgres, client = backend_ns(backend), time.process_time()
        for request in bodies[warm:]:
            started = time.perf_counter()
            reply = answer(request)
            walls.append(time.perf_counter() - started)
            check(kind, reply)
        client, postgres = time.process_time() - client, backend_ns(backend) - postgres
        found[kind] = {
            "client_us": client / count * 1e6,
            "postgres_us": postgres / count / 1e3,
            "p50_ms": statistics.median(walls) * 1e3,
        }
    return found


def check(kind, reply):
    if reply["head"]["status"] != 200:
        raise SystemExit(f"{kind} answered {reply['head']['status']}: {reply['data']}")


def trace():
    """Print what each operation sends to PostgreSQL, on a connection that has sent it often enough to prepare."""
    import psycopg
    from django.db import connection

    from resonate_site.protocol.envelope import answer

    sent = []
    execute = psycopg.Cursor.execute

    def traced(self, query, params=None, **kwargs):
        binding = "client-bound" if isinstance(self, psycopg.ClientCursor) else "server-bound"
        sent.append(f"  [{binding}, {len(params or ())} parameters] {query if isinstance(query, str) else query!r}")
        return execute(self, query, params, **kwargs)

    psycopg.Cursor.execute = traced
    run = f"trace-{int(time.time() * 1000)}"
    pending(f"s-{run}-", 10)
    for kind in OPERATIONS:
        bodies = requests(kind, [f"{PREFIX[kind]}-{run}-{n}" for n in range(1, 11)])
        for n, request in enumerate(bodies):
            sent.clear()
            check(kind, answer(request))
            if n in (0, 9):
                print(f"{kind}, request {n + 1}:")
                print("\n".join(sent))
    psycopg.Cursor.execute = execute
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, from_sql FROM pg_prepared_statements ORDER BY name")
        print("prepared on the connection:", ", ".join(f"{name}{'' if sql else ' (protocol)'}" for name, sql in cursor))
        cursor.execute("SELECT proname FROM pg_proc WHERE proname ~ '^r_[0-9a-f]{20}$' ORDER BY 1")
        print("functions in the database:", ", ".join(name for (name,) in cursor))


# The driver ----------------------------------------------------------------------------------------------------


def run_child(design, database, what, count=0, threshold=None, workflow=False):
    tree = TREES[design]
    command = [PYTHON, str(tree / "bench" / "prepare_designs.py"), "child", design, database, what, str(count)]
    command += ["--workflow"] if workflow else []
    env = {**os.environ, **({"DATABASE_PREPARE_THRESHOLD": threshold} if threshold else {})}
    return subprocess.run(command, cwd=tree, env=env, check=True, capture_output=True, text=True).stdout


def trace_all():
    database = DATABASE.format("trace")
    fresh_database(database)
    try:
        for design in DESIGNS:
            print(f"### design {design}\n{run_child(design, database, 'trace')}", flush=True)
    finally:
        drop_database(database)


def in_process(rounds, count, threshold, workflow):
    database = DATABASE.format("inprocess")
    fresh_database(database)
    found = {design: [] for design in DESIGNS}
    try:
        for r, order in enumerate(rotations(rounds)):
            for design in order:
                result = json.loads(run_child(design, database, "measure", count, threshold, workflow))
                found[design].append(result)
                print(
                    f"round {r + 1} {design}: " + "; ".join(f"{k} {fmt_point(v)}" for k, v in result.items()),
                    flush=True,
                )
    finally:
        drop_database(database)
    title = f"{rounds} rounds of {count} requests per operation, DATABASE_PREPARE_THRESHOLD={threshold or 'default'}"
    report("inprocess", in_process_tables(found, title), found)


def in_process_tables(found, title):
    lines = [
        f"# in-process, {time.strftime('%Y-%m-%d %H:%M')}: {title}",
        "",
        "| design | operation | client CPU µs | PostgreSQL CPU µs | wall p50 ms |",
        "|---|---|---|---|---|",
    ]
    kinds = [*OPERATIONS, "task pair", *(kind for kind in WORKFLOW if kind in found["a"][0])]
    rounds = {d: [{k: pair(r) if k == "task pair" else r[k] for k in kinds} for r in found[d]] for d in DESIGNS}
    for kind in kinds:
        for design in DESIGNS:
            cells = [span([r[kind][key] for r in rounds[design]], digits) for key, digits in KEYS]
            lines.append(f"| {design} | {kind} | {' | '.join(cells)} |")
    return lines + ratios(rounds, kinds, KEYS)


def ratios(rounds, kinds, keys):
    """Each design's figures over design a's of the same round (the three ran within a minute or two of each other,
    so most of the VM's drift cancels): min-max (median) over the rounds."""
    lines = ["", "Over design a's figure of the same round:", ""]
    lines += ["| design | operation | " + " | ".join(key for key, _ in keys) + " |", "|---|---|" + "---|" * len(keys)]
    for kind in kinds:
        for design in DESIGNS[1:]:
            cells = []
            for key, _ in keys:
                pairs = zip(rounds[design], rounds["a"], strict=True)
                values = [mine[kind][key] / theirs[kind][key] for mine, theirs in pairs]
                cells.append(span(values, 2))
            lines.append(f"| {design}/a | {kind} | {' | '.join(cells)} |")
    return lines


KEYS = (("client_us", 0), ("postgres_us", 0), ("p50_ms", 3))


def pair(result):
    return {key: result["task.create"][key] + result["task.fulfill"][key] for key, _ in KEYS}


def fmt_point(point):
    return f"{point['client_us']:.0f}/{point['postgres_us']:.0f} µs {point['p50_ms']:.3f} ms"


def span(values, digits):
    """min-max, and the median."""
    return f"{min(values):,.{digits}f}-{max(values):,.{digits}f} ({statistics.median(values):,.{digits}f})"


def report(name, lines, found):
    text = "\n".join(lines)
    print("\n" + text)
    (BENCH / "results").mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (BENCH / "results" / f"prepare-designs-{name}-{stamp}.md").write_text(text + "\n")
    (BENCH / "results" / f"prepare-designs-{name}-{stamp}.json").write_text(json.dumps(found, indent=1))


def start_server(design, database):
    env = {
        **design_env(design, database),
        "DATABASE_URL": f"{url(database)}?application_name={APPLICATION.format(design)}",  # its backends, by name
        "RESONATE_BACKGROUND": "celery",  # production mode, as bench/run.py starts it
        "RESONATE_HUB_URL": "redis://127.0.0.1:6379/12",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/12",
        "RESONATE_AUTH_DISABLED": "true",
    }
    log = open(BENCH / "results" / f"prepare-designs-server-{design}.log", "w")  # noqa: SIM115 (outlives this)
    command = [PYTHON, "manage.py", "serve", "--port", str(PORTS[design]), "--workers", "2", "--log-level", "warning"]
    server = subprocess.Popen(
        command, cwd=TREES[design], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    for _ in range(150):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORTS[design]}/ready", timeout=1)
            return server
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"server {design} did not become ready; see its log in bench/results")


def cpu_s(pids):
    """CPU seconds (user + system) of these processes so far, each as a whole (every thread): {pid: seconds}."""
    found = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        found[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found


def session_pids(leader):
    """The processes of a session (`manage.py serve` and its server processes)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except (FileNotFoundError, ProcessLookupError):  # a process that ended meanwhile
                continue
            if int(fields[3]) == leader:
                pids.append(int(entry.name))
    return pids


def backend_pids(design):
    """The PostgreSQL backends of a design's server processes."""
    out = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-At", "-d", "postgres", "-c"]
        + [f"SELECT pid FROM pg_stat_activity WHERE application_name = '{APPLICATION.format(design)}'"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [int(line) for line in out.split()]


def spent(before, after):
    """CPU seconds between two cpu_s readings; a process that appeared in between counts from zero."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def drive(design, database, server, scenario, clients, seconds, run):
    from run import wrk  # bench/run.py's wrk driver, the same scripts and the same parsing

    if scenario == "promise.settle":
        prefix = f"{run}"
        psql(
            f"INSERT INTO promises_promise SELECT 's-{prefix}-' || t || '-' || n, 'pending', '{{}}', '{{}}', '{{}}',"
            f" {FAR}, 1, NULL, false, false, NULL"
            f" FROM generate_series(1, {min(clients, 2)}) t, generate_series(1, {SETTLE_PER_THREAD}) n",
            database,
        )
        psql("VACUUM ANALYZE promises_promise", database)
    servers, backends = session_pids(server.pid), backend_pids(design)
    server_before, postgres_before = cpu_s(servers), cpu_s(backends)
    result = wrk(HTTP_SCENARIOS[scenario], clients, seconds, run, scenario.startswith("task."), port=PORTS[design])
    server_after, postgres_after = cpu_s(session_pids(server.pid)), cpu_s(backend_pids(design) + backends)
    done = max(result["requests"], 1)
    result["server_ms"] = spent(server_before, server_after) / done * 1e3
    result["postgres_ms"] = spent(postgres_before, postgres_after) / done * 1e3
    return result


def over_http(rounds, seconds, clients, warm, scenarios):
    """Each round starts the three servers anew (in the round's order, so no design keeps a lucky or unlucky
    process for the whole run), warms each scenario on each, then measures each scenario on the three in turn. One
    database for all three: their backends are told apart by application_name."""
    sys.path.insert(0, str(BENCH))
    (BENCH / "results").mkdir(exist_ok=True)
    database = DATABASE.format("http")
    fresh_database(database)
    found = {design: {scenario: [] for scenario in scenarios} for design in DESIGNS}
    try:
        for r, order in enumerate(rotations(rounds)):
            servers = {}
            try:
                for design in order:
                    servers[design] = start_server(design, database)
                for design in order:  # every statement past its threshold, every connection open
                    for scenario in scenarios:
                        drive(
                            design, database, servers[design], scenario, clients, warm, f"w{r}{design}{time.time():.0f}"
                        )
                for scenario in scenarios:
                    for design in order:
                        run = f"r{r}{design}{scenario.split('.')[-1][:4]}{int(time.time())}"
                        result = drive(design, database, servers[design], scenario, clients, seconds, run)
                        found[design][scenario].append(result)
                        print(f"round {r + 1} {design} {scenario:20} {fmt_http(result)}", flush=True)
            finally:
                for server in servers.values():
                    os.killpg(server.pid, signal.SIGTERM)
                    server.wait(timeout=30)
    finally:
        drop_database(database)
    title = f"{rounds} rounds, {clients} clients, {seconds} s a point, 2 server processes per design"
    report("http", http_tables(found, title), found)


def http_tables(found, title):
    lines = [
        f"# over HTTP, {time.strftime('%Y-%m-%d %H:%M')}: {title}",
        "",
        "| design | operation | req/s | p50 ms | p99 ms | server CPU ms/req | PostgreSQL CPU ms/req | refused |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scenario in found["a"]:
        for design in DESIGNS:
            points = found[design][scenario]
            cells = [span([p[key] for p in points], digits) for key, digits in HTTP_KEYS]
            lines.append(f"| {design} | {scenario} | {' | '.join(cells)} | {sum(p['errors'] for p in points)} |")
    rounds = {
        d: [dict(zip(found[d], points, strict=True)) for points in zip(*found[d].values(), strict=True)]
        for d in DESIGNS
    }
    return lines + ratios(rounds, list(found["a"]), HTTP_KEYS)


def tables(path):
    """The tables of an earlier run, from its JSON, ratios included."""
    found = json.loads(Path(path).read_text())
    render = http_tables if "-http-" in Path(path).name else in_process_tables
    print("\n".join(render(found, f"from {Path(path).name}")))


def instructions(rounds, only):
    """bench/instructions.py (valgrind: the server process's instructions per request, repeatable) per design."""
    database = DATABASE.format("instructions")
    fresh_database(database)
    found = {design: [] for design in DESIGNS}
    try:
        for r, order in enumerate(rotations(rounds)):
            for design in order:
                out = subprocess.run(
                    [PYTHON, str(TREES[design] / "bench" / "instructions.py"), "--database-url", url(database)]
                    + ["--only", only],
                    cwd=TREES[design],
                    env=design_env(design, database),
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                counted = {
                    line.split()[0]: float(line.split()[1]) for line in out.splitlines() if "instructions" in line
                }
                found[design].append(counted)
                print(f"round {r + 1} {design}: {counted}", flush=True)
    finally:
        drop_database(database)
    lines = [
        f"# instructions per request in the server process (bench/instructions.py), {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        "| operation | " + " | ".join(f"{design}: M instructions" for design in DESIGNS) + " |",
        "|---|" + "---|" * len(DESIGNS),
    ]
    for kind in only.split(","):
        cells = [span([counted[kind] for counted in found[design]], 2) for design in DESIGNS]
        lines.append(f"| {kind} | {' | '.join(cells)} |")
    report("instructions", lines, found)


HTTP_KEYS = (("rate", 0), ("p50", 2), ("p99", 2), ("server_ms", 3), ("postgres_ms", 3))


def fmt_http(r):
    return (
        f"{r['rate']:7.0f}/s p50 {r['p50']:6.2f} p99 {r['p99']:6.2f} ms  server {r['server_ms']:.3f}"
        f" PostgreSQL {r['postgres_ms']:.3f} ms/req  refused {r['errors']}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    tree = argparse.ArgumentParser(add_help=False)
    tree.add_argument("--a-tree", help="a checkout of 644d4a8 (statements prepared by name); without it, b and c alone")
    commands.add_parser("trace", parents=[tree])
    inprocess = commands.add_parser("inprocess", parents=[tree])
    inprocess.add_argument("--rounds", type=int, default=5)
    inprocess.add_argument("--count", type=int, default=2000)
    inprocess.add_argument("--threshold", help="DATABASE_PREPARE_THRESHOLD for the processes (off: a pooler's case)")
    inprocess.add_argument("--workflow", action="store_true", help="also " + ", ".join(WORKFLOW))
    http = commands.add_parser("http", parents=[tree])
    http.add_argument("--rounds", type=int, default=5)
    http.add_argument("--seconds", type=int, default=10)
    http.add_argument("--clients", type=int, default=16)
    http.add_argument("--warm", type=int, default=3, help="seconds of each scenario per design before each round")
    http.add_argument("--only", default=",".join(HTTP_SCENARIOS), help="comma-separated scenarios")
    counted = commands.add_parser("instructions", parents=[tree])
    counted.add_argument("--rounds", type=int, default=1)
    counted.add_argument("--only", default=",".join(OPERATIONS))
    again = commands.add_parser("tables")
    again.add_argument("path", help="a run's JSON in bench/results")
    one = commands.add_parser("child")
    one.add_argument("design", choices=("a", "b", "c"))
    one.add_argument("database")
    one.add_argument("what", choices=("trace", "measure"))
    one.add_argument("count", type=int)
    one.add_argument("--workflow", action="store_true")
    args = parser.parse_args()
    global DESIGNS
    if getattr(args, "a_tree", None):
        TREES["a"] = Path(args.a_tree).resolve()
    elif args.command not in ("child", "tables"):
        DESIGNS = ("b", "c")
    if args.command == "child":
        child(args.design, args.database, args.what, args.count, args.workflow)
    elif args.command == "trace":
        trace_all()
    elif args.command == "tables":
        tables(args.path)
    elif args.command == "instructions":
        instructions(args.rounds, args.only)
    elif args.command == "inprocess":
        in_process(args.rounds, args.count, args.threshold, args.workflow)
    else:
        over_http(args.rounds, args.seconds, args.clients, args.warm, args.only.split(","))


if __name__ == "__main__":
    sys.exit(main())
