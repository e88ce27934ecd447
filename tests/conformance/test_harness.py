"""The harness's own logic, without a suite: which drivers run (``drivers.selected``), how the events
file is read and checked (``harness.read_events``), and the running-handlers peak."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from drivers import DRIVERS, EXTERNAL_ENV, SELECT_ENV, selected
from harness import most_running, read_events


def test_default_is_every_available_driver() -> None:
    names = [d.name for d in selected({})]
    assert names == [d.name for d in DRIVERS if d.available()]
    assert "python" in names


def test_selection_by_name_and_external() -> None:
    assert [d.name for d in selected({SELECT_ENV: " python "})] == ["python"]
    assert [d.name for d in selected({SELECT_ENV: "typescript"})] == ["typescript"]  # even if not built
    only_external = selected({SELECT_ENV: "external", EXTERNAL_ENV: "java -jar 'my driver.jar'"})
    assert [(d.name, d.argv) for d in only_external] == [("external", ("java", "-jar", "my driver.jar"))]
    assert [d.name for d in selected({SELECT_ENV: "python", EXTERNAL_ENV: "x"})] == ["python"]
    assert [d.name for d in selected({EXTERNAL_ENV: "x"})][-1] == "external"
    with pytest.raises(ValueError, match="unknown driver"):
        selected({SELECT_ENV: "python,cobol"})


def _line(**fields) -> str:
    base = {"event": "start", "job": "namespaces/default/jobs/j", "attempt": 1, "pid": 7, "t": 1.5}
    return json.dumps(base | fields)


def test_events_are_checked_against_the_contract(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    assert read_events(path) == []
    good = _line(fencing_token=3, idempotency_key="k", last_checkpoint=None)
    path.write_text(good + "\n" + _line(event="finish", outcome="succeeded", **{"class": None})[:20])
    assert [e["event"] for e in read_events(path)] == ["start"], "a line being written is left for later"
    for bad in (
        _line(),  # a start without its fields
        _line(event="finish", outcome="ok", **{"class": None}),
        _line(event="cancelled", reason="because"),
        _line(event="started"),
        _line(event="ready", attempt="1"),
    ):
        path.write_text(bad + "\n")
        with pytest.raises(AssertionError):
            read_events(path)


def test_most_running_is_the_peak_of_one_process() -> None:
    def ev(kind: str, pid: int = 1) -> dict:
        return {"event": kind, "pid": pid}

    events = [ev("start"), ev("start"), ev("start", 2), ev("finish"), ev("start"), ev("start"), ev("finish")]
    assert most_running(events, 1) == 3
    assert most_running(events, 2) == 1
    assert most_running(events, 3) == 0
