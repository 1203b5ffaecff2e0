"""README.md's "Trying it" session, run as written against an embedded server (its address put in)."""

import re
import subprocess
from pathlib import Path

import orjson

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def trying_it():
    section = README.split("## Trying it", 1)[1]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def test_the_trying_it_session_runs_as_written(embedded):
    script = trying_it()
    assert script.startswith("bin/serve &\n")  # the server is this test's own: the rest runs as written
    session = script.removeprefix("bin/serve &\n").replace("localhost:8001", embedded.url.removeprefix("http://"))
    # One reply a line, to read them apart (curl prints each reply without a newline).
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", session.replace("curl -s ", "curl -s -w '\\n' ")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    replies = [orjson.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert [(r["kind"], r["head"]["status"]) for r in replies] == [("promise.create", 200), ("promise.settle", 200)]
    assert replies[1]["data"]["promise"]["state"] == "resolved"
