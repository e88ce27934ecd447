"""``gnomon.v1.DeadLetterService``: a thin gRPC adapter over the dead-letter engine
(:class:`gnomon.api.dead_letters.DeadLetterEngine`).

Here: who is calling (the authenticated principal and the gRPC peer, for the audit log, set by
:mod:`gnomon.common.rpc.auth`, which also checked the caller may act on the namespace), validation (every rule a field violation, all reported at once, nothing
written on bad input), proto <-> row conversion and page tokens. The replay itself (pacing,
idempotency, batches, audit) lives in the storage module the engine calls.

Limits (also in docs/api.md): ``queue`` as in CreateJob; ``failure_class`` a ``gnomon.v1.FailureClass``
value (UNSPECIFIED: any); ``error_contains`` at most 1000 characters; ``start_time``/``end_time`` in
1970..9999 and ``start_time < end_time``; ``page_size`` 0-1000 (0 = 100); ``max_rate``
0.001 <= r <= 1000 jobs/s; ``max_jobs`` 1-100000; ``reason`` 1-1000 characters, not blank;
``request_id`` a canonical UUID.
"""

from __future__ import annotations

import math
import uuid
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon._proto.gnomon.v1 import dead_letter_service_pb2 as pb
from gnomon._proto.gnomon.v1 import dead_letter_service_pb2_grpc as pb_grpc
from gnomon.api.convert import job_to_proto
from gnomon.api.dead_letters import DeadLetterEngine
from gnomon.api.list_gate import ListGate
from gnomon.api.validation import request_fingerprint
from gnomon.common import pagination
from gnomon.common.auth.principals import ALL
from gnomon.common.config import REPLY_BUDGET_BYTES
from gnomon.common.coordination.hints import DispatcherHints
from gnomon.common.domain.dead_letters import DeadLetterFilter, ReplayRequest
from gnomon.common.errors import InvalidArgument, Validator
from gnomon.common.failure_wire import failure_class_filter, failure_class_to_wire
from gnomon.common.names import QUEUE_RE, audit_entry_name, job_name, parse_parent
from gnomon.common.rpc.admission import current_admit
from gnomon.common.rpc.auth import CLUSTER_PARENT, current_caller
from gnomon.common.timeconv import check_timestamp, to_timestamp

MAX_RATE = 1000.0
#: Slowest replay pacing, jobs/s: the paced schedule times of MAX_JOBS jobs stay within ~3.2 years.
MIN_RATE = 0.001
MAX_JOBS = 100_000
MAX_REASON = 1000
MAX_ERROR_CONTAINS = 1000
MAX_ACTOR = 200


_timestamp = check_timestamp  # the one conversion of a client Timestamp (gnomon.common.timeconv)


def validate_filter(v: Validator, namespace: str, req) -> DeadLetterFilter:
    """The filter fields shared by ListDeadLetters and ReplayDeadLetters."""
    if req.queue:
        v.check(
            bool(QUEUE_RE.fullmatch(req.queue)),
            "queue",
            "must be 1-64 characters of [a-z0-9._-], starting with a letter or digit",
        )
    failure_class = None
    try:
        failure_class = failure_class_filter(req.failure_class)
    except ValueError:
        v.add("failure_class", "must be a gnomon.v1.FailureClass value (0, UNSPECIFIED, means any class)")
    v.check(
        len(req.error_contains) <= MAX_ERROR_CONTAINS,
        "error_contains",
        f"must be at most {MAX_ERROR_CONTAINS} characters",
    )
    start = _timestamp(v, req.start_time, "start_time") if req.HasField("start_time") else None
    end = _timestamp(v, req.end_time, "end_time") if req.HasField("end_time") else None
    if start is not None and end is not None and end <= start:
        v.add("end_time", "must be after start_time")
    return DeadLetterFilter(
        namespace=namespace,
        queue=req.queue or None,
        failure_class=failure_class,
        error_contains=req.error_contains or None,
        start_time=start,
        end_time=end,
    )


def _keyset(v: Validator, token: str, method: str, filt: str) -> tuple[datetime, uuid.UUID] | None:
    cursor = pagination.decode_into(v, token, method, filt)
    if cursor is None:
        return None
    try:
        return pagination.keyset_of(cursor, method)
    except InvalidArgument as e:
        v.violations += e.violations
        return None


