"""What the deploy/ tests share: where the files are, the PromQL expressions of the Prometheus rules
and of the Grafana dashboard, and the metric names those expressions read."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "gnomon-rules.yaml"
RULES_TEST = DEPLOY / "prometheus" / "gnomon-rules.test.yaml"
DASHBOARD = DEPLOY / "grafana" / "gnomon-dashboard.json"

#: A metric name in PromQL that is Gnomon's: recording rules are named ``gnomon:...`` (with a colon),
#: so they never match.
_METRIC = re.compile(r"\b(gnomon_[a-z0-9_]+)\b")
#: Grafana's variables, replaced by values a plain PromQL parser accepts.
_LABEL_VALUES = re.compile(r"^label_values\((.*),\s*\w+\)$")
_GRAFANA_VARS = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m", "$queue": ".*"}


def rules() -> list[dict]:
    """Every rule (recording and alerting) of ``deploy/prometheus/gnomon-rules.yaml``."""
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def rule_expressions() -> list[str]:
    """The ``expr`` of every rule."""
    return [r["expr"] for r in rules()]


def dashboard() -> dict:
    """The Grafana dashboard (JSON model)."""
    return json.loads(DASHBOARD.read_text())


def panels() -> list[dict]:
    """Every panel of the dashboard but rows, including panels nested in collapsed rows."""
    out = []
    for p in dashboard()["panels"]:
        if p.get("type") == "row":
            out += p.get("panels", [])
        else:
            out.append(p)
    return out


def dashboard_expressions(substitute: bool = False) -> list[str]:
    """The PromQL of every panel target and of every query variable; with ``substitute``, Grafana's
    variables (``$__rate_interval``, ``$queue``...) replaced by plain values and a variable's
    ``label_values(selector, label)`` by its selector, so that every one is plain PromQL."""
    exprs = [t["expr"] for p in panels() for t in p.get("targets", []) if t.get("expr")]
    for v in dashboard()["templating"]["list"]:
        if v.get("type") == "query":
            exprs.append(v["definition"])
    if substitute:
        out = []
        for e in exprs:
            for k, val in sorted(_GRAFANA_VARS.items(), key=lambda kv: -len(kv[0])):
                e = e.replace(k, val)
            e = _LABEL_VALUES.sub(r"\1", e)  # Grafana's label_values(selector, label): the selector
            out.append(e)
        exprs = out
    return exprs


def metric_names(exprs: list[str]) -> set[str]:
    """Gnomon metric names (as exposed: ``_total``, ``_bucket``...) that ``exprs`` read."""
    return {m for e in exprs for m in _METRIC.findall(e)}


def promtool() -> tuple[str | None, str]:
    """``(path of promtool, "")``, or ``(None, why it is missing)`` when scripts/bootstrap recorded
    that it could not install it. Raises ``AssertionError`` when promtool is missing without such
    a record (bootstrap did not run, or the package disappeared): that is a broken setup, not a skip."""
    path = shutil.which("promtool")
    if path:
        return path, ""
    record = ROOT / ".venv" / ".promtool-unavailable"
    if record.exists():
        return None, record.read_text().strip()
    raise AssertionError("promtool is missing and scripts/bootstrap did not say why: run scripts/bootstrap")
