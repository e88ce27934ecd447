"""Validation of create and reschedule requests: every rule is a field violation, all reported at once.

Limits (also in docs/api.md): queue 1-64 chars of ``[a-z0-9._-]`` starting with a letter or digit;
payload at most :data:`MAX_PAYLOAD_BYTES` (256 KiB), empty allowed; ``schedule_time`` between
1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z; ``delay`` in [0, 100 years]; at most one of the two;
``deadline`` in range and after the schedule time; ``max_attempts`` 1-100 (default 3); ``request_id``
a UUID (AIP-155); ``idempotency_key`` 1-255 printable ASCII; ``lease_duration`` 1 s - 1 h (default 30 s);
``retry_policy`` see :func:`validate_retry_policy`.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from google.protobuf.message import Message

from gnomon._proto.gnomon.v1 import job_service_pb2
from gnomon.common.domain.jobs import NewJob, shard_of
from gnomon.common.errors import FieldViolation, InvalidArgument, Validator
from gnomon.common.names import QUEUE_RE, namespace_name, parse_job_name, parse_parent
from gnomon.common.retry import DEFAULT_POLICY, RetryPolicy
from gnomon.common.timeconv import (
    MAX_TIMESTAMP_SECONDS,
    MIN_TIMESTAMP_SECONDS,
    check_duration,
    check_timestamp,
)

MAX_PAYLOAD_BYTES = 256 * 1024
MIN_SECONDS = MIN_TIMESTAMP_SECONDS  # 1970-01-01T00:00:00Z
MAX_SECONDS = MAX_TIMESTAMP_SECONDS  # 9999-12-31T23:59:59Z
MAX_DELAY = timedelta(days=36500)
DEFAULT_MAX_ATTEMPTS = 3
MAX_MAX_ATTEMPTS = 100
DEFAULT_LEASE = timedelta(seconds=30)
PRINTABLE_RE = re.compile(r"^[\x21-\x7e]{1,255}$")


_timestamp = check_timestamp  # the one conversion of a client Timestamp (gnomon.common.timeconv)
_duration = check_duration  # the one conversion of a client Duration (gnomon.common.timeconv)


def _schedule(v: Validator, req) -> tuple[datetime | None, timedelta | None]:
    """``schedule_time`` / ``delay`` of a create or reschedule request: at most one (else a
    violation on ``delay``), each in range. Returns ``(schedule_at, delay)``; ``None`` when unset
    or invalid."""
    has_time, has_delay = req.HasField("schedule_time"), req.HasField("delay")
    schedule_at = delay = None
    if has_time and has_delay:
        v.add("delay", "give at most one of schedule_time and delay")
    if has_time:
        schedule_at = _timestamp(v, req.schedule_time, "schedule_time")
    if has_delay:
        delay = _duration(v, req.delay, "delay", timedelta(0), MAX_DELAY)
    return schedule_at, delay


def request_fingerprint(req: Message, *clear: str) -> str:
    """sha256 (64 hex digits) of the deterministic serialization of the request message ``req`` with
    the fields named in ``clear`` cleared (``req`` itself is not changed): same request, same hash.
    The ``request_hash`` stored with a request id (AIP-155) to tell a retry from another request."""
    if clear:
        copy = type(req)()
        copy.CopyFrom(req)
        for name in clear:
            copy.ClearField(name)
        req = copy
    return hashlib.sha256(req.SerializeToString(deterministic=True)).hexdigest()


@dataclass(frozen=True)
class JobFields:
    """The validated fields a job and a schedule's job template share (defaults filled in)."""

    queue: str
    payload: bytes
    max_attempts: int
    lease: timedelta
    retry: RetryPolicy
    start_to_close: timedelta | None


