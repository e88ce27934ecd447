"""Settings of the guards against a client that repeats a failing request: the repetition of log
lines it can trigger (``GNOMON_LOG_REPEAT_*``, :mod:`gnomon.common.lograte`) and the console's
sign-in throttle (``GNOMON_CONSOLE_SIGNIN_*``, :mod:`gnomon.console.throttle`).

Kept apart from :mod:`gnomon.common.config` only for the module-size guard;
:mod:`gnomon.common.config_check` lists them with the others.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class LogRepeatSettings(BaseSettings):
    """How often an identical log line a client can trigger is written (``GNOMON_LOG_REPEAT_*``)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_LOG_REPEAT_", extra="forbid")

    interval_s: float = Field(
        default=60.0,
        ge=0,
        le=3600,
        description="Seconds: a log line a client can trigger (an unexpected fault in a handler, a "
        "credential that trips the JWT verifier) is written at most once per this interval per logger "
        "and kind; the next one says how many were suppressed. 0: every line is written.",
    )


class ConsoleSignInSettings(BaseSettings):
    """The console's sign-in throttle (``GNOMON_CONSOLE_SIGNIN_*``): a failed sign-in costs a token
    of the client address's bucket and of the API key id's bucket; with either empty the console
    answers 429 with ``Retry-After`` and does not ask the API."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_CONSOLE_SIGNIN_", extra="forbid")

    address_burst: int = Field(
        default=10,
        ge=1,
        le=10_000,
        description="Failed sign-ins one client address may make at once (tokens).",
    )
    address_per_minute: float = Field(
        default=6.0, gt=0, le=60_000, description="Tokens per minute an address's bucket regains."
    )
    key_burst: int = Field(
        default=5,
        ge=1,
        le=10_000,
        description="Failed sign-ins with one API key id (the public part of gnk_{id}_{secret}) from all "
        "addresses together, at once (tokens).",
    )
    key_per_minute: float = Field(
        default=3.0, gt=0, le=60_000, description="Tokens per minute a key id's bucket regains."
    )
    max_buckets: int = Field(
        default=100_000,
        ge=100,
        le=10_000_000,
        description="Buckets kept per kind (addresses, key ids); the least recently used full ones go first.",
    )
