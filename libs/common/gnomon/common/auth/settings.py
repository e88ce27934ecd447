"""Settings of authentication and TLS (``GNOMON_AUTH_*``, ``GNOMON_TLS_*``, ``GNOMON_INSECURE``);
docs/security.md explains each, docs/operations.md lists them with the others."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class InsecureSettings(BaseSettings):
    """The explicit opt-out of TLS and authentication (never the default)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_", extra="forbid")

    insecure: bool = Field(
        default=False,
        description="Serve plaintext with no authentication (every caller may do everything); "
        "logged as a warning at every start. Without it a service refuses to start with no TLS certificate.",
    )


class TlsSettings(BaseSettings):
    """TLS of every listener, and the CA a service trusts when it calls another Gnomon service."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_TLS_", extra="forbid")

    cert_file: str = Field(default="", description="PEM server certificate (chain) of this service.")
    key_file: str = Field(default="", description="PEM private key of cert_file.")
    client_ca_file: str = Field(
        default="", description="PEM CA bundle that signs client certificates (mTLS); empty: none accepted."
    )
    client_auth: Literal["none", "require"] = Field(
        default="none",
        description="Client certificates (mTLS): none (not asked for) or require (every connection "
        "must present one signed by client_ca_file; its CN names the principal when no bearer "
        "token is sent). gRPC's Python server offers no 'verify if sent' mode.",
    )
    ca_file: str = Field(
        default="",
        description="PEM CA bundle this service trusts when it calls other Gnomon services (hints).",
    )


class AuthSettings(BaseSettings):
    """Credentials the servers accept besides client certificates: API keys (always), JWTs (when an
    issuer is set) and the service token (service-to-service calls)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_AUTH_", extra="forbid")

    cache_s: float = Field(
        default=5.0,
        ge=0,
        le=300,
        description="A verified API key or certificate principal is reused this long, seconds (so a "
        "revoked key or grant takes effect within it).",
    )
    service_token_file: str = Field(
        default="", description="File holding the service token services present to each other (hints)."
    )
    reflection: Literal["authenticated", "open", "off"] = Field(
        default="authenticated",
        description="gRPC server reflection: for any authenticated caller, for anyone, or off.",
    )
    jwt_issuer: str = Field(default="", description="Expected 'iss' of JWTs; empty: JWTs are not accepted.")
    jwt_audience: str = Field(default="", description="Expected 'aud' of JWTs (required with jwt_issuer).")
    jwt_jwks_url: str = Field(default="", description="HTTPS URL of the issuer's JWKS (keys are cached).")
    jwt_jwks_file: str = Field(default="", description="A local JWKS file instead of jwt_jwks_url.")
    jwt_algorithms: str = Field(
        default="RS256,ES256,EdDSA", description="Comma-separated accepted JWT algorithms."
    )
    jwt_principal_claim: str = Field(default="sub", description="Claim naming the principal.")
    jwt_permissions_claim: str = Field(
        default="permissions",
        description="Claim listing grants as 'namespace:role' (worker: 'namespace:worker' or "
        "'namespace:worker:queue1,queue2').",
    )


class AuditSettings(BaseSettings):
    """The audit log writer of every server (:class:`gnomon.common.rpc.audit.AuditLog`; docs/security.md,
    "Audit")."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_AUDIT_", extra="forbid")

    flush_s: float = Field(
        default=0.2, gt=0, le=60, description="Buffered audit rows are written at least this often, seconds."
    )
    buffer_rows: int = Field(
        default=100_000,
        ge=1,
        le=10_000_000,
        description="Audit rows a process buffers at most, rows (per process). When it is full (the "
        "database cannot keep up or is down), audited calls are refused with UNAVAILABLE "
        "(AUDIT_UNAVAILABLE) before they run: never an unaudited success.",
    )
    coalesce_s: float = Field(
        default=10.0,
        ge=0,
        le=3600,
        description="Refused audited calls of one (principal, namespace, method, outcome) within this "
        "window, seconds, share one audit row with a count (the first is written at once, the rest "
        "when the window ends); 0: one row per refused call.",
    )
    coalesce_keys: int = Field(
        default=10_000,
        ge=1,
        le=1_000_000,
        description="Coalescing windows a process keeps open at most, keys (per process); past it, "
        "refusals coalesce per (principal, method, outcome) in namespace '*'.",
    )
    principal_share: float = Field(
        default=0.125,
        gt=0,
        le=1,
        description="Share of the audit buffer one principal may hold, a fraction of buffer_rows "
        "(per principal, per process): a principal holds at most max(1, floor(buffer_rows * "
        "principal_share)) buffered or reserved rows; past it its audited calls are refused with "
        "UNAVAILABLE (AUDIT_UNAVAILABLE) while other principals' calls still run.",
    )
    coalesce_principal_keys: int = Field(
        default=100,
        ge=1,
        le=1_000_000,
        description="Coalescing windows one principal keeps open at most, keys (per principal, per "
        "process), windows in namespace '*' not counted; past it, that principal's refusals "
        "coalesce per (principal, method, outcome) in namespace '*'.",
    )
