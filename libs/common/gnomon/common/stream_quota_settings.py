"""The default worker-stream quotas of every namespace (``GNOMON_STREAM_QUOTA_*``), read by the
dispatcher, and the point past which the dispatcher-wide stream cap is shared fairly.

Kept apart from :mod:`gnomon.common.config` (which holds every other settings class) only for the
module-size guard; :mod:`gnomon.common.config_check` lists it with the others.

A namespace whose quota column is NULL (every namespace created before these quotas existed, and
every one created or updated with 0 in that field) gets the default here. All counts are per
dispatcher process: each dispatcher enforces them on the streams it holds (docs/security.md).

The queue defaults are 64 because every distinct (namespace, queue) a stream serves is a claim
target of the dispatcher, and with today's claim loop one namespace streaming 100 distinct queues
already brought another tenant's dispatch lag p99 to 0.73 s, 200 queues to 49 s (64 worker streams
on one queue: 0.16 s), on a 2-core test machine.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class StreamQuotaSettings(BaseSettings):
    """Defaults of the worker-stream quotas of a namespace, per dispatcher process
    (``GNOMON_STREAM_QUOTA_*``); a namespace overrides each with its own quota."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_STREAM_QUOTA_", extra="forbid")

    max_worker_streams: int = Field(
        default=256,
        ge=1,
        le=1_000_000,
        description="Default of the namespace quota max_worker_streams: worker streams of one "
        "namespace open on one dispatcher process at once, streams.",
    )
    max_worker_streams_per_principal: int = Field(
        default=64,
        ge=1,
        le=1_000_000,
        description="Default of max_worker_streams_per_principal: worker streams one principal holds "
        "in one namespace on one dispatcher process at once, streams.",
    )
    max_queues_per_hello: int = Field(
        default=64,
        ge=1,
        le=100,
        description="Default of max_queues_per_hello: queues one worker hello may name, queues "
        "(never more than 100).",
    )
    max_queues_per_principal: int = Field(
        default=64,
        ge=1,
        le=1_000_000,
        description="Default of max_queues_per_principal: distinct queues the streams of one principal "
        "in one namespace serve together on one dispatcher process, queues.",
    )
    max_streamed_queues: int = Field(
        default=64,
        ge=1,
        le=1_000_000,
        description="Default of max_streamed_queues: distinct queues the streams of one namespace serve "
        "together on one dispatcher process (each is a claim target), queues.",
    )
    fair_share_from: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="Fraction of GNOMON_DISPATCHER_MAX_STREAMS past which a new stream is admitted only "
        "for a namespace holding fewer than its fair share, max_streams // (namespaces with streams, "
        "the caller's included, + 1), ratio.",
    )
