"""The console's cluster page over two regions (one database and etcd, a set of services per region,
dispatchers standing by for each other): a row per region with its live dispatchers and who owns its
shards, and each region's shards with owner and fencing token, as the API reports them."""

from __future__ import annotations

import pytest

from gnomon.cli.console import spawn
from gnomon.sdk import Client
from gnomon_console_support import CHROMIUM_ARGS, chromium, sign_in
from gnomon_test_support import running_suite, wait_for

pytestmark = pytest.mark.timeout(300)


def test_cluster_page_summarizes_each_region_and_shows_its_shards(
    pg_server, migrated_template, tmp_path, session_credentials
):
    path, why = chromium()
    if path is None:
        pytest.skip(f"chromium unavailable: {why}")
    from playwright.sync_api import sync_playwright

    with running_suite(pg_server, migrated_template, tmp_path, regions=["eu", "us"]) as suite:
        with Client(api=suite.api_address) as c:

            def settled():
                per = {r: c.list_shards(r) for r in ("eu", "us")}
                return per if all(s.owned for shards in per.values() for s in shards) else None

            shards = wait_for(settled, 60, "every shard of both regions owned")
            dispatchers = {r: c.list_dispatchers(r) for r in ("eu", "us")}
        console = spawn(suite)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
            try:
                _, page = sign_in(
                    browser, f"http://{console.address}", session_credentials.admin_key, "/cluster"
                )
                for region in ("eu", "us"):
                    row = page.locator(f"#regions tr[data-region='{region}']").inner_text()
                    [d] = dispatchers[region]
                    assert f"{d.dispatcher_id} ({len(shards[region])})" in row  # its own region's shards
                page.click("#regions a:text-is('us')")
                page.wait_for_url("**region=us*")
                rows = page.locator("#shards tbody tr")
                assert rows.count() == len(shards["us"])
                first = shards["us"][0]
                text = rows.first.inner_text()
                assert first.owner in text and str(first.fencing_token) in text and "us" in text
                assert dispatchers["us"][0].dispatcher_id in page.locator("#dispatchers").inner_text()
            finally:
                browser.close()
