"""Development TLS material: a local CA, a loopback server certificate and client certificates, as
PEM files in one directory (what ``gnomon dev`` and the tests serve with; never for production).

Layout of ``directory`` (keys are written 0600, certificates 0644)::

    ca.pem, ca-key.pem                 the CA: EC P-256, valid 10 years, path length 0
    server.pem, server-key.pem         signed by the CA: SANs 127.0.0.1, ::1, localhost (and any
                                       extra names asked for); valid 1 year
    client-<cn>.pem, client-<cn>-key.pem   signed by the CA, subject CN ``<cn>`` (mTLS), valid 1 year

Every function is idempotent: files that exist are reused (a certificate is re-issued only when it is
missing, expires within 7 days, or, for the leaves, is not signed by the current CA).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertPair", "ensure_ca", "ensure_server_cert", "ensure_client_cert", "write_secret"]

CA_DAYS = 3650
LEAF_DAYS = 365
RENEW_BEFORE = dt.timedelta(days=7)
SERVER_SANS = ("127.0.0.1", "::1", "localhost")
_CN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
#: A DNS name for a SAN: labels of letters, digits and '-', the first one possibly '*'.
_DNS = re.compile(
    r"^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$"
)


@dataclass(frozen=True)
class CertPair:
    """Paths of one PEM certificate and its PEM private key."""

    cert_file: str
    key_file: str


def write_secret(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path`` with mode 0600 (created so, never world-readable in between),
    atomically (a reader sees the old file or the whole new one)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _write_public(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _load(pair: CertPair) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    try:
        with open(pair.cert_file, "rb") as f:
            cert = x509.load_pem_x509_certificate(f.read())
        with open(pair.key_file, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
    except (OSError, ValueError):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        return None
    if cert.not_valid_after_utc - RENEW_BEFORE < _now():
        return None
    return cert, key


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _save(pair: CertPair, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    write_secret(pair.key_file, pem)
    _write_public(pair.cert_file, cert.public_bytes(serialization.Encoding.PEM))


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, days: int
) -> x509.CertificateBuilder:
    now = _now()
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
    )


def ensure_ca(directory: str) -> CertPair:
    """The CA in ``directory`` (``ca.pem``, ``ca-key.pem``), created if missing or expiring. Creates
    ``directory`` (0700) if needed. Raises ``OSError`` if it cannot be written."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    pair = CertPair(os.path.join(directory, "ca.pem"), os.path.join(directory, "ca-key.pem"))
    if _load(pair) is not None:
        return pair
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Gnomon development"),
            x509.NameAttribute(NameOID.COMMON_NAME, "Gnomon development CA"),
        ]
    )
    cert = (
        _builder(name, name, key, CA_DAYS)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _save(pair, cert, key)
    return pair


def _issue(
    directory: str, pair: CertPair, cn: str, sans: list[x509.GeneralName], usage: x509.ObjectIdentifier
) -> CertPair:
    ca_pair = ensure_ca(directory)
    loaded_ca = _load(ca_pair)
    assert loaded_ca is not None, "ensure_ca just wrote it"
    ca_cert, ca_key = loaded_ca
    have = _load(pair)
    if have is not None and _signed_by(have[0], ca_cert):
        return pair
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]), ca_cert.subject, key, LEAF_DAYS)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    _save(pair, builder.sign(ca_key, hashes.SHA256()), key)
    return pair


def _general_name(san: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(san))
    except ValueError:
        pass
    if not _DNS.match(san):
        raise ValueError(f"subject alternative name {san!r}: not an IP address nor a DNS name")
    return x509.DNSName(san)


def _sans_of(cert: x509.Certificate) -> set[x509.GeneralName]:
    try:
        return set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound:
        return set()


def ensure_server_cert(directory: str, extra_sans: Sequence[str] = ()) -> CertPair:
    """The server certificate in ``directory`` (``server.pem``, ``server-key.pem``; SANs
    :data:`SERVER_SANS` plus ``extra_sans``, each an IP address or a DNS name such as
    ``api`` or ``*.gnomon-dispatcher.gnomon.svc.cluster.local``), signed by :func:`ensure_ca`'s CA;
    issued if missing, expiring, signed by another CA or carrying other SANs. Raises ``ValueError``
    for a malformed name, ``OSError`` if it cannot be written."""
    pair = CertPair(os.path.join(directory, "server.pem"), os.path.join(directory, "server-key.pem"))
    sans = list(dict.fromkeys(_general_name(n) for n in (*SERVER_SANS, *extra_sans)))
    have = _load(pair)
    if have is not None and _sans_of(have[0]) != set(sans):
        os.remove(pair.cert_file)  # other names: issue it anew
    return _issue(directory, pair, "localhost", sans, ExtendedKeyUsageOID.SERVER_AUTH)


def ensure_client_cert(directory: str, cn: str) -> CertPair:
    """A client certificate for principal ``cn`` in ``directory`` (``client-<cn>.pem`` and
    ``client-<cn>-key.pem``), signed by the CA; issued if missing, expiring or signed by another CA.
    Raises ``ValueError`` for a ``cn`` that is not 1-64 of ``[A-Za-z0-9._@-]`` (it names files),
    ``OSError`` if it cannot be written."""
    if not _CN.match(cn):
        raise ValueError(f"client certificate CN {cn!r}: use 1-64 of letters, digits, '.', '_', '@', '-'")
    pair = CertPair(
        os.path.join(directory, f"client-{cn}.pem"), os.path.join(directory, f"client-{cn}-key.pem")
    )
    return _issue(directory, pair, cn, [], ExtendedKeyUsageOID.CLIENT_AUTH)
