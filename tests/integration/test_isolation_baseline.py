"""The honest tenant's quiet baseline (tests/gnomon_isolation_support.py), against which the
tenant-isolation tests state their bounds: with no attacker, every honest job runs and its
dispatch lag stays far under the 1 s bound the attack tests assert."""

from __future__ import annotations

import time

import pytest

from gnomon_isolation_support import LagReport, honest_tenant, percentile
from gnomon_test_support import running_suite


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(pg_server, migrated_template, tmp_path_factory.mktemp("isolation")) as s:
        yield s


def test_percentile_is_nearest_rank():
    values = [float(i) for i in range(1, 101)]
    assert (percentile(values, 0.5), percentile(values, 0.99), percentile([], 0.99)) == (50.0, 99.0, 0.0)
    report = LagReport(jobs=2, succeeded=1, lags_s=[0.1], states={"a": "SUCCEEDED", "b": "RUNNING"})
    with pytest.raises(AssertionError, match="did not succeed"):
        report.assert_within(min_jobs=1)


def test_the_honest_tenant_meets_its_bound_when_quiet(suite):
    with honest_tenant(suite, namespace="quiet") as probe:
        time.sleep(5)
    print(probe.report)
    probe.report.assert_within(p99_s=1.0, min_jobs=30)
    assert probe.report.succeeded == probe.report.jobs
