"""The credentials of a local suite (:class:`gnomon.cli.suite.Suite`): its development CA and server
certificate, the service token its services present to each other, and an API key of the ``admin``
principal (role admin in every namespace), kept in one directory and bootstrapped into the suite's
database; plus the client profile that points at the suite.

Files of the credentials directory (keys and secrets 0600; see :mod:`gnomon.common.devcerts`)::

    ca.pem ca-key.pem server.pem server-key.pem   the CA and the loopback server certificate
    service.token                                  the service token (random, URL-safe)
    admin.key                                      the admin's API key, ``gnk_{id}_{secret}``

Every function is idempotent: what exists is reused, so a restarted suite keeps its CA and key.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
from dataclasses import dataclass
from typing import Any

from gnomon.common import devcerts
from gnomon.common.auth import keys

ADMIN = "admin"
SERVICE_TOKEN_FILE = "service.token"
ADMIN_KEY_FILE = "admin.key"
PROFILE_FILE = "profile.toml"


@dataclass(frozen=True)
class SuiteCredentials:
    """Paths of a suite's credentials (all in ``directory``)."""

    directory: str
    ca_file: str
    cert_file: str
    key_file: str
    service_token_file: str
    admin_key_file: str

    @property
    def admin_key(self) -> str:
        """The admin's API key (``gnk_…``). Raises ``OSError`` if the file cannot be read."""
        with open(self.admin_key_file) as f:
            return f.read().strip()

    def service_env(self) -> dict[str, str]:
        """The ``GNOMON_*`` variables that make a service serve TLS with the server certificate,
        trust the CA and present the service token (``GNOMON_INSECURE=false``)."""
        return {
            "GNOMON_TLS_CERT_FILE": self.cert_file,
            "GNOMON_TLS_KEY_FILE": self.key_file,
            "GNOMON_TLS_CA_FILE": self.ca_file,
            "GNOMON_AUTH_SERVICE_TOKEN_FILE": self.service_token_file,
            "GNOMON_INSECURE": "false",
        }

    def client_env(self) -> dict[str, str]:
        """The ``GNOMON_*`` variables that make a client (SDK, CLI, worker) trust the CA and
        authenticate as the admin, whatever profile the user has."""
        return {
            "GNOMON_TLS_CA_FILE": self.ca_file,
            "GNOMON_API_KEY_FILE": self.admin_key_file,
            "GNOMON_INSECURE": "false",
        }


def ensure_credentials(directory: str) -> SuiteCredentials:
    """The suite credentials in ``directory`` (created 0700 if missing), each file created only if
    missing (certificates also when expiring). Raises ``OSError`` if they cannot be written."""
    server = devcerts.ensure_server_cert(directory)
    token_file = os.path.join(directory, SERVICE_TOKEN_FILE)
    if not os.path.exists(token_file):
        devcerts.write_secret(token_file, secrets.token_urlsafe(32).encode())
    key_file = os.path.join(directory, ADMIN_KEY_FILE)
    if not os.path.exists(key_file):
        devcerts.write_secret(key_file, keys.generate().token.encode())
    return SuiteCredentials(
        directory=directory,
        ca_file=os.path.join(directory, "ca.pem"),
        cert_file=server.cert_file,
        key_file=server.key_file,
        service_token_file=token_file,
        admin_key_file=key_file,
    )


async def _bootstrap(database_url: str, token: str) -> None:
    from gnomon.common.auth.principals import ALL, Role
    from gnomon.common.config import DatabaseSettings
    from gnomon.common.storage import tenancy
    from gnomon.common.storage.engine import make_engine

    key = keys.parse(token)
    if key is None:
        raise ValueError("the admin key file does not hold a gnk_ API key")
    engine = make_engine(DatabaseSettings(url=database_url), pool_size=1)
    try:
        async with engine.begin() as conn:
            await tenancy.ensure_principal(conn, ADMIN, "the administrator of a local suite (gnomon dev)")
            if await tenancy.load_key(conn, key.id) is None:
                await tenancy.add_key(conn, ADMIN, key, "gnomon dev admin key")
            await tenancy.grant(conn, ADMIN, ALL, Role.ADMIN)
            # and a worker of every queue everywhere, so `gnomon worker` with the dev profile runs jobs
            await tenancy.grant(conn, ADMIN, ALL, Role.WORKER, [ALL])
    finally:
        await engine.dispose()


def bootstrap_admin(database_url: str, credentials: SuiteCredentials) -> None:
    """Makes principal ``admin`` (roles admin and worker, every queue, in namespace ``*``) and its key from ``admin.key``
    exist in the database at ``database_url``, in one transaction; a key already stored is left as
    it is. Runs on a thread of its own (callable from inside an event loop). Raises ``ValueError``
    for a malformed key file, ``sqlalchemy.exc.DBAPIError`` if the database refuses."""
    token = credentials.admin_key
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(_bootstrap(database_url, token))
        except BaseException as exc:  # re-raised on the caller's thread
            failure.append(exc)

    t = threading.Thread(target=run, name="gnomon-suite-bootstrap")
    t.start()
    t.join()
    if failure:
        raise failure[0]


def write_suite_profile(path: str, address: str, credentials: SuiteCredentials | None) -> str:
    """Writes a client config file at ``path`` whose ``current`` profile ``suite`` points at
    ``address`` with the CA and admin key file (or ``insecure = true`` without ``credentials``);
    returns ``path``. Use it with ``GNOMON_CONFIG_FILE=<path>``."""
    from gnomon.sdk.connection import write_profile

    write_profile(path, "suite", profile_values(address, credentials))
    return path


def profile_values(address: str, credentials: SuiteCredentials | None) -> dict[str, Any]:
    """The profile keys of a client of the suite at ``address`` (see :mod:`gnomon.sdk.connection`)."""
    if credentials is None:
        return {"address": address, "insecure": True}
    return {"address": address, "ca_file": credentials.ca_file, "api_key_file": credentials.admin_key_file}
