"""Admission of worker streams: whether this dispatcher opens a validated, authorized hello's stream.

Checked in this order, all before the stream is registered (so before any claim work for its
queues), all counted on this dispatcher process only (each dispatcher enforces them on the streams
it holds; docs/security.md):

1. the dispatcher-wide cap ``GNOMON_DISPATCHER_MAX_STREAMS`` (:func:`refuse_if_full`, also before the
   hello is read): RESOURCE_EXHAUSTED, QUOTA_EXCEEDED, quota ``dispatcher_streams``, RetryInfo 5 s;
2. fair share of that cap (:func:`fair_share`): once the streams open reach
   ``GNOMON_STREAM_QUOTA_FAIR_SHARE_FROM`` of the cap, a namespace may add a stream only while it holds
   fewer than ``cap // (namespaces holding streams, its own included, + 1)``; the ``+ 1`` keeps room
   for a namespace not connected yet, so one tenant cannot take the whole cap and a new namespace's
   first streams are still admitted. RESOURCE_EXHAUSTED, STREAM_FAIR_SHARE, RetryInfo 5 s;
3. the namespace's stream quotas (:func:`gnomon.common.quotas.check_hello_quota`), each defaulting to
   ``GNOMON_STREAM_QUOTA_*`` when the namespace does not set it. RESOURCE_EXHAUSTED, QUOTA_EXCEEDED.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.errors import QuotaExceeded
from gnomon.common.quotas import Quota, Quotas, StreamUsage, check_hello_quota
from gnomon.common.stream_quota_settings import StreamQuotaSettings
from gnomon.dispatcher.hello import Hello
from gnomon.dispatcher.sessions import SessionRegistry

#: RetryInfo of a refusal by the dispatcher-wide cap or its fair share, seconds.
FULL_RETRY_S = 5.0


def refuse_if_full(registry: SessionRegistry, max_streams: int) -> None:
    """Raises :class:`QuotaExceeded` (quota ``dispatcher_streams``, namespace ``*``, RetryInfo 5 s)
    when ``registry`` already holds ``max_streams`` streams. Performs no I/O."""
    if len(registry.sessions) >= max_streams:
        raise QuotaExceeded(
            f"this dispatcher holds its maximum of {max_streams} worker streams; connect to another",
            quota=Quota.DISPATCHER_STREAMS,
            limit=max_streams,
            namespace="*",
            retry_after_s=FULL_RETRY_S,
        )


def fair_share(registry: SessionRegistry, namespace: str, max_streams: int) -> int:
    """The most streams ``namespace`` may hold once the cap is nearly used: ``max_streams // (n + 1)``
    where ``n`` counts the namespaces holding streams on this dispatcher plus ``namespace`` if it holds
    none (at least 1)."""
    n = len(registry.ns_streams) + (0 if namespace in registry.ns_streams else 1)
    return max(1, max_streams // (n + 1))


def admit(
    registry: SessionRegistry,
    hello: Hello,
    principal: str,
    quotas: Quotas,
    defaults: StreamQuotaSettings,
    max_streams: int,
) -> None:
    """Admits or refuses a new stream of ``principal`` for the validated, authorized ``hello``, given
    the namespace's ``quotas`` (an unset stream quota takes its value from ``defaults``), the
    dispatcher-wide cap ``max_streams`` and ``defaults.fair_share_from`` (0 < f <= 1), the fraction of
    the cap past which streams are shared fairly. Returns None to admit;
    raises :class:`QuotaExceeded` (RESOURCE_EXHAUSTED; reason QUOTA_EXCEEDED or STREAM_FAIR_SHARE, see
    the module). Performs no I/O and does not await: the caller registers the stream right after, in
    the same step of the event loop, so no other hello can slip in between."""
    refuse_if_full(registry, max_streams)
    ns = hello.namespace
    held = registry.ns_streams.get(ns, 0)
    if len(registry.sessions) >= math.ceil(max_streams * defaults.fair_share_from):
        share = fair_share(registry, ns, max_streams)
        if held >= share:
            raise QuotaExceeded(
                f"this dispatcher's worker streams are nearly all taken ({len(registry.sessions)} of "
                f"{max_streams}) and namespace {ns!r} holds {held}, its fair share of {share}; "
                f"retry later or connect to another dispatcher",
                quota=Quota.DISPATCHER_FAIR_SHARE,
                limit=share,
                namespace=ns,
                retry_after_s=FULL_RETRY_S,
                extra={"streams": str(held)},
                reason=ErrorReason.STREAM_FAIR_SHARE,
            )
    who = (ns, principal)
    mine: Mapping[str, int] = registry.principal_queues.get(who, {})
    theirs: Mapping[str, int] = registry.ns_queues.get(ns, {})
    usage = StreamUsage(
        streams=held + 1,
        principal_streams=registry.principal_streams.get(who, 0) + 1,
        hello_queues=len(hello.queues),
        principal_queues=len(mine) + sum(1 for q in hello.queues if q not in mine),
        namespace_queues=len(theirs) + sum(1 for q in hello.queues if q not in theirs),
    )
    check_hello_quota(ns, principal, quotas.with_defaults(defaults), usage)
