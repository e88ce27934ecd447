"""gnomon.common.devcerts: the development CA, server and client certificates."""

from __future__ import annotations

import ipaddress
import os
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gnomon.common import devcerts


def _cert(path: str) -> x509.Certificate:
    with open(path, "rb") as f:
        return x509.load_pem_x509_certificate(f.read())


def test_server_certificate_chains_to_the_ca_with_loopback_sans(tmp_path):
    d = str(tmp_path / "auth")
    server = devcerts.ensure_server_cert(d)
    ca = _cert(os.path.join(d, "ca.pem"))
    leaf = _cert(server.cert_file)
    leaf.verify_directly_issued_by(ca)  # raises InvalidSignature if not
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    }
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    assert (leaf.not_valid_after_utc - leaf.not_valid_before_utc).days in (365, 366)
    assert (ca.not_valid_after_utc - ca.not_valid_before_utc).days >= 3650


def test_keys_are_private_and_certificates_readable(tmp_path):
    d = str(tmp_path)
    server = devcerts.ensure_server_cert(d)
    client = devcerts.ensure_client_cert(d, "alice")
    for key in (server.key_file, client.key_file, os.path.join(d, "ca-key.pem")):
        assert stat.S_IMODE(os.stat(key).st_mode) == 0o600, key
    assert stat.S_IMODE(os.stat(server.cert_file).st_mode) == 0o644


def test_client_certificate_names_the_principal(tmp_path):
    d = str(tmp_path)
    client = devcerts.ensure_client_cert(d, "worker-1")
    leaf = _cert(client.cert_file)
    leaf.verify_directly_issued_by(_cert(os.path.join(d, "ca.pem")))
    assert leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "worker-1"
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in eku
    with pytest.raises(ValueError):
        devcerts.ensure_client_cert(d, "../evil")


def test_existing_files_are_reused_and_reissued_for_a_new_ca(tmp_path):
    d = str(tmp_path)
    first = devcerts.ensure_server_cert(d)
    before = Path(first.cert_file).read_bytes()
    ca_before = Path(os.path.join(d, "ca.pem")).read_bytes()
    devcerts.ensure_server_cert(d)
    assert Path(first.cert_file).read_bytes() == before
    assert Path(os.path.join(d, "ca.pem")).read_bytes() == ca_before
    # a new CA (old one removed): the server certificate no longer chains, so it is re-issued
    os.remove(os.path.join(d, "ca.pem"))
    devcerts.ensure_server_cert(d)
    assert Path(first.cert_file).read_bytes() != before
    _cert(first.cert_file).verify_directly_issued_by(_cert(os.path.join(d, "ca.pem")))


def test_server_certificate_with_extra_names_is_reissued_when_they_change(tmp_path):
    d = str(tmp_path)
    first = devcerts.ensure_server_cert(
        d, ["api", "*.gnomon-dispatcher.gnomon.svc.cluster.local", "172.30.0.11"]
    )
    sans = _cert(first.cert_file).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "localhost",
        "api",
        "*.gnomon-dispatcher.gnomon.svc.cluster.local",
    ]
    assert ipaddress.ip_address("172.30.0.11") in sans.get_values_for_type(x509.IPAddress)
    serial = _cert(first.cert_file).serial_number
    assert (
        _cert(
            devcerts.ensure_server_cert(
                d, ["api", "*.gnomon-dispatcher.gnomon.svc.cluster.local", "172.30.0.11"]
            ).cert_file
        ).serial_number
        == serial
    )  # same names: reused
    again = _cert(devcerts.ensure_server_cert(d, ["api"]).cert_file)
    assert again.serial_number != serial
    assert again.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    ) == ["localhost", "api"]
    with pytest.raises(ValueError, match="not an IP address nor a DNS name"):
        devcerts.ensure_server_cert(d, ["bad name"])


def test_gnomon_dev_certs_makes_what_a_deployment_mounts(tmp_path):
    from typer.testing import CliRunner

    from gnomon.cli.main import app

    d = str(tmp_path / "tls")
    r = CliRunner().invoke(app, ["dev", "certs", d, "--san", "api", "--san", "dispatcher-1"])
    assert r.exit_code == 0, r.output
    names = ("ca.pem", "server.pem", "server-key.pem", "service.token")
    assert r.output.split() == [os.path.join(d, n) for n in names]
    sans = _cert(os.path.join(d, "server.pem")).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert {"api", "dispatcher-1", "localhost"} == set(sans.value.get_values_for_type(x509.DNSName))
    token = Path(d, "service.token").read_text()
    assert (
        CliRunner().invoke(app, ["dev", "certs", d, "--san", "api", "--san", "dispatcher-1"]).exit_code == 0
    )
    assert Path(d, "service.token").read_text() == token  # kept
    bad = CliRunner().invoke(app, ["dev", "certs", d, "--san", "not a name"])
    assert bad.exit_code == 2 and "not an IP address nor a DNS name" in bad.output
