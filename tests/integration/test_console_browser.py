"""The web console in a real browser (Debian's headless Chromium driven by Playwright) against a real
suite: the console process (`gnomon console`, started as `gnomon dev` starts it) serves every page
with live data, and one operation per page works end to end, checked through the API afterwards.
Also: no session means the sign-in page, a bad key is refused with the API's message, and a POST
without the session's CSRF token is refused.

One suite, one console and one browser serve the whole module (a sign-in per test: a fresh context).
"""

from __future__ import annotations

import os
import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from gnomon.cli.console import spawn
from gnomon.sdk import Client
from gnomon_console_support import CHROMIUM_ARGS, Seeded, chromium, seed
from gnomon_test_support import running_suite

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def browser_path() -> str:
    path, why = chromium()
    if path is None:
        pytest.skip(f"chromium unavailable: {why}")
    return path


@pytest.fixture(scope="module")
def env(browser_path, pg_server, migrated_template, tmp_path_factory, session_credentials):
    from playwright.sync_api import sync_playwright

    work = tmp_path_factory.mktemp("console")
    with running_suite(pg_server, migrated_template, work) as suite:
        seeded = seed(suite, os.path.join(str(work), "record.txt"))
        console = spawn(suite)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=browser_path, args=CHROMIUM_ARGS)
            try:
                yield suite, f"http://{console.address}", browser, seeded, session_credentials.admin_key
            finally:
                browser.close()


@pytest.fixture
def page(env):
    """A browser page signed in as the suite's admin, on the jobs page."""
    _, url, browser, _, key = env
    context = browser.new_context(base_url=url)
    p = context.new_page()
    p.set_default_timeout(20_000)
    p.goto("/jobs")
    p.fill("input[name=api_key]", key)
    p.click("button[type=submit]")
    p.wait_for_url(re.compile(r"/jobs"))
    yield p
    context.close()


def client(env) -> Client:
    return Client(api=env[0].api_address)


def test_without_a_session_every_page_leads_to_the_sign_in(env):
    _, url, browser, _, _ = env
    context = browser.new_context(base_url=url)
    try:
        p = context.new_page()
        for path in ("/jobs", "/schedules/nightly-report", "/queues", "/dead-letters", "/cluster"):
            p.goto(path)
            assert "/login" in p.url and "next=" in p.url
            assert p.locator("input[name=api_key]").count() == 1
    finally:
        context.close()


def test_a_bad_key_is_refused_with_the_apis_status(env):
    _, url, browser, _, _ = env
    context = browser.new_context(base_url=url)
    try:
        p = context.new_page()
        p.goto("/login")
        p.fill("input[name=api_key]", "gnk_0000000000000000_notakey")
        p.click("button[type=submit]")
        alert = p.locator(".flash.error").inner_text()
        assert "UNAUTHENTICATED" in alert
        assert context.cookies() == [] or all(
            c["name"] != "gnomon_console_session" for c in context.cookies()
        )
    finally:
        context.close()


def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(env, page):
    suite, _, _, seeded, _ = env
    r = page.request.post(f"/jobs/{seeded.waiting}/cancel", form={"csrf": "forged"})
    assert r.status == 403
    r = page.request.post(f"/jobs/{seeded.waiting}/cancel", form={})
    assert r.status == 403
    with client(env) as c:
        assert c.get_job(seeded.waiting).state == "SCHEDULED"


def test_jobs_page_lists_live_jobs_and_filters_by_state(env, page):
    _, _, _, seeded, _ = env
    page.goto(f"/jobs?namespace=default&queue={Seeded.queue}")
    row = page.locator(f"tr[data-job='{seeded.waiting}']")
    assert "SCHEDULED" in row.inner_text()
    assert page.locator(f"tr[data-job='{seeded.dead}']").count() == 0  # another queue
    page.goto("/jobs?namespace=default&state=DEAD")
    assert "DEAD" in page.locator(f"tr[data-job='{seeded.dead}']").inner_text()
    assert page.locator(f"tr[data-job='{seeded.waiting}']").count() == 0


