"""The start-up check of the environment against the settings classes of :mod:`gnomon.common.config`.

Every ``GNOMON_*`` variable is a field of one of :data:`SETTINGS_CLASSES`. At start,
:func:`check_environment` (called by the ``gnomon`` command before any service or client command
runs) refuses an unknown ``GNOMON_*`` variable with a did-you-mean, and validates every class, so an
invalid value stops the process with a one-line message naming the variable. Variables under
:data:`RESERVED_PREFIXES` (``GNOMON_TEST_*``) belong to test harnesses and are never read by the
product.
"""

from __future__ import annotations

import difflib
import os
from typing import Any

from pydantic import ValidationError
from pydantic_settings import BaseSettings

from gnomon.common.auth.settings import AuditSettings, AuthSettings, InsecureSettings, TlsSettings
from gnomon.common.config import (
    BreakerSettings,
    ClientSettings,
    ClusterSettings,
    DatabaseSettings,
    DesktopSettings,
    DevServerSettings,
    DispatcherSettings,
    EtcdSettings,
    LogSettings,
    MetricsSettings,
    PlannerSettings,
    ReaperSettings,
    RetryBudgetSettings,
    ServerSettings,
    TelemetrySettings,
)
from gnomon.common.event_loop import EventLoopSettings
from gnomon.common.faults import FaultSettings
from gnomon.common.quota_cache_settings import QuotaCacheSettings
from gnomon.common.stream_quota_settings import StreamQuotaSettings
from gnomon.common.stream_settings import StreamSettings
from gnomon.common.throttle_settings import ConsoleSignInSettings, LogRepeatSettings
from gnomon.common.tracing_settings import TracesSettings

SETTINGS_CLASSES: tuple[type[BaseSettings], ...] = (
    DatabaseSettings,
    EtcdSettings,
    ClusterSettings,
    ServerSettings,
    DispatcherSettings,
    StreamSettings,
    StreamQuotaSettings,
    QuotaCacheSettings,
    ReaperSettings,
    RetryBudgetSettings,
    BreakerSettings,
    PlannerSettings,
    LogSettings,
    EventLoopSettings,
    TelemetrySettings,
    TracesSettings,
    MetricsSettings,
    FaultSettings,
    ClientSettings,
    DevServerSettings,
    DesktopSettings,
    InsecureSettings,
    TlsSettings,
    AuthSettings,
    LogRepeatSettings,
    ConsoleSignInSettings,
    AuditSettings,
)
"""Every settings class; together their fields are all the ``GNOMON_*`` variables there are."""

RESERVED_PREFIXES: tuple[str, ...] = ("GNOMON_TEST_",)
"""``GNOMON_*`` variables under these prefixes belong to test harnesses and handlers; the product
never reads them, so :func:`check_environment` lets them pass."""


class ConfigError(ValueError):
    """The environment holds an unknown ``GNOMON_*`` variable or an invalid value; ``str()`` is one
    line that names the variable."""


def env_name(cls: type[BaseSettings], field: str) -> str:
    """The environment variable of ``field`` of ``cls``, e.g. ``GNOMON_DATABASE_URL``."""
    return f"{cls.model_config.get('env_prefix', '')}{field}".upper()


def known_variables() -> dict[str, type[BaseSettings]]:
    """Every ``GNOMON_*`` variable name -> the settings class it configures."""
    return {env_name(cls, f): cls for cls in SETTINGS_CLASSES for f in cls.model_fields}


def _did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else " (see docs/operations.md, Settings)"


def _first_error(cls: type[BaseSettings], err: ValidationError) -> str:
    e = err.errors()[0]
    field = str(e["loc"][0]) if e["loc"] else ""
    name = env_name(cls, field)
    value: Any = e.get("input")
    shown = "" if "url" in field or isinstance(value, dict) else f" (got {value!r})"
    return f"invalid {name}{shown}: {e['msg']}"


def check_environment() -> None:
    """Refuses, with a :class:`ConfigError`, the first unknown ``GNOMON_*`` environment variable (with a
    did-you-mean) and then the first invalid value of any settings class. Call it once at start."""
    known = known_variables()
    names = sorted(known)
    for var in sorted(os.environ):
        upper = var.upper()
        if upper.startswith("GNOMON_") and upper not in known and not upper.startswith(RESERVED_PREFIXES):
            raise ConfigError(f"unknown environment variable {var}{_did_you_mean(upper, names)}")
    for cls in SETTINGS_CLASSES:
        try:
            cls()
        except ValidationError as err:
            raise ConfigError(_first_error(cls, err)) from None
