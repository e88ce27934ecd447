"""Server-side sessions of the console: who is signed in, with which API key, and their CSRF token.

The API key never leaves the server: the browser holds only a random session id (32 bytes, URL-safe
base64) in an ``HttpOnly``, ``SameSite=Strict`` cookie (``Secure`` when the console serves HTTPS).
Every session has its own CSRF token, which every POST form carries and :meth:`Session.csrf_ok`
checks. Sessions live in memory (a restart signs everyone out) and end after ``idle_timeout``
seconds without a request, or on sign-out; their API clients are closed then.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gnomon.sdk import AsyncClient

__all__ = ["Session", "SessionStore", "COOKIE", "MAX_CLIENTS"]

#: Name of the session cookie.
COOKIE = "gnomon_console_session"
#: API clients (one channel each) a session keeps, one per namespace it looked at.
MAX_CLIENTS = 8
#: Sessions one principal may hold at once; a new sign-in beyond it ends that principal's own
#: least recently used session (never another user's).
MAX_SESSIONS_PER_PRINCIPAL = 10
#: Flash messages kept for the next page.
MAX_FLASH = 20


@dataclass
class Session:
    """One signed-in user.

    Attributes:
        id: the random session id (the cookie's value).
        api_key: the user's API key; every API call of this session is made with it.
        principal: ``principals/{id}`` as the API's ``WhoAmI`` answered at sign-in.
        kind: how the key authenticated (``"API_KEY"``, ``"INSECURE"`` ...).
        namespaces: namespace ids the user's grants name (``"*"`` for all), in grant order.
        csrf: the CSRF token POST forms of this session must carry.
        last_seen: ``time.monotonic()`` of the last request.
        flash: messages to show on the next page (after a POST, redirect, GET).
        replays: the dead-letter replays started in this session, by request id (their results).
        clients: the API clients of this session, one per namespace (made on first use).
    """

    id: str
    api_key: str
    principal: str
    kind: str
    namespaces: list[str]
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    last_seen: float = field(default_factory=time.monotonic)
    flash: list[tuple[str, str]] = field(default_factory=list)
    replays: dict[str, dict[str, Any]] = field(default_factory=dict)
    clients: dict[str, AsyncClient] = field(default_factory=dict)

    def csrf_ok(self, token: str | None) -> bool:
        """True when ``token`` equals this session's CSRF token (constant-time comparison)."""
        return bool(token) and hmac.compare_digest(str(token), self.csrf)

    def say(self, kind: str, text: str) -> None:
        """Queues a message for the next page; ``kind`` is ``"ok"`` or ``"error"`` (at most
        :data:`MAX_FLASH` are kept, the oldest dropped first)."""
        self.flash.append((kind, text))
        del self.flash[:-MAX_FLASH]

    def take_flash(self) -> list[tuple[str, str]]:
        """The queued messages, emptying the queue."""
        out, self.flash = self.flash, []
        return out

    async def close(self) -> None:
        """Closes the session's API clients."""
        clients, self.clients = self.clients, {}
        for c in clients.values():
            await c.close()


class SessionStore:
    """The sessions of one console process, in memory.

    Args:
        client_factory: ``(api_key, namespace) -> AsyncClient`` for a session's API calls.
        idle_timeout: seconds without a request after which a session ends.
        max_sessions: at most this many at once; the least recently used one ends first. Each
            principal holds at most :data:`MAX_SESSIONS_PER_PRINCIPAL` (its own oldest ends first),
            so one key cannot sign the others out.
    """

    def __init__(
        self,
        client_factory: Callable[[str, str], AsyncClient],
        idle_timeout: float = 8 * 3600,
        max_sessions: int = 10_000,
    ) -> None:
        self._factory = client_factory
        self._idle = idle_timeout
        self._max = max_sessions
        self._sessions: dict[str, Session] = {}

    async def client(self, session: Session, namespace: str) -> AsyncClient:
        """The session's API client for ``namespace`` (made on first use, then reused; a session
        keeps at most :data:`MAX_CLIENTS`, the least recently used one is closed first)."""
        c = session.clients.pop(namespace, None)
        if c is None:
            while len(session.clients) >= MAX_CLIENTS:
                oldest = next(iter(session.clients))
                await session.clients.pop(oldest).close()
            c = self._factory(session.api_key, namespace)
        session.clients[namespace] = c  # (re)inserted last: dicts keep insertion order
        return c

    def new_client(self, api_key: str, namespace: str) -> AsyncClient:
        """A fresh client with ``api_key`` (for the sign-in check); the caller closes it."""
        return self._factory(api_key, namespace)

    async def create(self, api_key: str, principal: str, kind: str, namespaces: list[str]) -> Session:
        """Starts a session for a user whose key the API accepted; returns it."""
        await self._expire()
        mine = sorted(
            (s for s in self._sessions.values() if s.principal == principal), key=lambda s: s.last_seen
        )
        while len(mine) >= MAX_SESSIONS_PER_PRINCIPAL:
            await self.end(mine.pop(0).id)
        while len(self._sessions) >= self._max:
            oldest = min(self._sessions.values(), key=lambda s: s.last_seen)
            await self.end(oldest.id)
        s = Session(secrets.token_urlsafe(32), api_key, principal, kind, namespaces)
        self._sessions[s.id] = s
        return s

    async def get(self, session_id: str | None) -> Session | None:
        """The live session with this id (its idle clock restarted), or None."""
        await self._expire()
        s = self._sessions.get(session_id or "")
        if s is not None:
            s.last_seen = time.monotonic()
        return s

    async def end(self, session_id: str) -> None:
        """Ends a session (idempotent) and closes its clients."""
        s = self._sessions.pop(session_id, None)
        if s is not None:
            await s.close()

    async def close(self) -> None:
        """Ends every session (at shutdown)."""
        for sid in list(self._sessions):
            await self.end(sid)

    async def _expire(self) -> None:
        now = time.monotonic()
        for sid in [k for k, s in self._sessions.items() if now - s.last_seen > self._idle]:
            await self.end(sid)

    def __len__(self) -> int:
        return len(self._sessions)