def test_job_page_shows_timeline_and_attempts_and_cancel_works(env, page):
    _, _, _, seeded, _ = env
    page.goto(f"/jobs/{seeded.dead}?namespace=default")
    timeline = page.locator("#timeline").inner_text()
    assert "dispatch lag" in timeline and "run time" in timeline
    attempts = page.locator("#attempts tbody tr").first.inner_text()
    assert "FAILED" in attempts and "PERMANENT" in attempts and "bad input" in attempts
    with client(env) as c:
        [a] = c.list_job_attempts(seeded.dead)
    assert a.worker_id and a.worker_id in attempts
    assert str(a.fencing_token) in attempts

    page.goto(f"/jobs/{seeded.waiting}?namespace=default")
    with client(env) as c:
        before = c.get_job(seeded.waiting).schedule_time
    page.fill("input[name=delay]", "7200")
    page.click("#reschedule")
    assert page.locator(".flash.ok").inner_text().startswith("rescheduled to ")
    with client(env) as c:
        after = c.get_job(seeded.waiting).schedule_time
    assert before and after and after > before + timedelta(minutes=30)  # an hour ahead -> two
    page.on("dialog", lambda d: d.accept())
    page.click("#cancel")
    assert "cancel: CANCELLED" in page.locator(".flash.ok").inner_text()
    assert page.locator("#job-state").inner_text() == "CANCELLED"
    with client(env) as c:
        assert c.get_job(seeded.waiting).state == "CANCELLED"


def test_schedule_pages_show_rule_fire_times_with_dst_notes_and_pause_works(env, page):
    _, _, _, seeded, _ = env
    page.goto("/schedules?namespace=default")
    row = page.locator(f"tr[data-schedule='{seeded.schedule}']").inner_text()
    assert "cron 30 2 * * *" in row and "Europe/Berlin" in row and "ACTIVE" in row
    page.click(f"a:text-is('{seeded.schedule}')")
    facts = page.locator("dl.facts").inner_text()
    assert "COALESCE" in facts and "SKIP" in facts
    with client(env) as c:
        preview = c.preview_schedule(name=seeded.schedule, count=10)
    fire_rows = page.locator("#fire-times tbody tr")
    assert fire_rows.count() == len(preview) == 10
    assert preview[0].local_time in fire_rows.first.inner_text()
    page.fill("input[name=from]", "2027-03-25T00:00:00Z")  # Berlin's clocks skip 02:00-03:00 on 28 March
    page.click("#preview")
    with client(env) as c:
        spring = c.preview_schedule(
            name=seeded.schedule, count=10, from_time=datetime(2027, 3, 25, tzinfo=UTC)
        )
    noted = [f for f in spring if f.note]
    assert noted and noted[0].note in page.locator("#fire-times").inner_text()
    page.click("#pause")
    assert page.locator(".flash.ok").inner_text() == "paused"
    assert page.locator("#schedule-status").inner_text() == "PAUSED"
    with client(env) as c:
        assert c.get_schedule(seeded.schedule).paused
    page.click("#resume")
    with client(env) as c:
        assert not c.get_schedule(seeded.schedule).paused
    page.on("dialog", lambda d: d.accept())
    page.click("#trigger")
    flash = page.locator(".flash.ok").inner_text()
    assert flash.startswith("triggered: FIRED, job ")
    with client(env) as c:
        [latest], _ = c.list_schedule_occurrences_page(seeded.schedule, page_size=1)
    assert latest.source == "TRIGGER" and latest.job and latest.job.rsplit("/", 1)[1] in flash
    assert "TRIGGER" in page.locator("#occurrences tbody tr").first.inner_text()


def test_queue_pages_show_backlog_and_breaker_and_edit_the_rate_limit(env, page):
    page.goto("/queues?namespace=default")
    row = page.locator(f"tr[data-queue='{Seeded.queue}']").inner_text()
    assert "CLOSED" in row and "none" in row  # breaker closed, no rate limit yet
    page.click(f"a:text-is('{Seeded.queue}')")
    page.fill("input[name=rate]", "5")
    page.fill("input[name=burst]", "7")
    page.click("#set-rate")
    assert "rate limit 5/s, burst 7" in page.locator(".flash.ok").inner_text()
    assert "5/s, burst 7" in page.locator("#rate-limit").inner_text()
    with client(env) as c:
        q = c.get_queue(Seeded.queue)
    assert q.rate_limit is not None and (q.rate_limit.rate, q.rate_limit.burst) == (5.0, 7)


