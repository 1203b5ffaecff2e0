"""The operations console in a real browser (Debian's Chromium, driven by Playwright) against a real server:
log in, find a promise, resolve it, and see its awaiter's task go back to pending.

Screenshots of each step are written to var/screenshots/.
"""

import os
import subprocess
import sys
import uuid

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.e2e.servers import ROOT, Client, now_ms

CHROMIUM = "/usr/bin/chromium"
# What this machine's closed network needs (see the machine notes): no background traffic, no sandbox as root.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = ROOT / "var" / "screenshots"


@pytest.fixture(scope="module")
def operator(embedded):
    """An operator's login on the embedded server's database."""
    password = uuid.uuid4().hex
    env = {**embedded.env, "DJANGO_SUPERUSER_PASSWORD": password}
    command = ["manage.py", "createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com"]
    subprocess.run([sys.executable, *command], cwd=ROOT, env=env, check=True, capture_output=True)
    return "ops", password


@pytest.fixture
def page(tmp_path):
    if not os.path.exists(CHROMIUM):
        raise RuntimeError(f"{CHROMIUM} is missing: bin/setup test installs Debian's chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        context = browser.new_context(viewport={"width": 1600, "height": 900})
        yield context.new_page()
        browser.close()


def shot(page, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SHOTS / f"{name}.png", full_page=True)


def test_an_operator_resolves_a_promise_and_its_awaiter_resumes(embedded, operator, page, unique):
    rpc = Client(embedded.url)
    workflow, step = f"{unique}-wf", f"{unique}-wf.approval"
    deadline = now_ms() + 3_600_000
    target = {"resonate:target": f"poll://any@{unique}"}
    assert rpc("promise.create", {"id": workflow, "timeoutAt": deadline, "tags": target})[0] == 200
    assert rpc("task.acquire", {"id": workflow, "version": 0, "pid": "w", "ttl": 600_000})[0] == 200
    assert rpc("promise.create", {"id": step, "timeoutAt": deadline, "tags": {"resonate:external": "true"}})[0] == 200
    callback = {"kind": "promise.register_callback", "head": {}, "data": {"awaited": step, "awaiter": workflow}}
    assert rpc("task.suspend", {"id": workflow, "version": 1, "actions": [callback]})[0] == 200

    username, password = operator
    page.goto(f"{embedded.url}/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    shot(page, "1-login")
    page.click("input[type=submit]")
    expect(page.locator("#site-name")).to_be_visible()

    page.goto(f"{embedded.url}/admin/promises/promise/")
    page.fill("#searchbar", step)
    page.press("#searchbar", "Enter")
    row = page.locator("#result_list tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("pending")
    shot(page, "2-found")

    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "resolve")
    page.click("button[name=index]")
    page.fill("textarea[name=value]", '{"approved": true}')
    shot(page, "3-resolve")
    page.click("input[name=confirm]")
    expect(page.locator(".messagelist")).to_contain_text("1 resolved")
    shot(page, "4-resolved")

    page.goto(f"{embedded.url}/admin/tasks/task/?q={workflow}")
    expect(page.locator("#result_list tbody tr")).to_contain_text("pending")
    shot(page, "5-awaiter-pending")
    assert rpc("promise.get", {"id": step})[1]["promise"]["state"] == "resolved"
    assert rpc("task.get", {"id": workflow})[1]["task"]["state"] == "pending"
