"""The console's browser tests and screenshots share this: Debian's Chromium driven by Playwright
(from PyPI; its own browser download is not used), and a suite seeded with something to show on
every page (a waiting job, a dead letter with its attempt, a schedule with a DST-crossing rule).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from gnomon.sdk import Client

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
#: Flags for a headless Chromium in a container: no sandbox (root), no GPU, nothing fetched.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
TESTS_DIR = str(Path(__file__).resolve().parent)


def chromium() -> tuple[str | None, str]:
    """``(path of chromium, "")``, or ``(None, why it is missing)`` when scripts/bootstrap recorded
    that it could not install it. Raises ``AssertionError`` when it is missing without such a record
    (bootstrap did not run): a broken setup, not a skip."""
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM, ""
    record = ROOT / ".venv" / ".chromium-unavailable"
    if record.exists():
        return None, record.read_text().strip()
    found = shutil.which("chromium")
    if found:
        return found, ""
    raise AssertionError("chromium is missing and scripts/bootstrap did not say why: run scripts/bootstrap")


@dataclass
class Seeded:
    """What :func:`seed` made: job ids (``waiting``: SCHEDULED an hour ahead; ``dead``: failed
    PERMANENT on its only attempt), the schedule id and the queues."""

    waiting: str
    dead: str
    schedule: str
    queue: str = "console-orders"
    dead_queue: str = "console-billing"


def seed(suite, record_file: str, timeout: float = 60.0) -> Seeded:
    """Seeds a started suite through the API as its admin: a worker failing every job of
    ``console-billing`` PERMANENT (its executions recorded in ``record_file``), one job there that
    ends DEAD, a job of ``console-orders`` due in an hour, a few more, and schedule ``nightly-report``
    (``30 2 * * *`` in Europe/Berlin: its fire times cross the end of DST in late October). Waits
    (at most ``timeout`` s) until the dead letter exists."""
    import time

    suite.start_worker(
        [Seeded.dead_queue],
        "gnomon_test_handlers:permanent_failure",
        concurrency=2,
        env={"GNOMON_TEST_RECORD": record_file, "PYTHONPATH": TESTS_DIR},
    )
    with Client(api=suite.api_address) as c:
        waiting = c.create_job(Seeded.queue, {"order": 1042}, delay=timedelta(hours=1))
        for i in range(3):
            c.create_job(Seeded.queue, {"order": 1043 + i}, delay=timedelta(hours=2 + i))
        dead = c.create_job(Seeded.dead_queue, {"invoice": "INV-7"}, max_attempts=1)
        s = c.create_schedule(
            "console-reports",
            cron="30 2 * * *",
            time_zone="Europe/Berlin",
            schedule_id="nightly-report",
            misfire_policy="COALESCE",
            overlap_policy="SKIP",
        )
        deadline = time.monotonic() + timeout
        while c.get_job(dead.name).state != "DEAD":
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {dead.name} did not end DEAD in {timeout} s")
            time.sleep(0.1)
    return Seeded(waiting=waiting.id, dead=dead.id, schedule=s.id)


def sign_in(browser, url: str, key: str, path: str = "/jobs"):
    """A new browser context on the console at ``url``, signed in with ``key`` and on ``path``;
    returns ``(context, page)`` (the caller closes the context)."""
    context = browser.new_context(base_url=url)
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(path)
    page.fill("input[name=api_key]", key)
    page.click("button[type=submit]")
    page.wait_for_url(f"**{path}*")
    return context, page
