"""record_many: a batch of values lands in a histogram exactly as one record per value does, on
cumulative and delta readers, with a collection between batches, and drops what record drops."""

from __future__ import annotations

import math
from typing import Any, cast

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View

from gnomon.common.metric_batches import record_many

BOUNDS = (0.001, 0.01, 0.1, 1, 10)


def _points(reader: InMemoryMetricReader) -> dict:
    """(attributes) -> (bucket counts, sum, count, min, max) of the one histogram collected."""
    out = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in cast(Any, m.data).data_points:
                    counts = getattr(p, "bucket_counts", None)
                    if counts is None:  # exponential histogram
                        counts = (p.zero_count, tuple(p.positive.bucket_counts))
                    out[tuple(sorted((p.attributes or {}).items()))] = (
                        tuple(counts) if not isinstance(counts, tuple) else counts,
                        round(p.sum, 9),
                        p.count,
                        p.min,
                        p.max,
                    )
    return out


def _pair(temporality: AggregationTemporality, views=()):
    readers, hists = [], []
    for _ in range(2):
        from opentelemetry.sdk.metrics import Histogram as SdkHistogram

        reader = InMemoryMetricReader(preferred_temporality={SdkHistogram: temporality})
        provider = MeterProvider(metric_readers=[reader], views=list(views))
        hist = provider.get_meter("t").create_histogram(
            "lag_seconds", unit="s", explicit_bucket_boundaries_advisory=BOUNDS
        )
        readers.append(reader)
        hists.append(hist)
    return readers, hists


BATCHES = [
    ([0.0, 0.001, 0.0011, 0.5, 1.0, 1.5, 99.0], {"queue": "a"}),
    ([0.02, 0.02, 0.02], {"queue": "b"}),
    ([7.0, -1.0, math.inf, math.nan, 0.3], {"queue": "a"}),
]


@pytest.mark.parametrize("temporality", [AggregationTemporality.CUMULATIVE, AggregationTemporality.DELTA])
def test_batch_equals_one_record_per_value(temporality):
    (r_one, r_many), (h_one, h_many) = _pair(temporality)
    for i, (values, attrs) in enumerate(BATCHES):
        for v in values:
            h_one.record(v, attrs)
        record_many(h_many, values, attrs)
        if i == 1:  # a collection between batches (a delta reader starts afresh)
            assert _points(r_one) == _points(r_many)
    one, many = _points(r_one), _points(r_many)
    assert one and one == many
    counts, total, n, lo, hi = many[(("queue", "a"),)]
    # negative, inf and nan dropped as record drops them; a delta reader holds the last batch only
    if temporality is AggregationTemporality.CUMULATIVE:
        assert (n, lo, hi) == (9, 0.0, 99.0)
    else:
        assert (n, lo, hi) == (2, 0.3, 7.0)
    assert sum(counts) == n


def test_another_aggregation_falls_back_to_one_per_value():
    view = View(instrument_name="lag_seconds", aggregation=ExponentialBucketHistogramAggregation())
    (r_one, r_many), (h_one, h_many) = _pair(AggregationTemporality.CUMULATIVE, [view])
    for values, attrs in BATCHES:
        for v in values:
            h_one.record(v, attrs)
        record_many(h_many, values, attrs)
    assert _points(r_one) and _points(r_one) == _points(r_many)


def test_empty_batch_records_nothing():
    (r_one, r_many), (_, h_many) = _pair(AggregationTemporality.CUMULATIVE)
    record_many(h_many, [], {"queue": "a"})
    record_many(h_many, [-1.0], {"queue": "a"})
    assert _points(r_many) == {}
