"""Histogram measurements recorded per batch: one call for the values of many jobs.

``Histogram.record`` of the OpenTelemetry SDK costs ~6.5 µs per value (a ``Measurement`` object,
the exemplar filter, attribute copying and hashing, a lock; measured on the 2-core benchmark
machine), and the dispatcher records two values per job (dispatch lag at the claim, outbox
publication lag at the accept): 7.5 % of its CPU in a 20,000-job drain (py-spy). :func:`record_many`
records a whole batch of one attribute set with one lookup and one lock per aggregation; each value
still lands in its own bucket, so the exported histogram (buckets, sum, count, min, max) is the one
per-value ``record`` calls give, and the documented metrics keep their meaning (one observation per
job). Exemplars are not sampled for batched values.

This reaches into the SDK's aggregation objects (``opentelemetry-sdk`` is pinned in
``pyproject.toml``); where they are not what it expects (another SDK version, a view that changes
the aggregation, a no-op meter) it falls back to one ``record`` per value, and
``tests/unit/test_metric_batches.py`` compares both ways on every reader.
"""

from __future__ import annotations

import logging
import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from typing import Any, cast

from opentelemetry.metrics import Histogram

log = logging.getLogger(__name__)

try:  # the SDK's internals, as of opentelemetry-sdk 1.45
    from opentelemetry.sdk.metrics._internal._view_instrument_match import _hash_attributes
    from opentelemetry.sdk.metrics._internal.aggregation import _ExplicitBucketHistogramAggregation
except ImportError:  # pragma: no cover - another SDK layout: per-value records
    _hash_attributes = None  # type: ignore[assignment]
    _ExplicitBucketHistogramAggregation = None  # type: ignore[assignment,misc]


def _matches(histogram: Histogram) -> list[Any] | None:
    """The SDK's view-instrument matches of ``histogram`` (one per reader and view), or None when
    they cannot be reached (then the caller records value by value)."""
    if _hash_attributes is None:
        return None
    consumer = getattr(histogram, "_measurement_consumer", None)
    storages = getattr(consumer, "_reader_storages", None)
    if storages is None or not histogram._is_enabled():  # type: ignore[attr-defined]
        return None
    out: list[Any] = []
    for storage in storages.values():
        out.extend(storage._get_or_init_view_instrument_match(histogram))
    return out


def _is_explicit_bucket(agg: object) -> bool:
    return (
        _ExplicitBucketHistogramAggregation is not None and type(agg) is _ExplicitBucketHistogramAggregation
    )


def _add(match: Any, values: Sequence[float], attributes: Mapping[str, str]) -> bool:
    """Adds ``values`` to the aggregation of ``attributes`` in one view-instrument ``match``;
    False (nothing added) if that aggregation is not an explicit-bucket histogram."""
    attrs = dict(attributes)
    if match._view._attribute_keys is not None:
        attrs = {k: v for k, v in attrs.items() if k in match._view._attribute_keys}
    # the match's lock is held while adding, as the SDK does for readers that reset on collect:
    # a collection between the lookup and the add would otherwise lose the values
    with match._lock:
        agg: Any = match._get_or_create_aggregation(_hash_attributes(attrs), attrs)
        if not _is_explicit_bucket(agg):
            return False
        bounds = agg._boundaries
        with agg._lock:
            if agg._value is None:
                agg._value = agg._get_empty_bucket_counts()
            counts = agg._value
            for v in values:
                counts[bisect_left(bounds, v)] += 1
            agg._sum += sum(values)
            if agg._record_min_max:
                agg._min = min(agg._min, min(values))
                agg._max = max(agg._max, max(values))
    return True


def record_many(histogram: Histogram, values: Sequence[float], attributes: Mapping[str, str]) -> None:
    """Records each of ``values`` (finite, >= 0; others are dropped, as ``record`` drops them) in
    ``histogram`` under one attribute set, as that many ``histogram.record(value, attributes)``
    calls would, at the cost of one per batch plus a bucket search per value."""
    good = [v for v in values if v >= 0 and math.isfinite(v)]
    if not good:
        return
    matches = _matches(histogram)
    if matches is None:
        for v in good:
            histogram.record(v, attributes)
        return
    for match in matches:
        if not _add(match, good, attributes):
            # unexpected aggregation (a view changed it): this reader's values one by one
            from time import time_ns

            from opentelemetry.context import get_current
            from opentelemetry.sdk.metrics._internal.measurement import Measurement

            log.debug(
                "record_many: %s is not an explicit-bucket histogram here", getattr(histogram, "name", "?")
            )
            for v in good:
                match.consume_measurement(
                    Measurement(v, time_ns(), cast(Any, histogram), get_current(), dict(attributes))
                )