def test_dead_letters_page_lists_them_and_a_dry_run_is_counted_and_audited(env, page):
    _, _, _, seeded, _ = env
    page.goto(f"/dead-letters?namespace=default&queue={Seeded.dead_queue}")
    row = page.locator(f"tr[data-job='{seeded.dead}']").inner_text()
    assert "PERMANENT" in row and "bad input" in row
    page.fill("input[name=reason]", "console dry run")
    page.click("#dry-run")
    assert "dry run: 1 would be replayed" in page.locator(".flash.ok").inner_text()
    assert page.locator("#matched").inner_text() == "1"
    assert page.locator("#replayed").inner_text() == "0"
    with client(env) as c:
        entries, _ = c.list_audit_entries_page(page_size=10)
        assert any(e.action.endswith("dry_run") and e.reason == "console dry run" for e in entries)
        assert c.get_job(seeded.dead).state == "DEAD"
        [d] = [d for d in c.list_dead_letters(queue=Seeded.dead_queue) if d.job.id == seeded.dead]
        assert d.replayed_by == ""  # a dry run replays nothing
    page.goto("/dead-letters?namespace=default")
    assert "console dry run" in page.locator("#audit").inner_text()


def test_a_replay_shows_its_progress_until_the_replayed_jobs_finish(env, page):
    _, _, _, seeded, _ = env
    page.on("dialog", lambda d: d.accept())
    page.goto(f"/dead-letters?namespace=default&queue={Seeded.dead_queue}")
    page.fill("input[name=reason]", "console replay")
    page.click("#replay")
    assert "replayed 1 of 1" in page.locator(".flash.ok").inner_text()
    with client(env) as c:
        [d] = [
            d
            for d in c.list_dead_letters(queue=Seeded.dead_queue, include_replayed=True)
            if d.job.id == seeded.dead
        ]
        replay = d.replayed_by.rsplit("/", 1)[1]
    assert replay in page.content()  # the replayed job is linked
    # the replayed job runs on the failing worker again and ends DEAD: the page reloads itself until then
    expect(page.locator("#progress-text")).to_have_text(re.compile(r"^1 of 1 "), timeout=60_000)
    assert "DEAD 1" in page.locator("ul.states").inner_text()
    assert page.locator("[data-refresh]").count() == 0  # finished: no more reloads
    with client(env) as c:
        assert c.get_job(replay).state == "DEAD"


def test_cluster_page_lists_dispatchers_and_shards_with_owner_and_token(env, page):
    page.goto("/cluster?namespace=default")
    with client(env) as c:
        dispatchers = c.list_dispatchers()
        shards = c.list_shards()
    text = page.locator("#dispatchers").inner_text()
    assert dispatchers and all(d.dispatcher_id in text for d in dispatchers)
    rows = page.locator("#shards tbody tr")
    assert rows.count() == len(shards)
    owned = next(s for s in shards if s.owned)
    row = rows.nth(shards.index(owned)).inner_text()
    assert owned.owner in row and str(owned.fencing_token) in row
    assert owned.region in page.locator("#regions-seen").inner_text()


def test_a_readers_key_sees_what_the_api_allows_it_and_nothing_more(env):
    suite, url, browser, seeded, _ = env
    with client(env) as c:
        c.create_principal("console-reader")
        c.grant_role("console-reader", "READER", "default")
        key = c.create_api_key("console-reader").token
    context = browser.new_context(base_url=url)
    try:
        p = context.new_page()
        p.goto("/login?next=/jobs%3Fnamespace%3Ddefault%26state%3DDEAD")
        p.fill("input[name=api_key]", key)
        p.click("button[type=submit]")
        assert "principals/console-reader" in p.locator("header").inner_text()
        assert p.locator(f"tr[data-job='{seeded.dead}']").count() == 1  # reading is allowed
        p.goto(f"/schedules/{seeded.schedule}?namespace=default")
        p.click("#pause")  # a reader may not pause: the API's refusal, on the page it came from
        assert p.locator(".flash.error").inner_text().startswith("PERMISSION_DENIED:")
        assert "/schedules/" in p.url
        p.goto("/jobs?namespace=elsewhere")
        assert p.locator(".flash.error").inner_text().startswith("PERMISSION_DENIED:")
    finally:
        context.close()
    with client(env) as c:
        assert not c.get_schedule(seeded.schedule).paused


def test_an_api_error_is_shown_as_status_and_message(env, page):
    page.goto(f"/jobs/{uuid.uuid4()}?namespace=default")
    text = page.locator(".flash.error").inner_text()
    assert text.startswith("NOT_FOUND:")
    page.goto("/jobs/not-a-uuid?namespace=default")
    text = page.locator(".flash.error").inner_text()
    assert text.startswith("INVALID_ARGUMENT:") and text.count("must be") == 1
    assert "Traceback" not in page.content()


def test_sign_out_ends_the_session(env, page):
    page.click("header form.who button")
    assert "/login" in page.url
    assert page.locator(".flash.ok").inner_text() == "Signed out."
    page.goto("/jobs")
    assert "/login" in page.url
