"""The console's ASGI application: routes, sign-in and sign-out, security headers.

Sign-in takes an API key, checks it with one ``WhoAmI`` call and keeps it in a server-side session
(:mod:`.sessions`); failed sign-ins are throttled per client address and per key id
(:mod:`.throttle`: 429 with ``Retry-After``, the API not asked); the sign-in form itself is protected against CSRF by a double-submit token (a
cookie and a form field that must match). Every other page is in :mod:`.pages_jobs`,
:mod:`.pages_schedules`, :mod:`.pages_queues`, :mod:`.pages_dead_letters` and
:mod:`.pages_cluster`.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from gnomon.sdk import AsyncClient, GnomonError

from . import pages_cluster, pages_dead_letters, pages_jobs, pages_queues, pages_schedules
from .sessions import COOKIE, SessionStore
from .throttle import SignInThrottle, Ticket
from .web import error_text, render

__all__ = ["create_app"]

_LOGIN_COOKIE = "gnomon_console_login"
#: The sign-in page's messages by the code in its ``?error=`` (never text from the URL itself).
_LOGIN_ERRORS = {
    "session_ended": "The API no longer accepts this session's key (UNAUTHENTICATED): sign in again."
}
#: API answers that refuse the key itself: such a sign-in costs its throttle tokens (others, e.g.
#: UNAVAILABLE, say nothing about the key and cost nothing).
_REFUSED = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})
_STATIC = Path(__file__).with_name("static")
#: What pages may load: only this console's own script and style sheet; no frames, no plugins.
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


class _Headers(BaseHTTPMiddleware):
    """Security headers on every response; pages are never cached (they show live data)."""

    async def dispatch(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", _CSP)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["X-Frame-Options"] = "DENY"
        if not request.url.path.startswith("/static/"):
            response.headers["Cache-Control"] = "no-store"
        return response


#: Largest request body the console reads, bytes: its forms are a few short fields.
MAX_BODY = 64 * 1024


class _BodyLimit:
    """A pure ASGI middleware: a POST must be ``application/x-www-form-urlencoded`` (415 otherwise:
    no multipart, so no uploads spooled to disk) with a ``Content-Length`` (411 without) of at most
    :data:`MAX_BODY` bytes (413 over it), checked before anything reads the body; the bytes actually
    received are counted too, and a body longer than it said ends the request."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        length = headers.get("content-length", "")
        refusal = None
        if ctype != "application/x-www-form-urlencoded":
            refusal = PlainTextResponse("forms only (application/x-www-form-urlencoded)", 415)
        elif not length.isdigit():
            refusal = PlainTextResponse("a Content-Length is required", 411)
        elif int(length) > MAX_BODY:
            refusal = PlainTextResponse(f"request body over {MAX_BODY} bytes", 413)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        seen = 0

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > int(length):
                raise ValueError("request body longer than its Content-Length")
            return message

        await self.app(scope, counted, send)


def _next(target: str | None) -> str:
    """A local path to go to after sign-in (anything else: ``/jobs``)."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/jobs"


def _login_handler(
    sessions: SessionStore, throttle: SignInThrottle, cookie: Callable[..., None]
) -> Callable[[Request], Awaitable[Response]]:
    """The ``POST /login`` handler: checks the sign-in form's CSRF token, admits the attempt through
    ``throttle`` (429 with ``Retry-After`` past it), asks the API who the key is, and on success starts
    a session in ``sessions`` (its cookie set by ``cookie``) and redirects to the form's target."""

    async def login(request: Request) -> Response:
        form = await request.form()
        key, target = str(form.get("api_key") or "").strip(), _next(str(form.get("next") or ""))
        expected, given = request.cookies.get(_LOGIN_COOKIE) or "", str(form.get("csrf") or "")
        if not expected or not hmac.compare_digest(expected, given):
            return PlainTextResponse("CSRF token missing or wrong: reload the sign-in page", 403)

        def again(error: str) -> Response:
            return render(None, "login.html", 401, error=error, next=target, login_csrf=expected)

        if not key:
            return again("Enter an API key.")
        ticket = throttle.admit(request.client.host if request.client else "unknown", key)
        if not isinstance(ticket, Ticket):
            throttled = render(
                None,
                "login.html",
                429,
                error=f"Too many failed sign-ins: try again in {ticket} s.",
                next=target,
                login_csrf=expected,
            )
            throttled.headers["Retry-After"] = str(ticket)
            return throttled
        client = sessions.new_client(key, "default")
        try:
            me = await client.whoami()
        except GnomonError as e:
            if e.code not in _REFUSED:  # the API could not check the key: the attempt costs nothing
                throttle.succeeded(ticket)
            return again(f"The API refused this key: {error_text(e)}")
        except (ValueError, OSError) as e:
            throttle.succeeded(ticket)
            return again(f"Cannot reach the API: {e}")
        finally:
            await client.close()
        throttle.succeeded(ticket)
        namespaces = list(dict.fromkeys(g.namespace for g in me.grants)) or ["default"]
        s = await sessions.create(key, me.principal, me.kind, namespaces)
        response = RedirectResponse(target, status_code=303)
        cookie(response, COOKIE, s.id)
        response.delete_cookie(_LOGIN_COOKIE, path="/")
        return response

    return login


