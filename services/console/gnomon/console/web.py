"""What every console page shares: templates (Jinja2, autoescaped), the session check, the CSRF
check of POST forms, and one way to show an API error (its gRPC status code and message, never a
stack trace).

A page handler is an ``async def handler(ctx: Ctx) -> Response`` wrapped in :func:`page`; ``ctx``
carries the request, the session, the namespace the page is about and the session's API client for
it. Presentation helpers (durations, instants) are the templates' filters, defined here.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

import grpc
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from gnomon.sdk import AsyncClient, GnomonError

from .sessions import COOKIE, Session, SessionStore

__all__ = ["Ctx", "page", "render", "env", "error_text", "HTTP_STATUS"]

#: HTTP status of a page whose API call failed with this gRPC code (anything else: 502).
HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


def _instant(value: datetime | None) -> str:
    """``2026-12-01 23:17:48.123 UTC``, or ``-`` for None."""
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _span(value: timedelta | float | None) -> str:
    """A span for people: ``850 ms``, ``12.3 s``, ``4 min 5 s``, ``2 h 3 min``, ``1 d 2 h``; ``-``
    for None; negative spans get a leading minus."""
    if value is None:
        return "-"
    s = value.total_seconds() if isinstance(value, timedelta) else float(value)
    sign, s = ("-" if s < 0 else ""), abs(s)
    if s < 1:
        text = f"{s * 1000:.0f} ms"
    elif s < 60:
        text = f"{s:.1f} s"
    elif s < 3600:
        text = f"{int(s // 60)} min {int(s % 60)} s"
    elif s < 86400:
        text = f"{int(s // 3600)} h {int(s % 3600 // 60)} min"
    else:
        text = f"{int(s // 86400)} d {int(s % 86400 // 3600)} h"
    return sign + text


def _enum(value: Any) -> str:
    """An enum member's name (``FailureClass.PERMANENT`` -> ``PERMANENT``), ``-`` for None/""."""
    if value is None or value == "":
        return "-"
    return str(getattr(value, "name", value))


def _short(name: str) -> str:
    """The last segment of a resource name."""
    return name.rsplit("/", 1)[-1]


env = Environment(
    loader=PackageLoader("gnomon.console", "templates"), autoescape=select_autoescape(default=True)
)
env.filters.update(instant=_instant, span=_span, enum=_enum, short=_short, q=lambda v: quote(str(v), safe=""))


def error_text(err: GnomonError) -> str:
    """An API error for people: ``PERMISSION_DENIED: <message>`` with the reason and any field
    violations (``field: description``)."""
    code = err.code.name if isinstance(err.code, grpc.StatusCode) else str(err.code)
    text = f"{code}: {err.message}"
    if err.reason and err.reason != code:
        text += f" (reason {err.reason})"
    for f, d in err.field_violations:
        if f"{f}: {d}" not in err.message:
            text += f"; {f}: {d}"
    return text


@dataclass
class Ctx:
    """What a page handler gets.

    Attributes:
        request: the Starlette request.
        session: the signed-in user's session.
        namespace: the namespace the page is about (``?namespace=``, else the user's first).
        api: the session's :class:`~gnomon.sdk.AsyncClient` for ``namespace`` (the user's key).
        form: the POST form (already CSRF-checked), or None for a GET.
    """

    request: Request
    session: Session
    namespace: str
    api: AsyncClient
    form: FormData | None = None

    def url(self, path: str, **params: Any) -> str:
        """``path`` with ``namespace`` and the non-empty ``params`` as the query string."""
        q = {"namespace": self.namespace, **{k: v for k, v in params.items() if v not in (None, "")}}
        return f"{path}?{urlencode(q)}"

    def field(self, name: str, default: str = "") -> str:
        """A form field (POST) or query parameter (GET), stripped; ``default`` when absent."""
        src: Any = self.form if self.form is not None else self.request.query_params
        value = src.get(name)
        return str(value).strip() if isinstance(value, str) else default

    def done(self, path: str, message: str, **params: Any) -> Response:
        """After a successful POST: queue ``message`` and redirect (303) to ``path``."""
        self.session.say("ok", message)
        return RedirectResponse(self.url(path, **params), status_code=303)


def render(ctx: Ctx | None, template: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    """Renders ``template`` with ``values`` and, with a ``ctx``, the session's user, namespaces,
    CSRF token and queued messages (for the layout)."""
    if ctx is not None:
        s = ctx.session
        names = [n for n in s.namespaces if n != "*"]
        if ctx.namespace not in names:
            names.insert(0, ctx.namespace)
        values = {
            "principal": s.principal,
            "namespaces": names,
            "namespace": ctx.namespace,
            "csrf": s.csrf,
            "flash": s.take_flash(),
            "path": ctx.request.url.path,
            "ctx": ctx,
            **values,
        }
    return HTMLResponse(env.get_template(template).render(**values), status_code=status_code)


Handler = Callable[[Ctx], Awaitable[Response]]


def page(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """Wraps a page handler: no session -> redirect to ``/login?next=<this page>``; a POST without
    the session's CSRF token -> 403; an API error -> the error page with its status code and
    message (``UNAUTHENTICATED``, e.g. a revoked key, ends the session: back to the sign-in page); a
    ``ValueError``/``TypeError`` from the arguments -> 400 with its text."""

    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        store: SessionStore = request.app.state.sessions
        session = await store.get(request.cookies.get(COOKIE))
        if session is None:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?{urlencode({'next': target})}", status_code=303)
        form = None
        if request.method == "POST":
            form = await request.form()
            token = form.get("csrf")
            if not session.csrf_ok(token if isinstance(token, str) else None):
                return HTMLResponse("CSRF token missing or wrong: reload the page and try again", 403)
        namespace = (request.query_params.get("namespace") or "").strip() or _default_ns(session)
        if "*" not in session.namespaces and namespace not in session.namespaces:
            # no API client (a channel) for a namespace the user's grants do not name: the API would
            # refuse every call anyway, and clients per session are a resource (review 2026-12-02)
            return render(
                None,
                "error.html",
                403,
                error=f"PERMISSION_DENIED: your grants do not name namespace {namespace!r}",
                path="/jobs",
                namespace=_default_ns(session),
            )
        ctx = Ctx(request, session, namespace, await store.client(session, namespace), form)
        try:
            return await handler(ctx)
        except GnomonError as e:
            if e.code == grpc.StatusCode.UNAUTHENTICATED:
                await store.end(session.id)
                return RedirectResponse("/login?error=session_ended", status_code=303)
            if request.method == "POST":  # show it on the page the form came from
                session.say("error", error_text(e))
                return RedirectResponse(_back(ctx), status_code=303)
            return render(ctx, "error.html", HTTP_STATUS.get(e.code, 502), error=error_text(e))
        except (ValueError, TypeError, ArithmeticError) as e:
            if request.method == "POST":
                session.say("error", f"invalid input: {e}")
                return RedirectResponse(_back(ctx), status_code=303)
            return render(ctx, "error.html", 400, error=f"invalid input: {e}")

    return endpoint


def _default_ns(session: Session) -> str:
    return next((n for n in session.namespaces if n != "*"), "default")


def _back(ctx: Ctx) -> str:
    """Where a refused POST returns: the page the form came from (the ``Referer``'s path and query
    when it is this console's and a plain local path), else the form's own path's page."""
    request = ctx.request
    url = request.headers.get("referer") or ""
    base = str(request.base_url).rstrip("/")
    path = url[len(base) :] if url.startswith(base + "/") else ""
    if path.startswith("/") and not path.startswith("//") and "\\" not in path:
        return path
    return ctx.url(request.url.path)
