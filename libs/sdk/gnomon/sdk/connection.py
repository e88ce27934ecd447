"""Where and how a client connects: the address, namespace, TLS material and API key of the Gnomon API,
resolved like Temporal's environment configuration or a kubectl context.

Each setting is taken from, in order: an explicit argument, else an environment variable, else the
selected profile of the client config file, else the default:

* address: ``GNOMON_API``, profile ``address``, default ``127.0.0.1:7070``;
* namespace: ``GNOMON_NAMESPACE``, profile ``namespace``, default ``default``;
* CA bundle: ``GNOMON_TLS_CA_FILE``, profile ``ca_file``, default the system roots;
* client certificate (mTLS): ``GNOMON_CLIENT_CERT_FILE``/``GNOMON_CLIENT_KEY_FILE``, profile
  ``client_cert_file``/``client_key_file``, default none;
* API key: ``GNOMON_API_KEY``, then ``GNOMON_API_KEY_FILE``, profile ``api_key``, then
  ``api_key_file``, default none (only unauthenticated calls, e.g. health, succeed);
* TLS server name: ``GNOMON_TLS_SERVER_NAME``, profile ``server_name``, default the address's host;
* plaintext: ``GNOMON_INSECURE``, profile ``insecure``, default false.

``GNOMON_TLS_CA_FILE`` and ``GNOMON_INSECURE`` mean what they mean to the services (the CA trusted when
calling a Gnomon service; a deployment without TLS or authentication), so one environment serves both.
The config file is ``GNOMON_CONFIG_FILE``, else ``$XDG_CONFIG_HOME/gnomon/config.toml`` (XDG default
``~/.config``); the profile is the explicit one, else ``GNOMON_PROFILE``, else the file's ``current``
key, else ``default``. A missing file is no error (every setting then has its default); a profile asked
for by name that the file lacks is. Relative paths in a profile are relative to the file. Example::

    current = "dev"

    [profiles.dev]
    address = "127.0.0.1:7070"
    ca_file = "/home/me/.local/state/gnomon/dev/auth/ca.pem"
    api_key_file = "/home/me/.local/state/gnomon/dev/auth/admin.key"

A connection is TLS unless ``insecure`` is true; the API key travels as ``authorization: Bearer <key>``
call credentials, which gRPC sends only over TLS. Only the standard library and ``grpcio`` are used.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

__all__ = [
    "Connection",
    "resolve",
    "config_path",
    "load_config",
    "write_profile",
    "open_channel",
    "aio_channel",
    "DEFAULT_ADDRESS",
    "DEFAULT_NAMESPACE",
]

DEFAULT_ADDRESS = "127.0.0.1:7070"
DEFAULT_NAMESPACE = "default"

#: profile key -> environment variable, for the settings that are plain strings
_ENV = {
    "address": "GNOMON_API",
    "namespace": "GNOMON_NAMESPACE",
    "ca_file": "GNOMON_TLS_CA_FILE",
    "client_cert_file": "GNOMON_CLIENT_CERT_FILE",
    "client_key_file": "GNOMON_CLIENT_KEY_FILE",
    "api_key": "GNOMON_API_KEY",
    "api_key_file": "GNOMON_API_KEY_FILE",
    "server_name": "GNOMON_TLS_SERVER_NAME",
}
_PATHS = ("ca_file", "client_cert_file", "client_key_file", "api_key_file")
_KEYS = (*_ENV, "insecure")
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


def _bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ValueError(f"{name} must be true or false, got {value!r}")


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@dataclass(frozen=True)
class Connection:
    """A resolved connection (see the module docstring for where each field comes from).

    ``api_key`` is the key itself (read from ``api_key_file`` when that was the source); paths are
    absolute or as given; ``profile`` is the profile that was read (None: no file or no such profile);
    ``config_file`` the file looked at.
    """

    address: str = DEFAULT_ADDRESS
    namespace: str = DEFAULT_NAMESPACE
    ca_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    api_key: str | None = None
    server_name: str | None = None
    insecure: bool = False
    profile: str | None = None
    config_file: str | None = None

    def credentials(self) -> grpc.ChannelCredentials | None:
        """TLS credentials (CA, optional client certificate) composed with the API key as a bearer
        token; None when ``insecure`` (plaintext; the key is not sent). Raises ``OSError`` for an
        unreadable file, ``ValueError`` for a client certificate without its key (or the reverse).
        The channels this class makes use :meth:`tls_credentials` and :func:`bearer_interceptors`
        instead (the same header, cheaper per call)."""
        tls = self.tls_credentials()
        if tls is None or not self.api_key:
            return tls
        return grpc.composite_channel_credentials(tls, grpc.access_token_call_credentials(self.api_key))

    def tls_credentials(self) -> grpc.ChannelCredentials | None:
        """TLS credentials (CA, optional client certificate) without the API key; None when
        ``insecure``. Raises as :meth:`credentials`."""
        if self.insecure:
            return None
        if bool(self.client_cert_file) != bool(self.client_key_file):
            raise ValueError(
                "a client certificate needs its key: set both client_cert_file and client_key_file"
            )
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file) if self.ca_file else None,
            private_key=_read(self.client_key_file) if self.client_key_file else None,
            certificate_chain=_read(self.client_cert_file) if self.client_cert_file else None,
        )

    def options(self) -> list[tuple[str, Any]]:
        """Channel options this connection needs (the TLS server name override, if any)."""
        if self.server_name and not self.insecure:
            return [("grpc.ssl_target_name_override", self.server_name)]
        return []

    def aio_channel(
        self,
        address: str | None = None,
        options: list[tuple[str, Any]] | None = None,
        *,
        unary_only: bool = False,
    ) -> grpc.aio.Channel:
        """A ``grpc.aio`` channel to ``address`` (default :attr:`address`) with these credentials;
        create it inside the event loop that uses it. ``unary_only``: the channel serves only unary
        calls, so the key is sent by :func:`bearer_interceptors` (cheaper per call) instead of call
        credentials."""
        opts = [*self.options(), *(options or ())]
        target = address or self.address
        if not unary_only or not self.api_key:
            creds = self.credentials()
            if creds is None:
                return grpc.aio.insecure_channel(target, options=opts)
            return grpc.aio.secure_channel(target, creds, options=opts)
        tls = self.tls_credentials()
        if tls is None:
            return grpc.aio.insecure_channel(target, options=opts)
        # the key as per-call metadata on the TLS channel (never on a plaintext one): the same header
        # as access_token_call_credentials, without its plugin thread per call
        return grpc.aio.secure_channel(
            target, tls, options=opts, interceptors=bearer_interceptors(self.api_key)
        )

    def channel(
        self, address: str | None = None, options: list[tuple[str, Any]] | None = None
    ) -> grpc.Channel:
        """A blocking ``grpc`` channel to ``address`` (default :attr:`address`) with these credentials."""
        opts = [*self.options(), *(options or ())]
        creds = self.credentials()
        target = address or self.address
        if creds is None:
            return grpc.insecure_channel(target, options=opts)
        return grpc.secure_channel(target, creds, options=opts)


def _with_bearer(details: Any, header: tuple[str, str]) -> Any:
    metadata = list(details.metadata or ())
    metadata.append(header)
    return details._replace(metadata=metadata)


class _AioBearer(grpc.aio.UnaryUnaryClientInterceptor):
    """Adds ``authorization: Bearer <key>`` to every unary call of a ``grpc.aio`` channel."""

    def __init__(self, key: str) -> None:
        self.header = ("authorization", f"Bearer {key}")

    async def intercept_unary_unary(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        return await continuation(_with_bearer(client_call_details, self.header), request)


def bearer_interceptors(key: str) -> list[grpc.aio.ClientInterceptor]:
    """Client interceptors for a TLS ``grpc.aio`` channel that send ``key`` as
    ``authorization: Bearer <key>`` metadata on every unary call (a stream opened on such a channel
    does not get it: grpc.aio's stream interceptors break ``call.write``). What
    ``grpc.access_token_call_credentials`` sends, measured cheaper: gRPC runs a call-credentials plugin
    on a new thread for every call (py-spy: ~25% of the API's CPU under 250 CreateJob/s went to the
    hints' plugin threads). Only for TLS channels: the caller must never put a key on plaintext."""
    return [_AioBearer(key)]


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The client config file: ``GNOMON_CONFIG_FILE``, else ``$XDG_CONFIG_HOME/gnomon/config.toml``,
    else ``~/.config/gnomon/config.toml``."""
    env = os.environ if environ is None else environ
    if env.get("GNOMON_CONFIG_FILE"):
        return Path(env["GNOMON_CONFIG_FILE"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "gnomon" / "config.toml"


def load_config(path: Path | str) -> dict[str, Any]:
    """The parsed config file (``{}`` if it does not exist). Raises ``ValueError`` (naming the file)
    for invalid TOML or a ``profiles`` entry that is not a table."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{p}: {exc}") from None
    profiles = data.get("profiles", {})
    if not isinstance(profiles, dict) or not all(isinstance(v, dict) for v in profiles.values()):
        raise ValueError(f"{p}: 'profiles' must hold tables, e.g. [profiles.dev]")
    return data


def resolve(
    address: str | None = None,
    namespace: str | None = None,
    *,
    api_key: str | None = None,
    ca_file: str | None = None,
    client_cert_file: str | None = None,
    client_key_file: str | None = None,
    server_name: str | None = None,
    insecure: bool | None = None,
    profile: str | None = None,
    config_file: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Connection:
    """The :class:`Connection` for these explicit settings (None: not given), the environment
    (``environ``, default ``os.environ``) and the config file (``config_file``, default
    :func:`config_path`). Raises ``ValueError`` for an unknown profile asked for by name (argument or
    ``GNOMON_PROFILE``), an unknown key in a profile, a bad boolean or invalid TOML, ``OSError`` for
    an unreadable ``api_key_file``."""
    env = os.environ if environ is None else environ
    path = Path(config_file).expanduser() if config_file else config_path(env)
    data = load_config(path)
    profiles: dict[str, dict[str, Any]] = data.get("profiles", {})
    wanted = profile or env.get("GNOMON_PROFILE") or None
    name = wanted or str(data.get("current") or "default")
    if wanted and name not in profiles:
        known = ", ".join(sorted(profiles)) or "none"
        raise ValueError(f"no profile {name!r} in {path} (profiles: {known})")
    values = dict(profiles.get(name, {}))
    unknown = sorted(set(values) - set(_KEYS))
    if unknown:
        raise ValueError(
            f"{path}: profile {name!r}: unknown key(s) {', '.join(unknown)} (known: {', '.join(_KEYS)})"
        )
    for key in _PATHS:
        if values.get(key):
            values[key] = str((path.parent / os.path.expanduser(str(values[key]))).resolve())
    explicit = {
        "address": address,
        "namespace": namespace,
        "api_key": api_key,
        "ca_file": ca_file,
        "client_cert_file": client_cert_file,
        "client_key_file": client_key_file,
        "server_name": server_name,
    }
    got: dict[str, Any] = {}
    for key, var in _ENV.items():
        for candidate in (explicit.get(key), env.get(var) or None, values.get(key)):
            if candidate:
                got[key] = str(candidate)
                break
    got.pop("api_key", None)
    got.pop("api_key_file", None)
    key_sources = (
        ("api_key", api_key),
        ("api_key", env.get("GNOMON_API_KEY")),
        ("api_key_file", env.get("GNOMON_API_KEY_FILE")),
        ("api_key", values.get("api_key")),
        ("api_key_file", values.get("api_key_file")),
    )
    kind, source = next(((k, str(v)) for k, v in key_sources if v), ("", ""))
    if insecure is None:
        raw = env.get("GNOMON_INSECURE") or values.get("insecure", False)
        insecure = _bool("insecure (GNOMON_INSECURE)", raw)
    if kind == "api_key":
        got["api_key"] = source.strip()
    elif kind == "api_key_file" and not insecure:  # a plaintext connection never sends (or reads) a key
        got["api_key"] = _read(source).decode().strip() or None
    return Connection(
        address=got.get("address", DEFAULT_ADDRESS),
        namespace=got.get("namespace", DEFAULT_NAMESPACE).removeprefix("namespaces/"),
        ca_file=got.get("ca_file"),
        client_cert_file=got.get("client_cert_file"),
        client_key_file=got.get("client_key_file"),
        api_key=got.get("api_key"),
        server_name=got.get("server_name"),
        insecure=insecure,
        profile=name if name in profiles else None,
        config_file=str(path),
    )


def open_channel(address: str | None = None, **settings: Any) -> grpc.Channel:
    """A blocking channel to ``address`` resolved as :func:`resolve` does (``settings`` are its
    keyword arguments); what tests and tools use instead of ``grpc.insecure_channel``."""
    return resolve(address, **settings).channel()


def aio_channel(address: str | None = None, *, unary_only: bool = False, **settings: Any) -> grpc.aio.Channel:
    """A ``grpc.aio`` channel to ``address`` resolved as :func:`resolve` does (create it inside the
    event loop that uses it); ``unary_only`` as :meth:`Connection.aio_channel`."""
    return resolve(address, **settings).aio_channel(unary_only=unary_only)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def write_profile(
    path: Path | str, name: str, values: Mapping[str, object], *, make_current: bool = True
) -> None:
    """Writes profile ``name`` with ``values`` (profile keys, see the module docstring; strings or
    booleans) into the config file at ``path``, keeping its other profiles, and makes it ``current``
    when ``make_current``. The file is rewritten (comments are not kept), created with its directory
    if missing, mode 0600. Raises ``ValueError`` for an unknown key or an invalid existing file."""
    unknown = sorted(set(values) - set(_KEYS))
    if unknown:
        raise ValueError(f"unknown profile key(s): {', '.join(unknown)}")
    p = Path(path)
    data = load_config(p)
    profiles: dict[str, dict[str, Any]] = dict(data.get("profiles", {}))
    profiles[name] = {k: v for k, v in values.items() if v is not None}
    current = name if make_current else data.get("current")
    lines = ["# Gnomon client profiles (gnomon.sdk.connection); `gnomon dev` writes [profiles.dev]."]
    if current:
        lines.append(f"current = {_toml_value(current)}")
    for key, value in data.items():
        if key not in ("current", "profiles") and not isinstance(value, dict):
            lines.append(f"{key} = {_toml_value(value)}")
    for pname, pvalues in profiles.items():
        lines += ["", f"[profiles.{_toml_value(pname)}]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in pvalues.items()]
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, p)
