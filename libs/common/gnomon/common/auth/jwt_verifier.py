"""JWT bearer tokens from an organisation's identity provider, verified with PyJWT against the
issuer's JWKS (RFC 7517) and turned into a :class:`Principal` by a claim mapper.

The mapper has the shape of Temporal's default ClaimMapper: the principal is one claim (``sub`` by
default) and grants are a list claim (``permissions`` by default) of ``"namespace:role"`` strings,
e.g. ``["payments:client", "payments:worker:emails,reports", "*:reader"]``. A worker entry may end with
``:queue1,queue2``; without it the worker may lease from every queue of the namespace.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import jwt

from gnomon.common import lograte
from gnomon.common.auth.principals import ALL, JWT_ACTOR_PREFIX, Grant, Principal, PrincipalKind, Role
from gnomon.common.auth.settings import AuthSettings
from gnomon.common.errors import Unauthenticated
from gnomon.common.names import NAMESPACE_RE

log = logging.getLogger(__name__)


def map_permissions(values: Iterable[Any]) -> tuple[Grant, ...]:
    """Grants from a permissions claim; malformed entries are ignored (they grant nothing)."""
    out = []
    for v in values:
        if not isinstance(v, str):
            continue
        ns, _, rest = v.partition(":")
        role, _, queues = rest.partition(":")
        if ns != ALL and not NAMESPACE_RE.fullmatch(ns):
            continue
        try:
            r = Role(role)
        except ValueError:
            continue
        qs = tuple(sorted(q for q in queues.split(",") if q)) if r is Role.WORKER else ()
        out.append(Grant(ns, r, qs or ((ALL,) if r is Role.WORKER else ())))
    return tuple(sorted(set(out), key=lambda g: (g.namespace, g.role.value, g.queues)))


#: Algorithms a JWK of each ``kty`` can verify; EC keys further by curve (:data:`_EC_CURVE_ALGORITHMS`).
#: ``oct`` (shared-secret) keys verify nothing: an issuer publishes public keys.
_KTY_ALGORITHMS: dict[str, frozenset[str]] = {
    "RSA": frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}),
    "OKP": frozenset({"EdDSA"}),
}
#: The one algorithm of each EC curve (RFC 7518 section 3.4; secp256k1: RFC 8812).
_EC_CURVE_ALGORITHMS: dict[str, str] = {
    "P-256": "ES256",
    "P-384": "ES384",
    "P-521": "ES512",
    "secp256k1": "ES256K",
}


def key_algorithms(jwk: jwt.PyJWK, configured: Iterable[str]) -> list[str]:
    """The JWS algorithms a token verified with ``jwk`` may name: those of the key's type (RSA: the
    RS* and PS* family, or exactly the JWK's ``alg`` when it names one; EC: the one ES* algorithm of
    its curve; OKP: EdDSA; anything else, ``oct`` included: none), and of those only the
    ``configured`` ones (``GNOMON_AUTH_JWT_ALGORITHMS``), sorted. So a token cannot pick an
    algorithm the key was not made for (ES256 or HS256 against an RSA key, ``none``)."""
    data: dict[str, Any] = getattr(jwk, "_jwk_data", None) or {}
    kty = data.get("kty")
    if kty == "EC":
        curve_alg = _EC_CURVE_ALGORITHMS.get(str(data.get("crv") or "P-256"))
        family = frozenset({curve_alg} if curve_alg else ())
    else:
        family = _KTY_ALGORITHMS.get(str(kty), frozenset())
    named = data.get("alg")
    if named is not None:
        family = family & {named}
    return sorted(family & set(configured))


class JwtVerifier:
    """Verifies JWTs of one issuer. ``settings`` needs ``jwt_issuer``, ``jwt_audience`` and one of
    ``jwt_jwks_url`` / ``jwt_jwks_file``. Raises ``ValueError`` at construction when misconfigured."""

    def __init__(self, settings: AuthSettings) -> None:
        if not settings.jwt_audience:
            raise ValueError("GNOMON_AUTH_JWT_AUDIENCE is required with GNOMON_AUTH_JWT_ISSUER")
        self.settings = settings
        self.algorithms = [a.strip() for a in settings.jwt_algorithms.split(",") if a.strip()]
        self._client: jwt.PyJWKClient | None = None
        self._set: jwt.PyJWKSet | None = None
        if settings.jwt_jwks_url:
            self._client = jwt.PyJWKClient(settings.jwt_jwks_url, cache_keys=True, lifespan=300, timeout=5)
        elif settings.jwt_jwks_file:
            with open(settings.jwt_jwks_file) as f:
                self._set = jwt.PyJWKSet.from_json(f.read())
        else:
            raise ValueError(
                "GNOMON_AUTH_JWT_JWKS_URL or GNOMON_AUTH_JWT_JWKS_FILE is required with an issuer"
            )

    def _jwk(self, token: str) -> jwt.PyJWK:
        """The JWKS key the token's header ``kid`` names (the first key when it names none). Raises
        ``jwt.PyJWTError`` when none matches."""
        if self._client is not None:
            return self._client.get_signing_key_from_jwt(token)
        assert self._set is not None
        kid = jwt.get_unverified_header(token).get("kid")
        for k in self._set.keys:
            if kid is None or k.key_id == kid:
                return k
        raise jwt.InvalidKeyError("no JWKS key matches the token's kid")

    def verify_sync(self, token: str) -> Principal:
        """The principal ``token`` names. Raises :class:`Unauthenticated` for a bad signature, issuer,
        audience, expiry (``exp`` is required), a header ``alg`` the JWKS key does not allow
        (:func:`key_algorithms`), a missing principal claim, or any other fault of the verifier on the
        token (no detail is echoed; an unexpected fault is logged at WARNING without a traceback, at
        most once per ``GNOMON_LOG_REPEAT_INTERVAL_S`` per kind)."""
        s = self.settings
        try:
            jwk = self._jwk(token)
            allowed = key_algorithms(jwk, self.algorithms)
            if not allowed:
                raise jwt.InvalidKeyError("the JWKS key allows none of the configured algorithms")
            claims = jwt.decode(
                token,
                jwk.key,
                algorithms=allowed,
                audience=s.jwt_audience,
                issuer=s.jwt_issuer,
                options={"require": ["exp", "iss", "aud"]},
                leeway=30,
            )
        except (jwt.PyJWTError, ValueError) as exc:
            raise Unauthenticated(f"JWT refused: {type(exc).__name__}") from None
        except Exception as exc:  # any fault on a hostile token is the caller's, never INTERNAL
            lograte.shared().log(
                log,
                logging.WARNING,
                f"jwt:{type(exc).__qualname__}",
                "JWT refused after an unexpected verifier fault: %s",
                type(exc).__name__,
            )
            raise Unauthenticated("JWT refused") from None
        sub = claims.get(s.jwt_principal_claim)
        if not isinstance(sub, str) or not sub or len(sub) > 100 or not sub.isprintable():
            raise Unauthenticated(f"JWT refused: claim {s.jwt_principal_claim!r} missing or malformed")
        perms = claims.get(s.jwt_permissions_claim) or []
        return Principal(
            f"{JWT_ACTOR_PREFIX}{sub}",
            PrincipalKind.JWT,
            map_permissions(perms if isinstance(perms, list) else []),
        )

    async def verify(self, token: str) -> Principal:
        """:meth:`verify_sync` off the event loop (fetching the JWKS may block)."""
        return await asyncio.to_thread(self.verify_sync, token)