def validate_replay(req: pb.ReplayDeadLettersRequest, namespace: str, context) -> ReplayRequest:
    """Checks every field; raises :class:`InvalidArgument` listing all violations (nothing is written)."""
    v = Validator()
    f = validate_filter(v, namespace, req)
    v.check(
        not math.isnan(req.max_rate) and MIN_RATE <= req.max_rate <= MAX_RATE,
        "max_rate",
        f"is required: jobs per second, from {MIN_RATE:g} to {MAX_RATE:g}",
    )
    v.check(1 <= req.max_jobs <= MAX_JOBS, "max_jobs", f"is required: 1 to {MAX_JOBS}")
    if not req.reason.strip():
        v.add("reason", "is required: why the dead letters are replayed (for the audit log)")
    else:
        v.check(len(req.reason) <= MAX_REASON, "reason", f"must be at most {MAX_REASON} characters")
    request_id = None
    try:
        request_id = uuid.UUID(req.request_id)
        if str(request_id) != req.request_id.lower():
            raise ValueError
    except ValueError:
        v.add("request_id", "is required: a UUID in its canonical 8-4-4-4-12 form (AIP-155)")
    v.raise_if_any()
    assert request_id is not None  # None only with a violation, raised above
    who = current_caller(context)
    return ReplayRequest(
        filter=f,
        max_rate=req.max_rate,
        max_jobs=req.max_jobs,
        dry_run=req.dry_run,
        reason=req.reason,
        request_id=request_id,
        request_hash=request_fingerprint(req, "parent", "reason", "request_id"),
        actor=who.actor,
        audit_extra={"peer": who.peer, "principal_kind": who.principal.kind.value},
    )


def attempt_to_proto(a: dict) -> pb.DeadLetterAttempt:
    """An ``attempts`` row -> ``gnomon.v1.DeadLetterAttempt``."""
    m = pb.DeadLetterAttempt(
        attempt=a["attempt"],
        state=a["state"],
        failure_class=failure_class_to_wire(a["failure_class"]),
        error=a["error"] or "",
        worker_id=a["worker_id"] or "",
        fencing_token=a["token"],
    )
    for field, col in (
        ("claim_time", "claimed_at"),
        ("start_time", "accepted_at"),
        ("finish_time", "finished_at"),
    ):
        if a[col] is not None:
            getattr(m, field).CopyFrom(to_timestamp(a[col]))
    return m


def dead_letter_to_proto(row: dict, atts: list[dict]) -> pb.DeadLetter:
    """A dead ``jobs`` row and its recent attempts -> ``gnomon.v1.DeadLetter``."""
    ns = row["namespace"]
    return pb.DeadLetter(
        job=job_to_proto(row),
        attempts=[attempt_to_proto(a) for a in atts],
        replay_of=job_name(ns, row["replay_of"]) if row["replay_of"] else "",
        replayed_by=job_name(ns, row["replayed_by"]) if row["replayed_by"] else "",
    )


def audit_to_proto(row: dict) -> pb.AuditEntry:
    """An ``audit_log`` row -> ``gnomon.v1.AuditEntry``."""
    return pb.AuditEntry(
        name=audit_entry_name(row["namespace"], row["id"]),
        create_time=to_timestamp(row["created_at"]),
        actor=row["actor"],
        action=row["action"],
        reason=row["reason"],
        request_id=str(row["request_id"]) if row["request_id"] else "",
        details=row["details"],
        resource=row.get("resource") or "",
        outcome=row.get("outcome") or "",
        peer=row.get("peer") or "",
        count=row.get("count") or 1,
    )


