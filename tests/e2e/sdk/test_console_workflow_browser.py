"""The console's workflow page in a real browser (Debian's Chromium, driven by Playwright), on workflows the released
Python SDK ran: a fan-out with a step that failed once and was retried and one that failed for good, a workflow that
failed, and one stuck on a promise nobody settles. An operator finds what the stuck one waits on in two clicks from
any of its promises. Screenshots go to var/screenshots/workflow-*.png (docs/console/ keeps copies)."""

import asyncio
import contextlib
import subprocess
import sys
import uuid

import pytest
from django.conf import settings
from playwright.sync_api import expect, sync_playwright

from tests.e2e.sdk.conftest import client, run
from tests.e2e.servers import ROOT, Client
from tests.e2e.test_admin_browser import CHROMIUM, FLAGS, shot

pytestmark = pytest.mark.sdk


@pytest.fixture(scope="module")
def operator(request):
    """An operator's login on the deployment's database."""
    if "sqlite" in settings.DATABASES["default"]["ENGINE"]:
        env = request.getfixturevalue("embedded").env
    else:
        env = request.getfixturevalue("production").env
    password = uuid.uuid4().hex
    command = ["manage.py", "createsuperuser", "--noinput", "--username", "wf-ops", "--email", "ops@example.com"]
    environment = {**env, "DJANGO_SUPERUSER_PASSWORD": password}
    subprocess.run([sys.executable, *command], cwd=ROOT, env=environment, check=True, capture_output=True)
    return "wf-ops", password


@contextlib.contextmanager
def chromium():
    """A page in Chromium. Opened only once the SDK's client is done: Playwright's sync API runs an event loop of its
    own in this thread, where asyncio.run (the SDK's client) then refuses to start."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield browser.new_context(viewport={"width": 1600, "height": 900}).new_page()
        finally:
            browser.close()


def log_in(page, url, operator):
    page.goto(f"{url}/admin/")
    page.fill("#id_username", operator[0])
    page.fill("#id_password", operator[1])
    page.click("input[type=submit]")
    expect(page.locator("#site-name")).to_be_visible()


def test_an_operator_sees_a_finished_a_failed_and_retried_and_a_stuck_workflow(
    deployment, workers, group, journal, operator
):
    workers(group)
    finished, stuck = f"pipeline-{uuid.uuid4().hex[:8]}", f"approval-{uuid.uuid4().hex[:8]}"
    failed = f"broken-{uuid.uuid4().hex[:8]}"

    async def scenario():
        async with client(deployment.client_url, group) as resonate:
            target = resonate.options(target=group)
            result = await target.rpc(finished, "pipeline", finished).result()
            with pytest.raises(Exception, match="out of order"):
                await target.rpc(failed, "broken", "out of order").result()
            target.rpc(stuck, "approval", stuck)  # waits for a decision nobody makes
            [awaiting] = await asyncio.to_thread(journal.wait, "awaiting", stuck)
            return result, awaiting["promise"]

    result, decision = run(scenario())
    assert result == {"total": 5, "retried": f"{finished} succeeded on attempt 2", "failed": "out of stock"}
    assert len(journal.events("flaky", finished)) == 2  # failed once, retried once

    url = deployment.client_url
    with chromium() as page:
        see(page, url, operator, finished, failed, stuck, decision)


def see(page, url, operator, finished, failed, stuck, decision):
    log_in(page, url, operator)

    # The finished workflow: its tree with function names, the failure shown, the timeline drawn.
    page.goto(f"{url}/admin/promises/promise/{finished}/workflow/")
    expect(page.locator("#waits-on")).to_contain_text("Finished")
    rows = page.locator("#workflow tbody tr")
    expect(rows).to_have_count(6)  # the root, three squares, flaky, broken
    expect(page.locator("#workflow tbody")).to_contain_text("square")
    expect(page.locator("#workflow tbody")).to_contain_text("flaky")
    expect(page.locator("#workflow tbody")).to_contain_text("rejected")
    expect(page.locator("#workflow tbody")).to_contain_text("out of stock")
    expect(page.locator("#workflow .bar")).to_have_count(6)
    shot(page, "workflow-finished")

    # A workflow that failed for good: its error, decoded, where its value would be.
    page.goto(f"{url}/admin/promises/promise/{failed}/workflow/")
    expect(page.locator("#waits-on")).to_contain_text("Failed: rejected")
    expect(page.locator("#waits-on")).to_contain_text("error: out of order")
    expect(page.locator("#workflow tbody td.state-rejected")).to_have_text("rejected")
    shot(page, "workflow-failed")

    # The stuck one, from one of its promises: the promise's page, then its workflow (two clicks).
    page.goto(f"{url}/admin/promises/promise/?q={decision}")
    page.click(f"#result_list a:text('{decision}')")  # click 1: the decision's own page
    page.click("a:text('tree and timeline')")  # click 2: its workflow
    waits = page.locator("#waits-on")
    expect(waits).to_contain_text("What it waits on")
    expect(waits).to_contain_text(decision)
    expect(waits).to_contain_text("no task: it settles when someone settles it")
    expect(page.locator(f"tr[id='node-{stuck}']")).to_contain_text("suspended, awaiting")
    shot(page, "workflow-stuck")

    # It refreshes itself: once the decision is settled elsewhere, the open page shows the workflow finish.
    status, _ = Client(url)("promise.settle", {"id": decision, "state": "resolved", "value": {}})
    assert status == 200
    expect(page.locator("#waits-on")).to_contain_text("Finished", timeout=30_000)
    expect(page.locator("#root-state")).to_have_text("resolved")
    shot(page, "workflow-finished-after-decision")
