"""Admission of worker streams without I/O (:mod:`gnomon.dispatcher.admission`): the registry's
counts follow every add and remove, the namespace's stream quotas are checked against them, and
the dispatcher-wide cap is shared fairly by namespace once it is nearly used."""

from __future__ import annotations

import pytest

from gnomon.common.errors import QuotaExceeded
from gnomon.common.quotas import UNLIMITED, Quotas
from gnomon.common.stream_quota_settings import StreamQuotaSettings
from gnomon.dispatcher.admission import admit, fair_share
from gnomon.dispatcher.hello import Hello
from gnomon.dispatcher.sessions import SessionRegistry

DEFAULTS = StreamQuotaSettings.model_construct(
    max_worker_streams=1000, max_worker_streams_per_principal=1000, max_streamed_queues=1000
)


def _open(reg: SessionRegistry, ns: str, who: str, queues=("q",), quotas=UNLIMITED, cap=20, d=DEFAULTS):
    h = Hello("w", ns, list(queues), 1)
    admit(reg, h, who, quotas, d, cap)
    return reg.add(h.worker_id, ns, h.queues, 1, owner=who)


def test_registry_counts_follow_add_and_remove():
    reg = SessionRegistry()
    a = _open(reg, "ns", "p", ("a", "b"))
    b = _open(reg, "ns", "p", ("b", "c"))
    c = _open(reg, "ns", "r", ("d",))
    assert reg.ns_streams == {"ns": 3} and reg.principal_streams == {("ns", "p"): 2, ("ns", "r"): 1}
    assert set(reg.ns_queues["ns"]) == {"a", "b", "c", "d"} and set(reg.principal_queues[("ns", "p")]) == {
        "a",
        "b",
        "c",
    }
    reg.remove(a)
    reg.remove(a)  # twice changes nothing
    assert set(reg.principal_queues[("ns", "p")]) == {"b", "c"} and reg.ns_streams == {"ns": 2}
    reg.remove(b)
    reg.remove(c)
    assert (reg.ns_streams, reg.principal_streams, reg.ns_queues, reg.principal_queues) == ({}, {}, {}, {})


def test_default_quotas_apply_to_a_namespace_that_sets_none():
    reg = SessionRegistry()
    d = StreamQuotaSettings.model_construct(max_worker_streams_per_principal=2, max_streamed_queues=3)
    _open(reg, "ns", "p", ("a",), d=d, cap=100)
    _open(reg, "ns", "p", ("a",), d=d, cap=100)
    with pytest.raises(QuotaExceeded) as e:
        _open(reg, "ns", "p", ("a",), d=d, cap=100)
    assert (e.value.metadata["quota"], e.value.metadata["limit"]) == ("max_worker_streams_per_principal", "2")
    _open(reg, "ns", "r", ("b", "c"), d=d, cap=100)  # another principal: 3 distinct queues
    with pytest.raises(QuotaExceeded) as e:
        _open(reg, "ns", "r", ("x",), d=d, cap=100)
    assert e.value.metadata["quota"] == "max_streamed_queues"
    # a namespace's own quota overrides the default
    _open(reg, "ns", "p", ("a",), quotas=Quotas(max_worker_streams_per_principal=3), d=d, cap=100)


def test_one_namespace_cannot_take_the_dispatcher_cap():
    reg = SessionRegistry()
    d = StreamQuotaSettings.model_construct(
        max_worker_streams=1000, max_worker_streams_per_principal=1000, fair_share_from=0.8
    )
    for _ in range(16):  # free up to 80 % of 20
        _open(reg, "evil", "e", d=d)
    with pytest.raises(QuotaExceeded) as e:
        _open(reg, "evil", "e", d=d)
    assert (e.value.reason, e.value.metadata["limit"], e.value.metadata["streams"]) == (
        "STREAM_FAIR_SHARE",
        "10",
        "16",
    )
    assert fair_share(reg, "acme", 20) == 6  # 20 // (evil + acme + a newcomer)
    for _ in range(4):  # acme gets the rest of the cap
        _open(reg, "acme", "a", d=d)
    with pytest.raises(QuotaExceeded) as e:
        _open(reg, "acme", "a", d=d)
    assert (e.value.reason, e.value.metadata["quota"]) == ("QUOTA_EXCEEDED", "dispatcher_streams")
