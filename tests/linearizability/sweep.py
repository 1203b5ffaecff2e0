"""Many concurrent histories in a row against one deployment, each checked as soon as it ends, with the figures a
run reports; and the faults injected while they run."""

import random
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.linearizability.checker import check, dumps, explain, shrink, stuck
from tests.linearizability.workload import Runner, lost_writes


@dataclass
class Sweep:
    """What a run of histories found."""

    name: str
    histories: int = 0
    ops: int = 0
    unknown: int = 0  # ops with no reply (cut off, timed out, 503): checked as taking effect at any time, or never
    refused: int = 0  # requests whose connection was refused: never sent, sent again to the other server
    partitions: int = 0
    faulted: int = 0  # histories during which at least one fault was injected
    faults: Counter = field(default_factory=Counter)
    replies: Counter = field(default_factory=Counter)  # "kind status" of every op with a reply: what was reached
    violations: list = field(default_factory=list)  # explanations of shrunk counterexamples
    unexplained: Counter = field(default_factory=Counter)  # the kinds of the replies no order explains, per violation
    undecided: list = field(default_factory=list)
    server_errors: list = field(default_factory=list)
    lost: list = field(default_factory=list)
    seconds: float = 0.0
    checking_seconds: float = 0.0

    def row(self):
        return {
            "run": self.name,
            "histories": self.histories,
            "ops": self.ops,
            "unknown": self.unknown,
            "faulted": self.faulted,
            "faults": dict(self.faults),
            "violations": len(self.violations),
            "unexplained": dict(self.unexplained),
            "undecided": len(self.undecided),
            "5xx": len(self.server_errors),
            "lost": len(self.lost),
            "seconds": round(self.seconds, 1),
            "checking seconds": round(self.checking_seconds, 1),
            "replies": dict(sorted(self.replies.items())),
        }


def run_sweep(name, deployment, histories, directory, clients=8, ops=12, faults=None, stop_after=3, branched=False):
    """Run `histories` histories (fewer once `stop_after` have a violation); each violation is shrunk, explained and
    saved under `directory` with its whole history (check it again: python -m tests.linearizability.checker FILE)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    found = Sweep(name)
    runner = Runner(deployment.urls, clients=clients, ops=ops, branched=branched)
    started = time.monotonic()
    for n in range(histories):
        prefix = f"{name[:3]}{n}-{uuid.uuid4().hex[:6]}"
        history = runner.run(prefix, seed=prefix)
        checking = time.monotonic()
        outcome = check(history.ops)
        found.checking_seconds += time.monotonic() - checking
        found.histories += 1
        found.ops += len(history.ops)
        found.unknown += history.unknown
        found.refused += history.refused
        found.partitions += outcome.partitions
        found.replies.update(f"{op.kind} {op.status}" for op in history.ops if op.known)
        found.server_errors += history.server_errors
        found.lost += lost_writes(history)
        found.undecided += [f"{prefix}: {why}" for _, why in outcome.undecided]
        if faults is not None:
            during = faults.during(history.started, history.ended)
            found.faulted += bool(during)
            found.faults.update(during)
        if outcome.violations or outcome.undecided:
            (directory / f"{prefix}.jsonl").write_bytes(dumps(history.ops))
        for part in outcome.violations:
            witness = shrink(part)
            (directory / f"{prefix}-shrunk.jsonl").write_bytes(dumps(witness))
            found.violations.append(f"history {prefix} (saved in {directory}):\n{explain(witness)}")
            found.unexplained[" + ".join(sorted({op.kind for op in stuck(witness)}))] += 1
        if len(found.violations) >= stop_after:
            break
    found.seconds = time.monotonic() - started
    return found


class Faults:
    """While open: at random moments, kill -9 one server process and start it again (the other serves meanwhile),
    or reset every PostgreSQL connection at the proxy. One fault at a time."""

    def __init__(self, deployment, seed=0):
        self.deployment, self.rng = deployment, random.Random(seed)
        self.events = []  # (monotonic ns, fault)
        self.errors = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._inject, name="faults", daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.thread.join(120)

    def during(self, start, end):
        """The faults injected between these monotonic ns."""
        return [fault for at, fault in self.events if start <= at <= end]

    def _inject(self):
        # The first two faults are one of each, in a random order: the sweep may be over within seconds (20 histories
        # took under 6.6 s once requests ran on the event loop's thread, and this seed's first 12 draws were drops).
        first = self.rng.sample([True, False], 2)
        try:
            while not self.stopping.wait(self.rng.uniform(0.2, 1.0)):
                if first.pop() if first else self.rng.random() < 0.5:
                    self._kill_a_server()
                else:
                    self.events.append((time.monotonic_ns(), "PostgreSQL connections dropped"))
                    self.deployment.drop_connections()
        except Exception as error:  # the test reads it: a fault that could not be undone is a failure
            self.errors.append(repr(error))

    def _kill_a_server(self):
        n = self.rng.randrange(2)
        self.events.append((time.monotonic_ns(), "kill -9 a server process"))
        self.deployment.kill_server(n)
        self.stopping.wait(self.rng.uniform(0.05, 0.5))
        self.deployment.restart_server(n)
