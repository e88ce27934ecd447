"""JWT algorithm pinning (:func:`gnomon.common.auth.jwt_verifier.key_algorithms`) and the verifier's
refusals: whatever a token's header says, only the algorithms of the JWKS key it names are tried, and
every fault on a hostile token is UNAUTHENTICATED, never an exception of another kind."""

from __future__ import annotations

import base64
import logging

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from gnomon.common.auth.jwt_verifier import JwtVerifier, key_algorithms
from gnomon.common.auth.settings import AuthSettings
from gnomon.common.errors import Unauthenticated
from gnomon_jwt_support import AUDIENCE, ISSUER, Issuer, claims, jwk_of

CONFIGURED = ["RS256", "RS384", "PS256", "ES256", "ES384", "EdDSA", "HS256", "none"]


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


@pytest.fixture
def issuer(tmp_path):
    issuer = Issuer.create(tmp_path)
    settings = AuthSettings(jwt_issuer=ISSUER, jwt_audience=AUDIENCE, jwt_jwks_file=issuer.jwks_file)
    return JwtVerifier(settings), issuer


def test_hostile_tokens_are_unauthenticated_and_genuine_ones_pass(issuer, caplog):
    verifier, idp = issuer
    verifier.algorithms = CONFIGURED  # every algorithm allowed: only the key pinning stands in the way
    assert verifier.verify_sync(idp.token()).name == "jwt:mallory"
    genuine_ec = jwt.encode(claims(), idp.ec_key, algorithm="ES256", headers={"kid": "ec1"})
    assert verifier.verify_sync(genuine_ec).name == "jwt:mallory"
    caplog.set_level(logging.DEBUG)
    hostile = idp.hostile_tokens()
    for token in hostile.values():
        for _ in range(3):
            with pytest.raises(Unauthenticated):
                verifier.verify_sync(token)
    assert not [r for r in caplog.records if r.exc_info], "no traceback is logged for a refused token"
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) <= len(hostile)
