"""Who is calling: turns a call's credentials into a :class:`Principal` or refuses with
UNAUTHENTICATED. Tried in order:

1. ``authorization: Bearer <token>`` metadata (exactly one such header; two are refused, never merged):
   the service token (service-to-service calls), an API key ``gnk_…`` (looked up by id, its secret's
   SHA-256 compared in constant time), or a JWT (when an issuer is configured);
2. else a verified client certificate (mTLS): its subject CN names a principal in the database.

A successful lookup is cached for ``GNOMON_AUTH_CACHE_S`` (so a revoked key, disabled principal or
changed grant takes effect within that time), keyed by the SHA-256 of the token, never the token.
Failed lookups are cached for one second so a flood of bad keys costs one query per key per second;
the cache holds at most 10,000 entries and evicts the least recently used, so a flood of distinct
made-up keys does not evict the principals in use.
With ``GNOMON_INSECURE=true`` every caller is the :data:`INSECURE` principal.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common.auth import keys
from gnomon.common.auth.jwt_verifier import JwtVerifier
from gnomon.common.auth.principals import Principal, PrincipalKind
from gnomon.common.auth.settings import AuthSettings, InsecureSettings
from gnomon.common.errors import Unauthenticated, Unavailable

#: Every caller of a server started with GNOMON_INSECURE=true.
INSECURE = Principal("insecure", PrincipalKind.INSECURE)
#: The caller that presented the service token.
SERVICE = Principal("service", PrincipalKind.SERVICE, service=True)

_NEGATIVE_TTL_S = 1.0
_MAX_CACHE = 10_000


def bearer_token(metadata: Iterable[tuple[str, str | bytes]]) -> str | None:
    """The token of the call's one ``authorization: Bearer`` header, None if there is none. Raises
    :class:`Unauthenticated` for two headers or another scheme."""
    values = [v for k, v in metadata if k.lower() == "authorization"]
    if not values:
        return None
    if len(values) > 1:
        raise Unauthenticated("more than one authorization header")
    value = values[0] if isinstance(values[0], str) else values[0].decode("utf-8", "replace")
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("authorization must be 'Bearer <API key or JWT>'")
    return token.strip()


def certificate_name(auth_context: Mapping[str, Iterable[bytes]]) -> str | None:
    """The subject CN of the verified client certificate in a gRPC ``auth_context``, or None."""
    names = list(auth_context.get("x509_common_name") or ())
    return names[0].decode("utf-8", "replace") if names else None


def read_secret_file(path: str) -> str | None:
    """The stripped contents of ``path``; None for an empty path. Raises ``OSError`` if unreadable."""
    if not path:
        return None
    with open(path) as f:
        return f.read().strip() or None


class Authenticator:
    """Authenticates calls of one server. ``engine`` reads principals, keys and grants (None: only
    the service token, JWTs and insecure mode work); ``jwt`` verifies JWTs (None: refused)."""

    def __init__(
        self,
        engine: AsyncEngine | None,
        *,
        insecure: bool = False,
        service_token: str | None = None,
        jwt: JwtVerifier | None = None,
        cache_s: float = 5.0,
    ) -> None:
        self.engine, self.insecure, self.jwt, self.cache_s = engine, insecure, jwt, cache_s
        self._service = service_token
        # least recently used first: a flood of unknown keys evicts only the oldest entries
        self._cache: OrderedDict[str, tuple[float, Principal | None]] = OrderedDict()

    @classmethod
    def from_settings(cls, engine: AsyncEngine | None) -> Authenticator:
        """Built from ``GNOMON_INSECURE`` and ``GNOMON_AUTH_*``. Raises ``ValueError``/``OSError``
        for a JWT configuration that is incomplete or a service-token file that cannot be read."""
        s = AuthSettings()
        return cls(
            engine,
            insecure=InsecureSettings().insecure,
            service_token=read_secret_file(s.service_token_file),
            jwt=JwtVerifier(s) if s.jwt_issuer else None,
            cache_s=s.cache_s,
        )

    async def authenticate(
        self, metadata: Iterable[tuple[str, str | bytes]], auth_context: Mapping[str, Iterable[bytes]]
    ) -> Principal:
        """The principal of one call. Raises :class:`Unauthenticated` (message says which credential
        kind failed, never echoes it) or :class:`gnomon.common.errors.Unavailable` (database down)."""
        if self.insecure:
            return INSECURE
        token = bearer_token(metadata)
        if token is not None:
            if self._service is not None and hmac.compare_digest(token.encode(), self._service.encode()):
                return SERVICE
            key = keys.parse(token)
            if key is not None:
                return await self._cached(
                    "k" + key.secret_sha256 + key.id, lambda: self._api_key(key), "API key"
                )
            if self.jwt is not None and token.count(".") == 2:
                return await self.jwt.verify(token)
            raise Unauthenticated("the bearer token is not a valid credential")
        name = certificate_name(auth_context)
        if name is not None:
            return await self._cached("c" + name, lambda: self._certificate(name), "client certificate")
        raise Unauthenticated(
            "no credential: send 'authorization: Bearer <API key or JWT>' metadata or a client certificate"
        )

    async def _cached(self, key: str, load: Any, what: str) -> Principal:
        digest = hashlib.sha256(key.encode()).hexdigest()
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None:
            self._cache.move_to_end(digest)
        if hit is None or hit[0] < now:
            try:
                principal = await load()
            except (DBAPIError, OSError) as exc:
                raise Unavailable("database unavailable; the credential cannot be verified") from exc
            while len(self._cache) >= _MAX_CACHE:
                self._cache.popitem(last=False)
            ttl = self.cache_s if principal is not None else min(self.cache_s, _NEGATIVE_TTL_S)
            hit = self._cache[digest] = (now + ttl, principal)
        if hit[1] is None:
            raise Unauthenticated(f"the {what} is unknown, expired, revoked or of a disabled principal")
        return hit[1]

    async def _api_key(self, key: keys.ApiKey) -> Principal | None:
        from gnomon.common.storage import tenancy

        if self.engine is None:
            return None
        async with self.engine.connect() as conn:
            record = await tenancy.load_key(conn, key.id)
            if record is None or not record.usable or not keys.matches(key, record.secret_sha256):
                return None
            grants = await tenancy.load_principal(conn, record.principal)
        return None if grants is None else Principal(record.principal, PrincipalKind.API_KEY, grants)

    async def _certificate(self, name: str) -> Principal | None:
        from gnomon.common.storage import tenancy

        if self.engine is None:
            return None
        async with self.engine.connect() as conn:
            grants = await tenancy.load_principal(conn, name)
        return None if grants is None else Principal(name, PrincipalKind.CERTIFICATE, grants)