class DeadLetterServicer(pb_grpc.DeadLetterServiceServicer):
    """``gnomon.v1.DeadLetterService`` over the dead-letter engine ``dead_letters`` (built by
    :func:`gnomon.api.service.build`, or by :meth:`on`). The caller's grants are checked by the
    authorization interceptor before any handler runs (PERMISSION_DENIED, NAMESPACE_NOT_ALLOWED), and
    the interceptor binds the replay's job admission to the call
    (:func:`gnomon.common.rpc.admission.current_admit`)."""

    def __init__(
        self,
        dead_letters: DeadLetterEngine,
        *,
        reply_budget_bytes: int = REPLY_BUDGET_BYTES,
        list_gate: ListGate | None = None,
    ):
        self.dead_letters = dead_letters
        #: per-principal turns of ListDeadLetters (shared with ListJobs)
        self.list_gate = list_gate or ListGate()
        #: most serialized bytes of a List reply's items (``GNOMON_REPLY_BUDGET_BYTES``)
        self.reply_budget_bytes = reply_budget_bytes

    @classmethod
    def on(
        cls, engine: AsyncEngine, *, shards: int, hints: DispatcherHints | None = None
    ) -> DeadLetterServicer:
        """A servicer over a new :class:`DeadLetterEngine` on ``engine``: ``shards`` is the region's
        shard count (new jobs get a shard); ``hints`` (None: none) wakes dispatchers after a replay."""
        wake = hints.wake if hints is not None else None
        return cls(DeadLetterEngine(engine, shards=shards, wake_dispatchers=wake))

    async def ListDeadLetters(self, request, context):
        """Dead jobs of ``parent`` matching the filter, newest death first, each with its recent
        attempts; ``page_size`` 0-1000 (0 = 100); payloads are read only for the dead letters within
        the reply's byte budget (the page then ends early with a token); a turn of the caller's
        listings (``list_gate``) is held meanwhile (UNAVAILABLE LISTINGS_BUSY after waiting too long).
        INVALID_ARGUMENT lists every bad field at once."""
        ns = parse_parent(request.parent)
        v = Validator()
        f = validate_filter(v, ns, request)
        size = pagination.page_size(v, request.page_size)
        filt = pagination.fingerprint(
            f.namespace,
            f.queue,
            f.failure_class,
            f.error_contains,
            f.start_time,
            f.end_time,
            request.include_replayed,
        )
        after = _keyset(v, request.page_token, "ListDeadLetters", filt)
        v.raise_if_any()
        async with self.list_gate.turn(current_caller().principal.name):
            rows, atts, fits = await self.dead_letters.list_dead_letters(
                f,
                include_replayed=request.include_replayed,
                limit=size + 1,
                after=after,
                budget_bytes=self.reply_budget_bytes,
            )
            items, token = pagination.budgeted_page(
                rows,
                fits,
                "ListDeadLetters",
                filt,
                lambda r: pagination.keyset(r["finished_at"], r["id"]),
                lambda r: dead_letter_to_proto(r, atts.get(r["id"], [])),
                budget_bytes=self.reply_budget_bytes,
            )
        return pb.ListDeadLettersResponse(dead_letters=items, next_page_token=token)

    async def ReplayDeadLetters(self, request, context):
        """Re-creates matching dead jobs as new jobs (paced at ``max_rate`` jobs/s, at most
        ``max_jobs``; ``dry_run`` only counts), audited with the caller and ``reason``; idempotent per
        ``request_id``. INVALID_ARGUMENT for bad fields; ALREADY_EXISTS for a reused request id with
        another request; RESOURCE_EXHAUSTED (QUOTA_EXCEEDED) when pending jobs plus the jobs the
        replay would write (min(matching dead letters, ``max_jobs``), counted in its first
        transaction, once, as the policy table's ``Admission.REPLAY`` says, through the admission the
        interceptor bound) would exceed the namespace's ``max_pending_jobs`` (not for a dry run, nor
        for a repeat of a known ``request_id``): nothing is written and the refusal is audited. An
        error is never answered for a replay that wrote jobs: nothing is admitted after the write."""
        ns = parse_parent(request.parent)
        req = validate_replay(request, ns, context)
        out = await self.dead_letters.replay(req, admit=current_admit())
        return pb.ReplayDeadLettersResponse(
            matched_count=out.matched,
            replayed_count=out.replayed,
            replayed_jobs=out.job_names,
            dry_run=out.dry_run,
        )

    async def ListAuditEntries(self, request, context):
        """Audit entries of ``parent``, newest first; ``page_size`` 0-1000 (0 = 100). ``parent``
        ``namespaces/*``: the cluster-wide entries (namespace ``*``: principals, keys, namespaces,
        grants in ``*``, the bootstrap), which the interceptor admits only with ``audit.read`` in
        ``*``. INVALID_ARGUMENT for a bad parent, page size or token."""
        ns = ALL if request.parent == CLUSTER_PARENT else parse_parent(request.parent)
        v = Validator()
        size = pagination.page_size(v, request.page_size)
        filt = pagination.fingerprint(ns)
        after = _keyset(v, request.page_token, "ListAuditEntries", filt)
        v.raise_if_any()
        rows = await self.dead_letters.audit_entries(ns, limit=size + 1, after=after)
        items, token = pagination.budgeted_page(
            rows,
            size,
            "ListAuditEntries",
            filt,
            lambda r: pagination.keyset(r["created_at"], r["id"]),
            audit_to_proto,
            budget_bytes=self.reply_budget_bytes,
        )
        return pb.ListAuditEntriesResponse(audit_entries=items, next_page_token=token)


__all__ = ["DeadLetterServicer", "validate_replay", "validate_filter"]