def job_fields(v: Validator, msg, prefix: str = "") -> JobFields:
    """Checks ``queue``, ``payload``, ``max_attempts``, ``lease_duration``, ``retry_policy`` and
    ``start_to_close`` of a CreateJobRequest or JobTemplate (violations named ``{prefix}field``,
    limits in the module docstring). A returned value is meaningless when violations were added."""
    if not msg.queue:
        v.add(f"{prefix}queue", "is required")
    else:
        v.check(
            bool(QUEUE_RE.fullmatch(msg.queue)),
            f"{prefix}queue",
            "must be 1-64 characters of [a-z0-9._-], starting with a letter or digit",
        )
    v.check(
        len(msg.payload) <= MAX_PAYLOAD_BYTES,
        f"{prefix}payload",
        f"is {len(msg.payload)} bytes; the limit is {MAX_PAYLOAD_BYTES} bytes (256 KiB)",
    )
    max_attempts = DEFAULT_MAX_ATTEMPTS
    if msg.HasField("max_attempts"):
        if v.check(
            1 <= msg.max_attempts <= MAX_MAX_ATTEMPTS,
            f"{prefix}max_attempts",
            f"must be between 1 and {MAX_MAX_ATTEMPTS}",
        ):
            max_attempts = msg.max_attempts
    lease = DEFAULT_LEASE
    if msg.HasField("lease_duration"):
        lease = (
            _duration(
                v, msg.lease_duration, f"{prefix}lease_duration", timedelta(seconds=1), timedelta(hours=1)
            )
            or lease
        )
    retry = (
        validate_retry_policy(v, msg.retry_policy, f"{prefix}retry_policy")
        if msg.HasField("retry_policy")
        else DEFAULT_POLICY
    )
    start_to_close = None
    if msg.HasField("start_to_close"):
        start_to_close = _duration(
            v, msg.start_to_close, f"{prefix}start_to_close", timedelta(seconds=1), timedelta(days=7)
        )
    return JobFields(msg.queue, bytes(msg.payload), max_attempts, lease, retry, start_to_close)


def validate_create(req: job_service_pb2.CreateJobRequest, *, region: str, shards: int) -> NewJob:
    """Checks every field of ``req`` and returns the :class:`NewJob` to insert.

    Raises :class:`InvalidArgument` listing all violations (nothing is written).
    """
    v = Validator()
    try:
        namespace = parse_parent(req.parent)
    except InvalidArgument as e:
        v.violations += e.violations
        namespace = ""
    f = job_fields(v, req)
    schedule_at, delay = _schedule(v, req)
    deadline = None
    if req.HasField("deadline"):
        deadline = _timestamp(v, req.deadline, "deadline")
        if deadline and schedule_at and deadline <= schedule_at:
            v.add("deadline", "must be after schedule_time")
    request_id = None
    if req.request_id:
        try:
            request_id = uuid.UUID(req.request_id)
            if str(request_id) != req.request_id.lower():
                raise ValueError
        except ValueError:
            v.add("request_id", "must be a UUID in its canonical 8-4-4-4-12 form (AIP-155)")
    if req.idempotency_key:
        v.check(
            bool(PRINTABLE_RE.fullmatch(req.idempotency_key)),
            "idempotency_key",
            "must be 1-255 printable ASCII characters without spaces",
        )
    v.raise_if_any()
    job_id = uuid.uuid4()
    return NewJob(
        id=job_id,
        namespace=namespace,
        region=region,
        shard=shard_of(job_id, shards),
        queue=f.queue,
        payload=f.payload,
        schedule_at=schedule_at,
        delay=delay,
        deadline=deadline,
        max_attempts=f.max_attempts,
        idempotency_key=req.idempotency_key or str(job_id),
        lease=f.lease,
        request_id=request_id,
        request_hash=request_fingerprint(req) if request_id else None,
        idempotent=req.idempotent,
        retry=f.retry,
        start_to_close=f.start_to_close,
    )


MAX_BACKOFF = timedelta(days=1)
MAX_AGE = timedelta(days=365)
MAX_NON_RETRYABLE = 32
ERROR_TYPE_RE = re.compile(r"^[\x21-\x39\x3b-\x7e]{1,128}$")  # printable ASCII, no space, no ':'


