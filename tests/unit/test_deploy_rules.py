"""deploy/prometheus and deploy/grafana: the alert rules pass ``promtool check rules`` and their unit
tests (``promtool test rules``), every alert is exercised firing by a unit test, and every PromQL
expression of the Grafana dashboard parses (checked by promtool as recording rules)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from gnomon_deploy_support import (
    RULES,
    RULES_TEST,
    dashboard,
    dashboard_expressions,
    metric_names,
    panels,
    promtool,
    rule_expressions,
    rules,
)


@pytest.fixture(scope="module")
def tool() -> str:
    path, why = promtool()
    if path is None:
        pytest.skip(f"promtool unavailable: {why}")
    return path


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=cwd)


def test_promtool_checks_the_rules(tool: str) -> None:
    r = run(tool, "check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(rules())} rules found" in r.stdout


def test_promtool_unit_tests_of_the_rules_pass(tool: str) -> None:
    r = run(tool, "test", "rules", RULES_TEST.name, cwd=RULES_TEST.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_every_alert_has_a_unit_test_that_sees_it_fire() -> None:
    alerts = {r["alert"] for r in rules() if "alert" in r}
    assert {"GnomonDispatchLagBudgetBurn", "GnomonQueueBreakerOpen", "GnomonPlannerBehind"} <= alerts
    tested = {
        t["alertname"]
        for case in yaml.safe_load(RULES_TEST.read_text())["tests"]
        for t in case.get("alert_rule_test", [])
        if t.get("exp_alerts")
    }
    assert alerts - tested == set(), "alerts no unit test sees firing"


def test_every_alert_has_severity_summary_and_runbook() -> None:
    for r in rules():
        if "alert" in r:
            assert r["labels"]["severity"] in {"page", "ticket", "warning"}, r["alert"]
            assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]
            assert r["annotations"]["runbook"].startswith("docs/operations.md#"), r["alert"]


def test_dashboard_promql_parses(tool: str, tmp_path: Path) -> None:
    exprs = dashboard_expressions(substitute=True)
    assert len(exprs) >= 15
    group = {
        "name": "dashboard",
        "rules": [{"record": f"dashboard:expr{i}", "expr": e} for i, e in enumerate(exprs)],
    }
    f = tmp_path / "dashboard-exprs.yaml"
    f.write_text(yaml.safe_dump({"groups": [group]}))
    r = run(tool, "check", "rules", str(f))
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_broken_expression_is_caught(tool: str, tmp_path: Path) -> None:
    """The check above can fail: promtool refuses a dashboard-like expression with a syntax error."""
    f = tmp_path / "broken.yaml"
    f.write_text(
        yaml.safe_dump(
            {"groups": [{"name": "x", "rules": [{"record": "x:y", "expr": "sum by (queue (up)"}]}]}
        )
    )
    assert run(tool, "check", "rules", str(f)).returncode != 0


def test_dashboard_model() -> None:
    d = dashboard()
    assert d["uid"] == "gnomon-overview" and d["schemaVersion"] >= 36
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert {v["name"] for v in d["templating"]["list"]} == {"datasource", "queue"}
    for p in panels():
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"] and p.get("description"), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"], p["title"]


def test_the_dashboard_shows_what_the_alerts_watch() -> None:
    """Every metric an alert reads is on the dashboard too (an alert you cannot look at is no help)."""
    shown = metric_names(dashboard_expressions())
    assert metric_names(rule_expressions()) - shown == set()


def test_every_metric_they_name_is_documented() -> None:
    """docs/operations.md ("Metrics (Prometheus)") documents every metric the rules and the dashboard read."""
    doc = (RULES.parents[2] / "docs" / "operations.md").read_text()
    named = metric_names(rule_expressions()) | metric_names(dashboard_expressions())
    families = {re.sub(r"_(bucket|count|sum)$", "", n) for n in named}
    assert len(families) >= 15
    assert {f for f in families if f"`{f}`" not in doc} == set()


def test_the_compose_prometheus_configuration(tool: str) -> None:
    """deploy/prometheus/prometheus.yaml parses (promtool), loads the rules, and scrapes every Gnomon
    server of deploy/compose.yaml on its metrics port, over HTTPS with the CA the compose file mounts."""
    config = RULES.parent / "prometheus.yaml"
    r = run(tool, "check", "config", "--syntax-only", str(config))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = yaml.safe_load(config.read_text())
    assert doc["rule_files"] == [RULES.name]
    (job,) = doc["scrape_configs"]
    assert job["scheme"] == "https"
    targets = {t for sc in job["static_configs"] for t in sc["targets"]}
    compose = yaml.safe_load((RULES.parents[1] / "compose.yaml").read_text())["services"]
    servers = {
        name
        for name, s in compose.items()
        if s.get("command", [""])[0] in ("api", "dispatcher", "planner", "reaper")
    }
    port = compose["api"]["environment"]["GNOMON_METRICS_LISTEN"].rpartition(":")[2]
    assert targets == {f"{name}:{port}" for name in servers}
    mounts = compose["prometheus"]["volumes"]
    assert any(
        m.startswith("tls:") and job["tls_config"]["ca_file"].startswith(m.split(":")[1]) for m in mounts
    )
    assert f"./prometheus/{RULES.name}:/etc/prometheus/{RULES.name}:ro" in mounts
