"""Per-stream budgets of the worker lease stream (``GNOMON_STREAM_*``), read by the dispatcher.

One worker stream must not cost the dispatcher unbounded memory or stall other tenants' writes
(docs/security.md; docs/protocol.md section 12). Each bound below is enforced by flow control: the dispatcher
stops reading a stream (gRPC's own backpressure: the worker's sends block) or stops assigning to it,
it does not end it.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: Most attempt references one stream message may carry (``gnomon.dispatcher.hello``'s
#: ``MAX_ITEMS_PER_MESSAGE``): the unknown-reference burst must let one such message through.
_MAX_ITEMS_PER_MESSAGE = 1000


class StreamSettings(BaseSettings):
    """Per-stream and per-principal bounds of the worker lease stream (``GNOMON_STREAM_*``)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_STREAM_", extra="forbid")

    max_inflight_writes: int = Field(
        default=2_000,
        ge=1,
        le=1_000_000,
        description="Most accepts, heartbeats, checkpoints and results of one stream submitted to the "
        "write batcher and not yet committed, items. At the budget the dispatcher stops reading the "
        "stream (one message of up to 1000 items may pass it) until writes commit: the worker's sends "
        "block (gRPC flow control), nothing is refused.",
    )
    max_queued_response_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=64 * 1024,
        le=1024 * 1024 * 1024,
        description="Most bytes of responses (assignments counted with their payload and checkpoint, "
        "acks) queued for one stream that does not read them, bytes. At the cap the dispatcher "
        "assigns nothing more to the stream (its credits notwithstanding; an assignment may pass the "
        "cap by itself) and stops reading it, until the worker reads.",
    )
    unknown_refs_per_s: float = Field(
        default=1_000.0,
        gt=0,
        le=1_000_000,
        description="Attempt references not delivered to the sending stream (after a reconnect, or from "
        "another dispatcher) are checked against the attempt's owner before any write, at most this "
        "many per second per principal per dispatcher, references/s. Beyond it the principal's "
        "streams are read more slowly; references of attempts that are not the stream identity's "
        "are refused STALE_ATTEMPT with no write.",
    )
    unknown_refs_burst: int = Field(
        default=5_000,
        ge=_MAX_ITEMS_PER_MESSAGE,
        le=10_000_000,
        description="Bucket size of unknown_refs_per_s: references a principal's streams may have "
        "checked at once after a quiet period (a worker reconnecting with its running attempts), "
        "references (at least 1000, one full message).",
    )
    ownership_checks: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Most ownership checks of unknown references running at once in one dispatcher, "
        "all streams together (each one bounded read of up to 1000 attempt rows), queries.",
    )
