"""The contract stands alone: ``proto/`` (with only protoc's well-known types) compiles every gnomon
and google.rpc message and decodes an error's details, the shipped google protos are the installed
package's, and no proto comment cites anything outside the repository."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc_tools
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.rpc import error_details_pb2, status_pb2
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto"


def test_shipped_google_protos_are_the_installed_packages():
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "refresh-google-protos"), "--check"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Apache License" in (PROTO / "google" / "LICENSE").read_text()


def test_proto_folder_alone_decodes_an_error_detail(tmp_path: Path):
    wkt = Path(grpc_tools.__file__).parent / "_proto"  # google/protobuf only: every protoc ships them
    assert not (wkt / "google" / "rpc").exists()
    out = tmp_path / "set.pb"
    files = [str(p.relative_to(PROTO)) for p in sorted((PROTO / "gnomon" / "v1").glob("*.proto"))]
    files += ["google/rpc/status.proto", "google/rpc/error_details.proto", "google/rpc/code.proto"]
    rc = protoc.main(
        ["protoc", f"-I{PROTO}", f"-I{wkt}", "--include_imports", f"--descriptor_set_out={out}", *files]
    )
    assert rc == 0
    fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    # what a server sends in grpc-status-details-bin, decoded with nothing but proto/
    sent = status_pb2.Status(code=8, message="quota")
    sent.details.add().Pack(error_details_pb2.ErrorInfo(reason="QUOTA_EXCEEDED", domain="gnomon"))
    Status = message_factory.GetMessageClass(pool.FindMessageTypeByName("google.rpc.Status"))
    ErrorInfo = message_factory.GetMessageClass(pool.FindMessageTypeByName("google.rpc.ErrorInfo"))
    got: Any = Status.FromString(sent.SerializeToString())
    info: Any = ErrorInfo.FromString(got.details[0].value)
    assert (got.message, got.details[0].type_url, info.reason) == (
        "quota",
        "type.googleapis.com/google.rpc.ErrorInfo",
        "QUOTA_EXCEEDED",
    )
    assert (
        pool.FindEnumTypeByName("gnomon.v1.FailureClass").values_by_number[3].name
        == "FAILURE_CLASS_PERMANENT"
    )


def test_no_proto_comment_cites_outside_the_repository():
    outside = re.compile(r"DESIGN\.md|\bissue \d+|\bADR\b|docs/adr/|CONVENTIONS\.md", re.I)
    bad = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in sorted((PROTO / "gnomon").rglob("*.proto"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if line.lstrip().startswith("//") and outside.search(line)
    ]
    assert bad == []
