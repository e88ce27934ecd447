"""Unit tests of the worker stream's edge validation (gnomon.dispatcher.hello): every hello field,
attempt references and the escaping of echoed values."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.common.errors import InvalidArgument
from gnomon.dispatcher.hello import (
    MAX_HELLO_QUEUES,
    MAX_WORKER_ID_CHARS,
    attempt_key,
    clip,
    validate_hello,
)


def hello(**kw) -> wpb.WorkerHello:
    base: dict[str, Any] = {"worker_id": "host:1:abc", "queues": ["q"], "credits": 1}
    base.update(kw)
    return wpb.WorkerHello(**base)


def fields(h: wpb.WorkerHello) -> list[str]:
    with pytest.raises(InvalidArgument) as ei:
        validate_hello(h)
    return [v.field for v in ei.value.violations]


@pytest.mark.parametrize(
    ("raw", "ns"),
    [("", "default"), ("default", "default"), ("namespaces/alice", "alice"), ("alice", "alice")],
)
def test_namespace_forms_the_sdk_and_clients_send_are_accepted(raw, ns):
    assert validate_hello(hello(namespace=raw)).namespace == ns


@pytest.mark.parametrize("raw", ["x/y/alice", "namespaces/alice/x", "namespaces/", "Alice", "a\x00b", "-a"])
def test_bad_namespaces_are_refused(raw):
    assert fields(hello(namespace=raw)) == ["hello.namespace"]


def test_queue_count_and_names():
    assert validate_hello(hello(queues=[f"q{i}" for i in range(MAX_HELLO_QUEUES)])).queues[-1] == "q99"
    assert fields(hello(queues=[f"q{i}" for i in range(MAX_HELLO_QUEUES + 1)])) == ["hello.queues"]
    assert fields(hello(queues=[])) == ["hello.queues"]
    assert fields(hello(queues=["a", "b", "c", "x\x00y"])) == ["hello.queues[3]"]
    assert fields(hello(queues=["ok", "UPPER", "a b"])) == ["hello.queues[1]", "hello.queues[2]"]
    many = fields(hello(queues=["BAD"] * 50))
    assert len(many) == 11 and many[-1] == "hello.queues"
    assert validate_hello(hello(queues=["a", "b", "a"])).queues == ["a", "b"]


def test_worker_id_bounds():
    assert fields(hello(worker_id="")) == ["hello.worker_id"]
    assert fields(hello(worker_id="w\nforged")) == ["hello.worker_id"]
    assert fields(hello(worker_id="w\x00")) == ["hello.worker_id"]
    assert fields(hello(worker_id="w" * (MAX_WORKER_ID_CHARS + 1))) == ["hello.worker_id"]
    assert validate_hello(hello(worker_id="w" * MAX_WORKER_ID_CHARS)).worker_id == "w" * MAX_WORKER_ID_CHARS


def test_credits_bounds():
    assert fields(hello(credits=0)) == ["hello.credits"]
    assert fields(hello(credits=10_001)) == ["hello.credits"]
    assert validate_hello(hello(credits=10_000)).credits == 10_000


def test_every_bad_field_is_reported_and_echoes_are_cut():
    with pytest.raises(InvalidArgument) as ei:
        validate_hello(wpb.WorkerHello(worker_id="", namespace="x/" * 1000, queues=["\n" * 1000], credits=0))
    assert [v.field for v in ei.value.violations] == [
        "hello.worker_id",
        "hello.namespace",
        "hello.queues[0]",
        "hello.credits",
    ]
    assert len(ei.value.message) < 600
    assert "\n" not in ei.value.message


def test_clip():
    assert clip("a\nb") == "'a\\nb'"
    assert clip("x" * 100) == repr("x" * 64 + "...")


def test_attempt_key():
    jid = uuid.uuid4()
    k = attempt_key(
        wpb.AttemptRef(job=f"namespaces/default/jobs/{jid}", attempt=2, version=3, fencing_token=4)
    )
    assert k is not None and (k.job_id, k.attempt, k.version, k.token) == (jid, 2, 3, 4)
    for job in [f"x/y/jobs/{jid}", f"namespaces/default/jobs/{jid}/x", "namespaces/default/jobs/nope", ""]:
        assert attempt_key(wpb.AttemptRef(job=job, attempt=1)) is None
    assert attempt_key(wpb.AttemptRef(job=f"namespaces/default/jobs/{jid}", attempt=0)) is None


def test_attempt_key_parses_each_job_name_once_and_keeps_refusing_bad_ones():
    """The job-name parse behind attempt_key is cached (hot path): the same name gives the same id,
    a malformed name stays refused, and version/token/attempt still come from each reference."""
    from gnomon.dispatcher.hello import _job_id

    jid = uuid.uuid4()
    name = f"namespaces/default/jobs/{jid}"
    before = _job_id.cache_info().hits
    a = attempt_key(wpb.AttemptRef(job=name, attempt=1, version=2, fencing_token=3))
    b = attempt_key(wpb.AttemptRef(job=name, attempt=2, version=5, fencing_token=7))
    assert a is not None and b is not None
    assert (a.job_id, a.attempt, a.version, a.token) == (jid, 1, 2, 3)
    assert (b.job_id, b.attempt, b.version, b.token) == (jid, 2, 5, 7)
    assert _job_id.cache_info().hits >= before + 1
    for _ in range(2):
        assert attempt_key(wpb.AttemptRef(job="namespaces/default/jobs/not-a-uuid", attempt=1)) is None


def test_attempt_key_uses_the_job_id_bytes_and_falls_back_to_the_name():
    """job_id (16 bytes) names the job without parsing ``job``; without it the name is parsed (workers
    of earlier releases); a job_id of another length is malformed whatever the name."""
    jid = uuid.uuid4()
    name = f"namespaces/default/jobs/{jid}"
    k = attempt_key(
        wpb.AttemptRef(job="unparseable", job_id=jid.bytes, attempt=2, version=3, fencing_token=4)
    )
    assert k is not None and (k.job_id, k.attempt, k.version, k.token) == (jid, 2, 3, 4)
    assert isinstance(k.job_id, uuid.UUID) and hash(k.job_id) == hash(jid) and str(k.job_id) == str(jid)
    old = attempt_key(wpb.AttemptRef(job=name, attempt=2, version=3, fencing_token=4))
    assert old == k
    for raw in (jid.bytes[:15], jid.bytes + b"\0", b"\0"):
        assert attempt_key(wpb.AttemptRef(job=name, job_id=raw, attempt=1)) is None
    assert attempt_key(wpb.AttemptRef(job_id=jid.bytes, attempt=0)) is None