def validate_retry_policy(v: Validator, msg, field: str = "retry_policy") -> RetryPolicy:
    """Checks a ``gnomon.v1.RetryPolicy`` (violations named ``retry_policy.<field>``) and returns it
    with the defaults filled in (:data:`gnomon.common.retry.DEFAULT_POLICY`): ``initial_backoff``
    0 .. ``max_backoff``; ``max_backoff`` > 0 and <= 1 day; ``multiplier`` 1-10 (0 = unset);
    ``jitter`` 0-1; ``max_age`` 1 ms - 365 days; at most 32 ``non_retryable_errors`` of 1-128
    printable ASCII characters without spaces or ':'. A returned value is meaningless when
    violations were added."""
    d = DEFAULT_POLICY
    initial, maximum = d.initial_s, d.max_s
    if msg.HasField("max_backoff"):
        mb = _duration(v, msg.max_backoff, f"{field}.max_backoff", timedelta(milliseconds=1), MAX_BACKOFF)
        maximum = mb.total_seconds() if mb is not None else maximum
    if msg.HasField("initial_backoff"):
        ib = _duration(v, msg.initial_backoff, f"{field}.initial_backoff", timedelta(0), MAX_BACKOFF)
        if ib is not None:
            initial = ib.total_seconds()
            v.check(
                initial <= maximum,
                f"{field}.initial_backoff",
                f"must not exceed max_backoff ({maximum:g} s{'' if msg.HasField('max_backoff') else ' when unset'})",
            )
    multiplier = d.multiplier
    if msg.multiplier != 0:
        if v.check(
            1.0 <= msg.multiplier <= 10.0, f"{field}.multiplier", "must be between 1 and 10 (0 = default 2)"
        ):
            multiplier = msg.multiplier
    jitter = d.jitter
    if msg.HasField("jitter"):
        if v.check(0.0 <= msg.jitter <= 1.0, f"{field}.jitter", "must be between 0 and 1"):
            jitter = msg.jitter
    max_age = None
    if msg.HasField("max_age"):
        ma = _duration(v, msg.max_age, f"{field}.max_age", timedelta(milliseconds=1), MAX_AGE)
        max_age = ma.total_seconds() if ma is not None else None
    names = list(msg.non_retryable_errors)
    if len(names) > MAX_NON_RETRYABLE:
        v.add(f"{field}.non_retryable_errors", f"at most {MAX_NON_RETRYABLE} names; got {len(names)}")
    for i, n in enumerate(names[:MAX_NON_RETRYABLE]):
        v.check(
            bool(ERROR_TYPE_RE.fullmatch(n)),
            f"{field}.non_retryable_errors[{i}]",
            "must be 1-128 printable ASCII characters without spaces or ':' (an error type name)",
        )
    return RetryPolicy(
        initial_s=initial,
        max_s=maximum,
        multiplier=multiplier,
        jitter=jitter,
        max_age_s=max_age,
        non_retryable_errors=tuple(dict.fromkeys(names)),
    )


@dataclass(frozen=True)
class Reschedule:
    """A validated RescheduleJob request: ``schedule_at`` (UTC instant) or ``delay``, at most one;
    neither means now (database clock)."""

    namespace: str
    job_id: uuid.UUID
    schedule_at: datetime | None
    delay: timedelta | None
    expected_version: int | None


def validate_reschedule(req: job_service_pb2.RescheduleJobRequest) -> Reschedule:
    """Checks ``name``, ``schedule_time`` and ``delay`` with CreateJob's rules and messages
    (at most one of the two, reported on ``delay``; instants 1970-01-01 .. 9999-12-31; delay
    0 .. 100 years). The deadline check needs the job, so it is made by the storage layer.

    Raises :class:`InvalidArgument` listing all violations (nothing is written).
    """
    v = Validator()
    namespace, job_id = "", None
    try:
        namespace, job_id = parse_job_name(req.name)
    except InvalidArgument as e:
        v.violations += e.violations
    schedule_at, delay = _schedule(v, req)
    v.raise_if_any()
    assert job_id is not None  # None only with a violation, raised above
    return Reschedule(
        namespace=namespace,
        job_id=job_id,
        schedule_at=schedule_at,
        delay=delay,
        expected_version=req.expected_version if req.HasField("expected_version") else None,
    )


MAX_BATCH = 1000
#: Most payload bytes of one BatchCreateJobs request, all jobs together (3 MiB): the reply, which
#: echoes them, then fits gRPC's default 4 MiB receive limit.
MAX_BATCH_PAYLOAD_BYTES = 3 * 1024 * 1024


def validate_batch(parent: str, requests, *, region: str, shards: int) -> list[NewJob]:
    """Validates a BatchCreateJobs request; violations name ``requests[i].field``.

    Raises :class:`InvalidArgument` listing every violation of every request (nothing is written).
    """
    v = Validator()
    ns_parent = namespace_name(parse_parent(parent))
    if not (1 <= len(requests) <= MAX_BATCH):
        v.add("requests", f"give 1 to {MAX_BATCH} requests")
        v.raise_if_any()
    total = sum(len(r.payload) for r in requests)
    if total > MAX_BATCH_PAYLOAD_BYTES:
        # checked before the write: the reply echoes every payload and must still fit a client's
        # default 4 MiB receive limit, or the jobs would be created but the caller told it failed
        v.add("requests", f"payloads total {total} bytes; the limit is {MAX_BATCH_PAYLOAD_BYTES} (3 MiB)")
    out = []
    for i, r in enumerate(requests):
        if r.parent and r.parent != ns_parent:
            v.add(f"requests[{i}].parent", "must be empty or equal the batch parent")
        item = type(r)()
        item.CopyFrom(r)
        item.parent = ns_parent
        try:
            out.append(validate_create(item, region=region, shards=shards))
        except InvalidArgument as e:
            v.violations += [FieldViolation(f"requests[{i}].{x.field}", x.description) for x in e.violations]
    v.raise_if_any()
    return out
