"""serve --workers N keeps each server process on a CPU of its own when there is one per CPU it may use
(resonate_site.serving.pin_processes), and its replacement after a crash takes the same CPU."""

import os
import signal
import time

import httpx
import pytest

from resonate_site.serving import cpus_to_pin, pin_processes
from tests.e2e.conftest import production_env
from tests.e2e.servers import Process, eventually, free_port, runtime_python, server_processes, wait_ready

CPUS = sorted(os.sched_getaffinity(0))[:2]  # the server runs on two CPUs of this machine, whatever it has
needs_two_cpus = pytest.mark.skipif(len(CPUS) < 2, reason="pinning two processes needs two CPUs")
REDIS_URL = "redis://127.0.0.1:6379/9"  # a database of its own (the production fixture uses 7, live conformance 8)


def cpus_of_threads(pid):
    """The CPU set of each thread of a process, as frozensets."""
    found = set()
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            found.add(frozenset(os.sched_getaffinity(int(thread))))
        except ProcessLookupError:  # ended meanwhile
            continue
    return found


def start_serve(database_url, tmp_path, **settings):
    """manage.py serve --workers 2 in production mode, allowed the two CPUs of CPUS (as taskset would start it)."""
    port = free_port()
    env = production_env(database_url, REDIS_URL, RESONATE_AUTH_DISABLED="true", **settings)
    command = ["-c", ",".join(map(str, CPUS)), runtime_python(), "manage.py", "serve"]
    command += ["--port", str(port), "--workers", "2", "--log-level", "warning"]
    process = Process(command, env, tmp_path / f"serve-{port}.log", python="taskset")
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, process)
    return url, process


def pinned(serve_pid):
    """{server process: its CPU} once every thread of each is on one CPU; None before."""
    found = {}
    for pid in server_processes(serve_pid):
        sets = cpus_of_threads(pid)
        if len(sets) != 1 or len(next(iter(sets))) != 1:
            return None
        found[pid] = next(iter(next(iter(sets))))
    return found if len(found) == 2 else None


def answered(url):
    envelope = {"kind": "promise.get", "head": {"corrId": "a", "version": "2026-04-01"}, "data": {"id": "none"}}
    return httpx.post(f"{url}/", json=envelope, timeout=10).json()["head"]["status"]


@pytest.mark.postgres
@needs_two_cpus
def test_two_server_processes_on_two_cpus_run_each_on_its_own_and_a_replacement_takes_the_freed_one(
    database_url, tmp_path
):
    url, serve = start_serve(database_url, tmp_path)
    try:
        first = eventually(lambda: pinned(serve.popen.pid))
        assert sorted(first.values()) == CPUS
        assert answered(url) == 404
        crashed = next(iter(first))
        os.kill(crashed, signal.SIGKILL)
        again = eventually(lambda: (found := pinned(serve.popen.pid)) and crashed not in found and found or None)
        assert sorted(again.values()) == CPUS
        (replacement,) = set(again) - set(first)
        assert again[replacement] == first[crashed]
        assert answered(url) == 404
    finally:
        serve.stop()


@pytest.mark.postgres
@needs_two_cpus
def test_a_process_added_beyond_one_per_cpu_unpins_them_all_until_one_is_taken_away(database_url, tmp_path):
    url, serve = start_serve(database_url, tmp_path)
    try:
        first = eventually(lambda: pinned(serve.popen.pid))
        os.kill(serve.popen.pid, signal.SIGTTIN)  # a third process on two CPUs: one CPU would carry two

        def spread():
            processes = server_processes(serve.popen.pid)
            everywhere = all(cpus_of_threads(pid) == {frozenset(CPUS)} for pid in processes)
            return processes if len(processes) == 3 and everywhere else None

        eventually(spread)
        assert answered(url) == 404
        os.kill(serve.popen.pid, signal.SIGTTOU)  # one per CPU again
        again = eventually(lambda: pinned(serve.popen.pid))
        assert again == first
    finally:
        serve.stop()


@pytest.mark.postgres
@needs_two_cpus
def test_with_cpu_affinity_off_the_server_processes_may_run_on_every_cpu(database_url, tmp_path):
    url, serve = start_serve(database_url, tmp_path, RESONATE_CPU_AFFINITY="off")
    try:
        assert answered(url) == 404
        time.sleep(1.5)  # three of the supervisor's checks, which would have pinned them
        processes = server_processes(serve.popen.pid)
        assert len(processes) == 2
        for pid in processes:
            assert cpus_of_threads(pid) == {frozenset(CPUS)}
    finally:
        serve.stop()


def test_processes_are_pinned_only_when_there_is_one_per_cpu(settings, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {5, 2, 9})
    settings.RESONATE = {"CPU_AFFINITY": "auto"}
    assert cpus_to_pin(3) == [2, 5, 9]
    assert cpus_to_pin(2) is None  # two deployments sharing the machine would pin theirs to the same CPUs
    assert cpus_to_pin(4) is None
    settings.RESONATE = {"CPU_AFFINITY": "off"}
    assert cpus_to_pin(3) is None


@needs_two_cpus
def test_pinning_moves_every_thread_of_each_process_and_skips_a_process_that_is_gone(tmp_path):
    script = "import threading, time\nfor _ in range(3): threading.Thread(target=time.sleep, args=(60,)).start()\n"
    children = [
        Process(["-c", script], dict(os.environ), tmp_path / f"child-{n}.log", python=runtime_python())
        for n in range(2)
    ]
    try:
        pids = [child.popen.pid for child in children]
        eventually(lambda: all(len(os.listdir(f"/proc/{pid}/task")) == 4 for pid in pids) or None)
        pin_processes([*pids, None, 2**22 + 1], [*CPUS, CPUS[0], CPUS[1]])  # not started, and gone: skipped
        for pid, cpu in zip(pids, CPUS, strict=True):
            assert cpus_of_threads(pid) == {frozenset({cpu})}
    finally:
        for child in children:
            child.kill(signal.SIGKILL)
