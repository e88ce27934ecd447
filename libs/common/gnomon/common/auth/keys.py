"""API keys: ``gnk_{id}_{secret}``. The id is public (it names the key in listings and audit
entries); the secret is 32 random bytes (URL-safe base64) shown once at creation. Only the hex
SHA-256 of the secret is stored: a high-entropy random secret needs no slow password hash (the
practice of GitHub's and Stripe's API tokens), and verification stays cheap on every call.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

PREFIX = "gnk_"
_ID_BYTES = 8
_SECRET_BYTES = 32


@dataclass(frozen=True)
class ApiKey:
    """A parsed key: ``id`` (16 hex characters) and ``secret``."""

    id: str
    secret: str

    @property
    def token(self) -> str:
        """The whole key as the caller sends it (``authorization: Bearer <token>``)."""
        return f"{PREFIX}{self.id}_{self.secret}"

    @property
    def secret_sha256(self) -> str:
        """Hex SHA-256 of the secret: what the database stores."""
        return hash_secret(self.secret)


def generate() -> ApiKey:
    """A new random key."""
    return ApiKey(secrets.token_hex(_ID_BYTES), secrets.token_urlsafe(_SECRET_BYTES))


def parse(token: str) -> ApiKey | None:
    """The key ``token`` spells, or None if it is not shaped like one (no error: the caller then
    tries other credential kinds or refuses with UNAUTHENTICATED)."""
    if not token.startswith(PREFIX):
        return None
    kid, sep, secret = token[len(PREFIX) :].partition("_")
    if not sep or len(kid) != 2 * _ID_BYTES or not secret or len(secret) > 128:
        return None
    if any(c not in "0123456789abcdef" for c in kid):
        return None
    return ApiKey(kid, secret)


def hash_secret(secret: str) -> str:
    """Hex SHA-256 of ``secret``."""
    return hashlib.sha256(secret.encode()).hexdigest()


def matches(key: ApiKey, stored_sha256: str) -> bool:
    """True if ``key``'s secret hashes to ``stored_sha256`` (constant-time comparison)."""
    return hmac.compare_digest(key.secret_sha256, stored_sha256)
