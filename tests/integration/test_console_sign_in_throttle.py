"""The console's sign-in under attack: against a real suite and a real ``gnomon console`` process, failed
sign-ins are throttled per client address and per API key id (429 with ``Retry-After``, the API not
asked), and a 16-thread sign-in flood does not hurt the honest tenant ``acme``."""

from __future__ import annotations

import http.client
import math
import re
import threading
import time
import urllib.parse
from collections import Counter

import pytest

from gnomon.cli.console import spawn
from gnomon.common.auth import keys
from gnomon.common.throttle_settings import ConsoleSignInSettings
from gnomon.sdk import Client
from gnomon_isolation_support import honest_tenant
from gnomon_test_support import running_suite

pytestmark = pytest.mark.timeout(600)
DEFAULTS = ConsoleSignInSettings()


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(pg_server, migrated_template, tmp_path_factory.mktemp("signin")) as s:
        yield s


class Browser:
    """One HTTP client of the console with the sign-in page's CSRF cookie; ``address`` is sent as
    ``X-Forwarded-For`` (uvicorn takes it as the client address from a loopback peer), None: the
    loopback address itself."""

    def __init__(self, console: str, address: str | None = None) -> None:
        host, port = console.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        self.headers = {"X-Forwarded-For": address} if address else {}
        self.conn.request("GET", "/login", headers=self.headers)
        r = self.conn.getresponse()
        body = r.read().decode()
        found = re.search(r'name="csrf" value="([^"]+)"', body)
        assert found is not None and r.getheader("set-cookie"), body[:500]
        self.csrf = found.group(1)
        cookie = str(r.getheader("set-cookie")).split(";")[0]
        self.headers = {**self.headers, "Cookie": cookie}

    def sign_in(self, key: str) -> tuple[int, str | None]:
        """``(status, Retry-After)`` of one sign-in with ``key`` (303: signed in)."""
        body = urllib.parse.urlencode({"api_key": key, "csrf": self.csrf, "next": "/jobs"})
        headers = {**self.headers, "Content-Type": "application/x-www-form-urlencoded"}
        self.conn.request("POST", "/login", body=body, headers=headers)
        r = self.conn.getresponse()
        r.read()
        return r.status, r.getheader("retry-after")

    def close(self) -> None:
        self.conn.close()


def wrong_key() -> str:
    return keys.generate().token


def test_failed_sign_ins_are_throttled_per_address_then_answered_429_with_retry_after(suite):
    console = spawn(suite).address
    good = suite.credentials.admin_key
    b = Browser(console, "198.51.100.7")
    try:
        assert [b.sign_in(wrong_key())[0] for _ in range(DEFAULTS.address_burst)] == [
            401
        ] * DEFAULTS.address_burst
        t0 = time.monotonic()
        refused = [b.sign_in(wrong_key()) for _ in range(300)]
        elapsed = time.monotonic() - t0
        assert {s for s, _ in refused} == {429}
        assert all(r is not None and 1 <= int(r) <= 60 / DEFAULTS.address_per_minute for _, r in refused)
        assert b.sign_in(good)[0] == 429  # the address is throttled, whatever key it now sends
        print(f"300 throttled sign-ins answered in {elapsed:.2f} s")
    finally:
        b.close()
    other = Browser(console, "198.51.100.8")  # another address is not affected
    try:
        assert other.sign_in(good)[0] == 303
    finally:
        other.close()


def test_guessing_one_key_id_from_many_addresses_is_throttled_per_key_id(suite):
    console = spawn(suite).address
    with Client(api=suite.api_address) as admin:
        admin.create_principal("guessed")
        target = keys.parse(admin.create_api_key("guessed").token)
    statuses = []
    for i in range(DEFAULTS.key_burst + 3):
        b = Browser(console, f"203.0.113.{i + 1}")  # a fresh address each time
        try:
            statuses.append(b.sign_in(f"gnk_{target.id}_guess{i}")[0])
        finally:
            b.close()
    assert statuses == [401] * DEFAULTS.key_burst + [429] * 3
    b = Browser(console, "203.0.113.200")
    try:
        assert b.sign_in(wrong_key())[0] == 401  # another key id from a fresh address is asked about
    finally:
        b.close()


def flood(console: str, seconds: float, threads: int = 16) -> Counter:
    """``threads`` clients signing in with made-up keys from the loopback address as fast as they
    can for ``seconds``; the statuses they got."""
    got: Counter = Counter()
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def run() -> None:
        b = Browser(console)
        mine: Counter = Counter()
        try:
            while time.monotonic() < stop:
                mine[b.sign_in(wrong_key())[0]] += 1
        finally:
            b.close()
            with lock:
                got.update(mine)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return got


def test_a_sign_in_flood_does_not_hurt_the_honest_tenant(suite):
    console = spawn(suite).address
    seconds = 15.0
    with honest_tenant(suite, namespace="acme", queue="honest") as acme:
        t0 = time.monotonic()
        statuses = flood(console, seconds)
        took = time.monotonic() - t0
    print(f"flood: {dict(statuses)}; {acme.report}")
    # only the burst and the tokens regained meanwhile reached the API
    regained = math.ceil(took * DEFAULTS.address_per_minute / 60)
    assert statuses[401] <= DEFAULTS.address_burst + regained, (statuses, took)
    assert statuses[429] > 100
    acme.report.assert_within(p99_s=1.0)
