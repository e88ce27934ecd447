"""The console's pieces that need no browser: a job's timeline and its spans, how an API error reads,
where a sign-in may redirect to, and sessions (CSRF check, idle expiry, clients closed at the end)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from gnomon.console.app import MAX_BODY, _next, create_app
from gnomon.console.pages_jobs import timeline
from gnomon.console.sessions import MAX_CLIENTS, MAX_FLASH, MAX_SESSIONS_PER_PRINCIPAL, SessionStore
from gnomon.console.web import _span, error_text
from gnomon.sdk import GnomonError
from gnomon.sdk.models import Job

T0 = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)
JOB = Job(
    name="namespaces/default/jobs/1",
    queue="q",
    payload=b"",
    state="SCHEDULED",
    version=1,
    schedule_time=T0,
    deadline=None,
    max_attempts=3,
    attempt=0,
    idempotency_key="k",
    create_time=T0,
    dispatch_time=None,
    start_time=None,
    finish_time=None,
    last_error="",
    region="local",
    request_id="",
    lease_duration=None,
)


def test_timeline_of_a_finished_job_has_the_dispatch_lag_and_each_step_since_the_previous():
    done = replace(
        JOB,
        dispatch_time=T0 + timedelta(milliseconds=120),
        start_time=T0 + timedelta(milliseconds=150),
        finish_time=T0 + timedelta(seconds=2),
    )
    steps = timeline(done)
    assert [s.label for s in steps] == ["scheduled", "dispatched", "started", "finished"]
    assert [(s.delta_label, s.delta) for s in steps[1:]] == [
        ("dispatch lag", timedelta(milliseconds=120)),
        ("start delay", timedelta(milliseconds=30)),
        ("run time", timedelta(milliseconds=1850)),
    ]


def test_timeline_of_a_waiting_job_has_steps_not_reached_and_no_spans():
    steps = timeline(JOB)
    assert [s.at for s in steps] == [T0, None, None, None]
    assert all(s.delta is None for s in steps)


def test_a_job_cancelled_before_dispatch_measures_its_finish_from_the_schedule_time():
    cancelled = replace(JOB, state="CANCELLED", finish_time=T0 + timedelta(minutes=5))
    assert timeline(cancelled)[3].delta == timedelta(minutes=5)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0123, "12 ms"),
        (1.25, "1.2 s"),
        (125, "2 min 5 s"),
        (7380, "2 h 3 min"),
        (93600, "1 d 2 h"),
        (-0.5, "-500 ms"),
    ],
    ids=["ms", "s", "min", "h", "d", "negative"],
)
def test_spans_read_in_the_largest_fitting_unit(seconds, text):
    assert _span(timedelta(seconds=seconds)) == text
    assert _span(None) == "-"


def test_an_api_error_reads_as_status_message_reason_and_new_violations():
    err = GnomonError(
        grpc.StatusCode.INVALID_ARGUMENT,
        "rate: must be >= 0",
        "INVALID_FIELD",
        [("rate", "must be >= 0"), ("burst", "must be >= 0")],
    )
    assert (
        error_text(err) == "INVALID_ARGUMENT: rate: must be >= 0 (reason INVALID_FIELD); burst: must be >= 0"
    )
    denied = GnomonError(grpc.StatusCode.PERMISSION_DENIED, "no access", "PERMISSION_DENIED")
    assert error_text(denied) == "PERMISSION_DENIED: no access"


@pytest.mark.parametrize(
    ("target", "goes_to"),
    [
        ("/schedules/x?namespace=a", "/schedules/x?namespace=a"),
        ("//evil.example/", "/jobs"),
        ("https://evil.example/", "/jobs"),
        ("/\\evil.example", "/jobs"),
        ("", "/jobs"),
        (None, "/jobs"),
    ],
    ids=["local", "scheme-relative", "absolute", "backslash", "empty", "none"],
)
def test_after_sign_in_only_local_paths_are_followed(target, goes_to):
    assert _next(target) == goes_to


class FakeClient:
    """Stands in for an AsyncClient: the store only makes and closes them."""

    def __init__(self, key: str, namespace: str) -> None:
        self.key, self.namespace, self.closed = key, namespace, False

    async def close(self) -> None:
        self.closed = True


async def test_sessions_check_csrf_make_one_client_per_namespace_and_close_them_when_they_end():
    store = SessionStore(FakeClient, idle_timeout=3600)
    s = await store.create("gnk_x", "principals/p", "API_KEY", ["shop"])
    assert s.csrf_ok(s.csrf) and not s.csrf_ok("") and not s.csrf_ok(None) and not s.csrf_ok(s.csrf + "x")
    a, b = await store.client(s, "shop"), await store.client(s, "other")
    assert await store.client(s, "shop") is a and a is not b
    assert (a.key, a.namespace) == ("gnk_x", "shop")
    assert await store.get(s.id) is s
    await store.end(s.id)
    assert await store.get(s.id) is None and a.closed and b.closed


async def test_a_session_keeps_a_few_clients_and_closes_the_least_recently_used():
    store = SessionStore(FakeClient)
    s = await store.create("gnk_x", "principals/p", "API_KEY", ["*"])
    first = await store.client(s, "ns-0")
    others = [await store.client(s, f"ns-{i}") for i in range(1, MAX_CLIENTS)]
    assert await store.client(s, "ns-0") is first  # used again: now the most recent
    await store.client(s, "one-more")
    assert others[0].closed and not first.closed and len(s.clients) == MAX_CLIENTS


async def test_an_idle_session_expires():
    store = SessionStore(FakeClient, idle_timeout=60)
    s = await store.create("gnk_x", "principals/p", "API_KEY", ["*"])
    s.last_seen -= 61
    assert await store.get(s.id) is None and len(store) == 0


async def test_the_least_recently_used_session_ends_first_at_the_limit():
    store = SessionStore(FakeClient, max_sessions=2)
    first = await store.create("k1", "principals/a", "API_KEY", [])
    second = await store.create("k2", "principals/b", "API_KEY", [])
    first.last_seen -= 10
    third = await store.create("k3", "principals/c", "API_KEY", [])
    assert await store.get(first.id) is None
    assert await store.get(second.id) is second and await store.get(third.id) is third


async def test_one_principal_cannot_sign_the_others_out():
    """Found in review: any key could sign in 10,000 times and end everyone's sessions. Each principal
    holds at most MAX_SESSIONS_PER_PRINCIPAL; a new one ends that principal's own oldest."""
    store = SessionStore(FakeClient, max_sessions=1000)
    victim = await store.create("kv", "principals/victim", "API_KEY", ["*"])
    mine = [await store.create("ka", "principals/attacker", "API_KEY", ["x"]) for _ in range(25)]
    assert await store.get(victim.id) is victim
    alive = [s for s in mine if await store.get(s.id) is s]
    assert alive == mine[-MAX_SESSIONS_PER_PRINCIPAL:]


