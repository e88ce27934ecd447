"""JWTs for the tests of JWT verification: an issuer's JWKS (an RSA and an EC P-256 key) and the
tokens an unauthenticated caller can make from that public JWKS alone (imported as
``gnomon_jwt_support``)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from pathlib import Path

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ISSUER, AUDIENCE = "https://idp.example.test", "gnomon"


def jwk_of(public_key, **extra) -> dict:
    """The public JWK (dict) of an RSA, EC or OKP public key, with ``extra`` members (kid, alg...)."""
    if isinstance(public_key, rsa.RSAPublicKey):
        data = jwt.algorithms.RSAAlgorithm.to_jwk(public_key, as_dict=True)
    elif isinstance(public_key, ec.EllipticCurvePublicKey):
        data = jwt.algorithms.ECAlgorithm.to_jwk(public_key, as_dict=True)
    else:
        data = jwt.algorithms.OKPAlgorithm.to_jwk(public_key, as_dict=True)
    return {**data, **extra}


def b64(data: bytes) -> str:
    """Unpadded base64url."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(header: object, claims: dict, sign) -> str:
    """A compact JWS of ``header`` (any JSON, even not an object) and ``claims`` with the signature
    ``sign(signing input bytes)`` (PyJWT would refuse to encode most of these)."""
    head = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
    return head + "." + b64(sign(head.encode()))


def claims(**extra) -> dict:
    """Claims the issuer would sign for ``sub`` mallory, valid for five minutes."""
    now = int(time.time())
    return {"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "exp": now + 300, "iat": now, **extra}


@dataclass
class Issuer:
    """An identity provider: its RSA key (kid ``rsa1``, alg RS256) and EC P-256 key (kid ``ec1``, no
    alg), published in the JWKS file ``jwks_file``."""

    rsa_key: rsa.RSAPrivateKey
    ec_key: ec.EllipticCurvePrivateKey
    jwks_file: str

    @classmethod
    def create(cls, directory: Path) -> Issuer:
        """A new issuer whose JWKS is written to ``directory/jwks.json``."""
        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        ec_key = ec.generate_private_key(ec.SECP256R1())
        path = directory / "jwks.json"
        path.write_text(
            json.dumps(
                {
                    "keys": [
                        jwk_of(rsa_key.public_key(), kid="rsa1", use="sig", alg="RS256"),
                        jwk_of(ec_key.public_key(), kid="ec1", use="sig"),
                    ]
                }
            )
        )
        return cls(rsa_key, ec_key, str(path))

    def env(self) -> dict[str, str]:
        """The ``GNOMON_AUTH_JWT_*`` settings of a server that trusts this issuer (every algorithm
        PyJWT knows configured, so only the key pinning stands between a token and its choice)."""
        return {
            "GNOMON_AUTH_JWT_ISSUER": ISSUER,
            "GNOMON_AUTH_JWT_AUDIENCE": AUDIENCE,
            "GNOMON_AUTH_JWT_JWKS_FILE": self.jwks_file,
            "GNOMON_AUTH_JWT_ALGORITHMS": "RS256,RS384,PS256,ES256,ES384,EdDSA,HS256,none",
        }

    def token(self, **extra) -> str:
        """A genuine RS256 token of this issuer."""
        return jwt.encode(claims(**extra), self.rsa_key, algorithm="RS256", headers={"kid": "rsa1"})

    def hostile_tokens(self) -> dict[str, str]:
        """Tokens made from the public JWKS (and a key of the attacker's own), by what they try."""
        rsa_pem = self.rsa_key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        mine = ec.generate_private_key(ec.SECP256R1())
        return {
            "ES256 with the RSA kid": jwt.encode(claims(), mine, algorithm="ES256", headers={"kid": "rsa1"}),
            "HS256 keyed with the RSA public key": forge(
                {"alg": "HS256", "typ": "JWT", "kid": "rsa1"},
                claims(),
                lambda m: hmac.new(rsa_pem, m, hashlib.sha256).digest(),
            ),
            "alg none": forge({"alg": "none", "typ": "JWT", "kid": "rsa1"}, claims(), lambda m: b""),
            "RS256 with the EC kid": jwt.encode(
                claims(), self.rsa_key, algorithm="RS256", headers={"kid": "ec1"}
            ),
            "ES256 with the EC kid, another key": jwt.encode(
                claims(), mine, algorithm="ES256", headers={"kid": "ec1"}
            ),
            "a header that is not an object": forge(["alg", "RS256"], claims(), lambda m: b"x"),
            "kid of the wrong type": forge({"alg": "RS256", "kid": ["rsa1"]}, claims(), lambda m: b"x"),
        }
