"""JWT algorithm pinning (:func:`gnomon.common.auth.jwt_verifier.key_algorithms`) and the verifier's
refusals: whatever a token's header says, only the algorithms of the JWKS key it names are tried, and
every fault on a hostile token is UNAUTHENTICATED, never an exception of another kind."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from gnomon.common.auth.jwt_verifier import JwtVerifier, key_algorithms
from gnomon.common.auth.settings import AuthSettings
from gnomon.common.errors import Unauthenticated

ISSUER, AUDIENCE = "https://idp.example.test", "gnomon"
CONFIGURED = ["RS256", "RS384", "PS256", "ES256", "ES384", "EdDSA", "HS256", "none"]


def jwk_of(public_key, **extra) -> dict:
    if isinstance(public_key, rsa.RSAPublicKey):
        data = jwt.algorithms.RSAAlgorithm.to_jwk(public_key, as_dict=True)
    elif isinstance(public_key, ec.EllipticCurvePublicKey):
        data = jwt.algorithms.ECAlgorithm.to_jwk(public_key, as_dict=True)
    else:
        data = jwt.algorithms.OKPAlgorithm.to_jwk(public_key, as_dict=True)
    return {**data, **extra}


def pinned(data: dict, configured=CONFIGURED) -> list[str]:
    return key_algorithms(jwt.PyJWK(data), configured)


def test_an_rsa_key_allows_only_rsa_algorithms_and_exactly_its_alg_when_it_names_one():
    pub = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    assert pinned(jwk_of(pub)) == ["PS256", "RS256", "RS384"]
    assert pinned(jwk_of(pub, alg="RS256")) == ["RS256"]
    assert pinned(jwk_of(pub, alg="PS256")) == ["PS256"]
    assert pinned(jwk_of(pub, alg="RS512")) == []  # named, but not configured
    assert pinned(jwk_of(pub), configured=["ES256", "HS256", "none"]) == []


def test_an_ec_key_allows_only_the_algorithm_of_its_curve():
    p256 = ec.generate_private_key(ec.SECP256R1()).public_key()
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key()
    assert pinned(jwk_of(p256)) == ["ES256"]
    assert pinned(jwk_of(p384)) == ["ES384"]
    assert pinned(jwk_of(p256, alg="ES256")) == ["ES256"]


def test_an_okp_key_allows_eddsa_and_a_shared_secret_nothing():
    ed = ed25519.Ed25519PrivateKey.generate().public_key()
    assert pinned(jwk_of(ed)) == ["EdDSA"]
    secret = {"kty": "oct", "k": base64.urlsafe_b64encode(b"k" * 32).rstrip(b"=").decode()}
    assert pinned(secret) == []
    assert pinned({**secret, "alg": "HS256"}) == []


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(header: dict, claims: dict, sign) -> str:
    head = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
    return head + "." + b64(sign(head.encode()))


@pytest.fixture
def keyset(tmp_path):
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    jwks = tmp_path / "jwks.json"
    jwks.write_text(
        json.dumps(
            {
                "keys": [
                    jwk_of(rsa_key.public_key(), kid="rsa1", use="sig", alg="RS256"),
                    jwk_of(ec_key.public_key(), kid="ec1", use="sig"),
                ]
            }
        )
    )
    settings = AuthSettings(jwt_issuer=ISSUER, jwt_audience=AUDIENCE, jwt_jwks_file=str(jwks))
    return JwtVerifier(settings), rsa_key, ec_key


def claims(**extra) -> dict:
    now = int(time.time())
    return {"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "exp": now + 300, "iat": now, **extra}


def hostile_tokens(rsa_key, ec_key) -> dict[str, str]:
    """Tokens an unauthenticated caller can make from the issuer's public JWKS alone (plus, for the
    first, a key of its own): none may pass, none may raise anything but Unauthenticated."""
    rsa_pem = rsa_key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    mine = ec.generate_private_key(ec.SECP256R1())
    return {
        "ES256 with the RSA kid": jwt.encode(claims(), mine, algorithm="ES256", headers={"kid": "rsa1"}),
        "HS256 keyed with the RSA public key": forge(
            {"alg": "HS256", "typ": "JWT", "kid": "rsa1"},
            claims(),
            lambda m: hmac.new(rsa_pem, m, hashlib.sha256).digest(),
        ),
        "alg none": forge({"alg": "none", "typ": "JWT", "kid": "rsa1"}, claims(), lambda m: b""),
        "RS256 with the EC kid": jwt.encode(claims(), rsa_key, algorithm="RS256", headers={"kid": "ec1"}),
        "ES256 with the EC kid, signed by another key": jwt.encode(
            claims(), mine, algorithm="ES256", headers={"kid": "ec1"}
        ),
        "a header that is not an object": forge(["alg", "RS256"], claims(), lambda m: b"x"),  # type: ignore[arg-type]
        "kid of the wrong type": forge({"alg": "RS256", "kid": ["rsa1"]}, claims(), lambda m: b"x"),
    }


def test_hostile_tokens_are_unauthenticated_and_genuine_ones_pass(keyset, caplog):
    verifier, rsa_key, ec_key = keyset
    assert verifier.verify_sync(jwt.encode(claims(), rsa_key, algorithm="RS256", headers={"kid": "rsa1"})).name == (
        "jwt:mallory"
    )
    assert verifier.verify_sync(jwt.encode(claims(), ec_key, algorithm="ES256", headers={"kid": "ec1"})).name == (
        "jwt:mallory"
    )
    caplog.set_level(logging.DEBUG)
    for what, token in hostile_tokens(rsa_key, ec_key).items():
        for _ in range(3):
            with pytest.raises(Unauthenticated):
                verifier.verify_sync(token)
    assert not [r for r in caplog.records if r.exc_info], "no traceback is logged for a refused token"
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) <= len(hostile_tokens(rsa_key, ec_key))