async def test_flash_messages_are_capped():
    store = SessionStore(FakeClient)
    s = await store.create("k", "principals/p", "API_KEY", ["*"])
    for i in range(MAX_FLASH + 5):
        s.say("error", f"m{i}")
    assert [t for _, t in s.take_flash()] == [f"m{i}" for i in range(5, MAX_FLASH + 5)]


async def _asgi(app, method: str, path: str, headers=(), body: bytes = b"") -> tuple[int, bytes]:
    """Calls the ASGI ``app`` once in-process; returns (status, body)."""
    path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    sent = [{"type": "http.request", "body": body, "more_body": False}]
    out: dict = {"status": 0, "body": b""}

    async def receive():
        return sent.pop(0) if sent else {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    await app(scope, receive, send)
    return out["status"], out["body"]


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ([("content-type", "multipart/form-data; boundary=x"), ("content-length", "10")], 415),
        ([("content-type", "application/x-www-form-urlencoded")], 411),
        ([("content-type", "application/x-www-form-urlencoded"), ("content-length", str(MAX_BODY + 1))], 413),
        ([("content-type", "application/x-www-form-urlencoded"), ("content-length", "5")], 403),
    ],
    ids=["multipart", "no-length", "too-long", "small-form-reaches-the-csrf-check"],
)
async def test_posts_are_small_url_encoded_forms(headers, status):
    """Found in review: anyone could make the console hold ~1 GB per request or spool uploads to
    disk. Bodies are refused before anything reads them; a small form reaches the CSRF check (403)."""
    app = create_app(FakeClient)
    got, _ = await _asgi(app, "POST", "/login", headers, b"csrf=")
    assert got == status


async def test_the_sign_in_page_shows_only_its_own_messages():
    app = create_app(FakeClient)
    status, body = await _asgi(app, "GET", "/login?error=Sign%20in%20at%20https://evil.example")
    assert status == 200 and b"evil.example" not in body
    _, body = await _asgi(app, "GET", "/login?error=session_ended")
    assert b"sign in again" in body