def create_app(
    client_factory: Callable[[str, str], AsyncClient],
    *,
    secure_cookies: bool = False,
    idle_timeout: float = 8 * 3600,
    regions: list[str] | None = None,
    sign_in_throttle: SignInThrottle | None = None,
) -> Starlette:
    """The console application.

    Args:
        client_factory: ``(api_key, namespace) -> AsyncClient`` making the API calls of a session
            (the console's API address and TLS settings, the user's key).
        secure_cookies: mark cookies ``Secure`` (the console serves HTTPS).
        idle_timeout: seconds of inactivity after which a session ends.
        regions: the deployment's regions, summarized on the cluster page (the API cannot list them).
        sign_in_throttle: admits sign-in attempts (default: :class:`SignInThrottle` with
            ``GNOMON_CONSOLE_SIGNIN_*``); past it a sign-in gets 429 with ``Retry-After``.
    """
    sessions = SessionStore(client_factory, idle_timeout=idle_timeout)
    throttle = sign_in_throttle or SignInThrottle()

    def cookie(response: Response, name: str, value: str, max_age: int | None = None) -> None:
        response.set_cookie(
            name, value, max_age=max_age, httponly=True, samesite="strict", secure=secure_cookies, path="/"
        )

    async def login_form(request: Request) -> Response:
        token = request.cookies.get(_LOGIN_COOKIE) or secrets.token_urlsafe(32)
        response = render(
            None,
            "login.html",
            error=_LOGIN_ERRORS.get(request.query_params.get("error", ""), ""),
            signed_out=request.query_params.get("signed_out") == "1",
            next=_next(request.query_params.get("next")),
            login_csrf=token,
        )
        cookie(response, _LOGIN_COOKIE, token, max_age=3600)
        return response

    login = _login_handler(sessions, throttle, cookie)

    async def logout(request: Request) -> Response:
        s = await sessions.get(request.cookies.get(COOKIE))
        form = await request.form()
        if s is not None:
            if not s.csrf_ok(str(form.get("csrf") or "")):
                return PlainTextResponse("CSRF token missing or wrong", 403)
            await sessions.end(s.id)
        response = RedirectResponse("/login?signed_out=1", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    async def home(request: Request) -> Response:
        return RedirectResponse("/jobs", status_code=303)

    async def healthz(request: Request) -> Response:  # "ok <pid>": whoever started us knows it is us
        return PlainTextResponse(f"ok {os.getpid()}")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await sessions.close()

    routes = [
        Route("/", home),
        Route("/healthz", healthz),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        *pages_jobs.routes,
        *pages_schedules.routes,
        *pages_queues.routes,
        *pages_dead_letters.routes,
        *pages_cluster.routes,
        Mount("/static", StaticFiles(directory=str(_STATIC)), name="static"),
    ]
    app = Starlette(
        routes=routes, middleware=[Middleware(_BodyLimit), Middleware(_Headers)], lifespan=lifespan
    )
    app.state.sessions = sessions
    app.state.regions = list(regions or [])
    return app
