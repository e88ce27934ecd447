"""The client profile ``gnomon dev`` installs: like ``kind`` setting the kubectl context, a running
``gnomon dev`` writes profile ``dev`` into the user's client config file (``GNOMON_CONFIG_FILE``, else
``$XDG_CONFIG_HOME/gnomon/config.toml``) pointing at its API, its CA and its admin key file (the path,
not the key), and makes it current, so ``gnomon job list``, the SDK and workers need no flags.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from gnomon.cli.suite_auth import profile_values
from gnomon.sdk.connection import config_path, write_profile

if TYPE_CHECKING:
    from gnomon.cli.suite import Suite

PROFILE = "dev"


def install_dev_profile(suite: Suite, name: str = PROFILE) -> str:
    """Writes (or replaces) profile ``name`` for the started ``suite`` into the user's config file,
    keeping the file's other profiles, and makes it current; returns the file's path. Raises
    ``OSError`` if the file cannot be written, ``ValueError`` if the existing file is not valid TOML."""
    path = str(config_path())
    write_profile(path, name, profile_values(suite.api_address, suite.credentials))
    return path


def usage_lines(suite: Suite, config_file: str, name: str = PROFILE) -> list[str]:
    """What ``gnomon dev`` prints about connecting: the profile, where the credentials are, and a
    grpcurl recipe."""
    address = suite.api_address
    lines = [f"client profile {name!r} (current) written to {config_file}"]
    creds = suite.credentials
    if creds is None:
        lines.append("INSECURE: plaintext, no authentication")
        lines.append(f"  grpcurl -plaintext {address} list")
        return lines
    lines += [
        f"  CA: {creds.ca_file}",
        f"  admin API key file: {creds.admin_key_file}",
        f"  without the profile: GNOMON_TLS_CA_FILE={shlex.quote(creds.ca_file)} "
        f"GNOMON_API_KEY_FILE={shlex.quote(creds.admin_key_file)}",
        f"  grpcurl -cacert {shlex.quote(creds.ca_file)} "
        f'-H "authorization: Bearer $(cat {shlex.quote(creds.admin_key_file)})" {address} list',
    ]
    return lines
