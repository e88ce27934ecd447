"""Settings of the OpenTelemetry traces (``GNOMON_TRACES_*``), read by :mod:`gnomon.common.tracing`.

Kept apart from :mod:`gnomon.common.config` (which holds every other settings class) only for the
module-size guard; :mod:`gnomon.common.config_check` lists it with the others.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: The exporters ``GNOMON_TRACES_EXPORTER`` names.
TraceExporter = Literal["none", "otlp", "console", "file"]


class TracesSettings(BaseSettings):
    """Where a service's spans go (``GNOMON_TRACES_*``); docs/tracing.md."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_TRACES_", extra="forbid")

    exporter: TraceExporter = Field(
        default="none",
        description="none (no tracing: no spans, nothing stored with jobs), otlp (OTLP/gRPC to "
        "GNOMON_OTLP_ENDPOINT), console (one JSON span per line on stdout) or file (one JSON span per "
        "line appended to GNOMON_TRACES_FILE).",
    )
    file: str = Field(default="", description="File the 'file' exporter appends to (one JSON span a line).")
    sample_ratio: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="Fraction of new traces (jobs created without a caller's trace) recorded, 0..1; a "
        "job created inside a caller's trace follows the caller's sampling decision.",
    )
