"""``gnomon_planner_lag_seconds``: how long the earliest schedule due for planning has waited, from the
planner's last look (:func:`gnomon.common.metrics.set_planner_due`) and the clock at scrape time."""

from __future__ import annotations

import pytest

from gnomon.common import metrics


@pytest.fixture(autouse=True)
def _restore():
    saved = metrics._planner_due, metrics._planner_seen
    yield
    metrics._planner_due, metrics._planner_seen = saved


def test_no_value_before_the_first_round() -> None:
    metrics._planner_due, metrics._planner_seen = None, False
    assert metrics.planner_lag_s(now=1000.0) is None


def test_zero_when_nothing_is_due_or_due_later() -> None:
    metrics.set_planner_due(None, 0.0)
    assert metrics.planner_lag_s(now=1000.0) == 0.0
    metrics.set_planner_due(1010.0, 0.0)  # due in 10 s
    assert metrics.planner_lag_s(now=1000.0) == 0.0


def test_grows_after_a_stall_on_the_database_clock() -> None:
    # the database clock runs 5 s ahead of this process; plan_at was 1000 (database clock)
    metrics.set_planner_due(1000.0, 5.0)
    assert metrics.planner_lag_s(now=1000.0) == pytest.approx(5.0)
    assert metrics.planner_lag_s(now=1060.0) == pytest.approx(65.0)  # no new round: the lag keeps growing
