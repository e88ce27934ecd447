#!/usr/bin/env python3
"""Screenshots of the web console for docs/console.md: starts a suite (embedded PostgreSQL and etcd,
as ``gnomon dev`` does) with some data, its console, and Debian's headless Chromium, signs in with the
suite's admin key and saves one PNG per page into ``docs/console/``.

Usage: ``.venv/bin/python scripts/console_screenshots.py [--out docs/console]`` (needs
``scripts/bootstrap``: the dev extra, Playwright and ``/usr/bin/chromium``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from gnomon.cli.console import spawn  # noqa: E402
from gnomon.cli.suite import Suite  # noqa: E402
from gnomon.sdk import Client  # noqa: E402
from gnomon_console_support import CHROMIUM_ARGS, Seeded, chromium, seed  # noqa: E402


def main() -> int:
    """Makes the screenshots; returns the exit code (1 when chromium is missing)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "console"), help="where the PNGs go")
    out = Path(parser.parse_args().out)
    path, why = chromium()
    if path is None:
        print(f"console_screenshots: chromium unavailable: {why}", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    with Suite(api_listen=f"127.0.0.1:{_free()}") as suite:
        os.environ.update(suite.client_env())
        seeded = seed(suite, os.path.join(tempfile.mkdtemp(prefix="gnomon-shots-"), "record.txt"))
        with Client(api=suite.api_address) as c:
            now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
            c.backfill_schedule(seeded.schedule, now - timedelta(days=3), now)
            c.trigger_schedule(seeded.schedule)
            c.set_queue_rate_limit(Seeded.queue, 20, 40)
            c.replay_dead_letters(max_rate=1, max_jobs=10, reason="looked at the invoices", dry_run=True)
        console = spawn(suite)
        assert suite.credentials is not None
        key = Path(suite.credentials.admin_key_file).read_text().strip()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
            page = browser.new_page(
                base_url=f"http://{console.address}", viewport={"width": 1360, "height": 860}
            )
            page.goto("/login")
            page.screenshot(path=str(out / "login.png"))
            page.fill("input[name=api_key]", key)
            page.click("button[type=submit]")
            page.wait_for_url("**/jobs")
            for name, url in (
                ("jobs", "/jobs?namespace=default"),
                ("job", f"/jobs/{seeded.dead}?namespace=default"),
                ("schedules", "/schedules?namespace=default"),
                ("schedule", f"/schedules/{seeded.schedule}?namespace=default&from=2027-03-25T00:00:00Z"),
                ("queues", "/queues?namespace=default"),
                ("queue", f"/queues/{Seeded.queue}?namespace=default"),
                ("dead-letters", "/dead-letters?namespace=default"),
                ("cluster", "/cluster?namespace=default"),
            ):
                page.goto(url)
                page.screenshot(path=str(out / f"{name}.png"), full_page=True)
                print(f"wrote {out / (name + '.png')}")
            browser.close()
    return 0


def _free() -> int:
    from gnomon.devservers import free_port

    return free_port()


if __name__ == "__main__":
    sys.exit(main())
