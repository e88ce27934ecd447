"""How long an API process reuses what it read for the namespace job quotas (``GNOMON_QUOTA_CACHE_*``,
:class:`gnomon.api.quotas.QuotaGuard`).

Kept apart from :mod:`gnomon.common.config` only for the module-size guard;
:mod:`gnomon.common.config_check` lists it with the others.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class QuotaCacheSettings(BaseSettings):
    """The API's quota caches (``GNOMON_QUOTA_CACHE_*``): shorter means fresher admission decisions
    and more reads of the database on the create path of limited namespaces."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_QUOTA_CACHE_", extra="forbid")

    pending_ttl_s: float = Field(
        default=1.0,
        ge=0,
        le=60,
        description="Seconds an API process reuses a namespace's pending-job count (SCHEDULED + QUEUED) "
        "for max_pending_jobs; jobs it admits meanwhile are added at once. 0: counted on every admission.",
    )
    settings_ttl_s: float = Field(
        default=5.0,
        ge=0,
        le=300,
        description="Seconds an API process reuses a namespace's quota settings; a changed quota takes "
        "effect within this time (at once in the process that changed it). 0: read on every admission.",
    )
