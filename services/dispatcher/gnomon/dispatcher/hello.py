"""Validation of what a worker sends on the lease stream, at the edge: nothing reaches storage or the
session registry before it passed here.

Limits (also in ``proto/gnomon/v1/worker_service.proto`` and ``docs/api.md``):

* ``hello.worker_id``: 1-:data:`MAX_WORKER_ID_CHARS` printable characters (no NUL, newline or other
  control or non-printable character).
* ``hello.namespace``: ``namespaces/{namespace}`` or a bare namespace id (what the SDK sends); empty
  means ``default``. The id follows :data:`gnomon.common.names.NAMESPACE_RE`.
* ``hello.queues``: 1-:data:`MAX_HELLO_QUEUES` names, each matching
  :data:`gnomon.common.names.QUEUE_RE`.
* ``hello.credits``: 1-:data:`MAX_CREDITS`.

Values echoed in error text are cut to :data:`ECHO_CHARS` characters and escaped (:func:`clip`).
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.common import names
from gnomon.common.auth.principals import ALL, Principal
from gnomon.common.domain.attempts import AttemptKey
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.errors import FieldViolation, GnomonError, InvalidArgument, PermissionDenied

#: Most queues one hello may name.
MAX_HELLO_QUEUES = 100
#: Longest ``hello.worker_id``, characters.
MAX_WORKER_ID_CHARS = 128
#: Most credits a hello may grant (the session's initial credit count).
MAX_CREDITS = 10_000
#: Most attempt references (or results, or checkpoints) one stream message may carry; a message with
#: more ends the stream (INVALID_ARGUMENT, PROTOCOL_VIOLATION). The Python SDK sends at most 1000.
MAX_ITEMS_PER_MESSAGE = 1000
#: Longest client value echoed in an error message or a log line, characters (before escaping).
ECHO_CHARS = 64
#: Most field violations reported for one hello (the rest are summarised in one more).
_MAX_VIOLATIONS = 10


def clip(value: str, limit: int = ECHO_CHARS) -> str:
    """A client string safe to echo in error text or a log field: at most ``limit`` characters of it
    (then ``...``), escaped as a Python literal (``repr``), so a newline or NUL cannot forge a line."""
    return repr(value[:limit] + ("..." if len(value) > limit else ""))


@dataclass(frozen=True)
class Hello:
    """A validated hello: ``namespace`` is the bare id; ``queues`` deduplicated, in order."""

    worker_id: str
    namespace: str
    queues: list[str]
    credits: int


def _namespace(raw: str) -> str | None:
    if not raw:
        return names.DEFAULT_NAMESPACE
    if raw.startswith("namespaces/"):
        try:
            return names.parse_parent(raw, "hello.namespace")
        except InvalidArgument:
            return None
    return raw if names.NAMESPACE_RE.fullmatch(raw) else None


def validate_hello(h: wpb.WorkerHello) -> Hello:
    """Checks every field of a hello; returns it normalised.

    Raises :class:`InvalidArgument` (``INVALID_ARGUMENT``, reason ``INVALID_FIELD``) with one field
    violation per bad field (``hello.worker_id``, ``hello.namespace``, ``hello.queues``,
    ``hello.queues[i]``, ``hello.credits``; at most 10 plus a summary), echoing input cut by
    :func:`clip`. Performs no I/O."""
    v: list[FieldViolation] = []
    wid = h.worker_id
    if not wid:
        v.append(FieldViolation("hello.worker_id", "must not be empty"))
    elif len(wid) > MAX_WORKER_ID_CHARS:
        v.append(
            FieldViolation("hello.worker_id", f"at most {MAX_WORKER_ID_CHARS} characters, got {len(wid)}")
        )
    elif not wid.isprintable():
        v.append(
            FieldViolation(
                "hello.worker_id", f"must be printable (no NUL, newline or control character): {clip(wid)}"
            )
        )
    ns = _namespace(h.namespace)
    if ns is None:
        v.append(
            FieldViolation(
                "hello.namespace",
                f"must be namespaces/{{namespace}} or a namespace id matching [a-z0-9-]{{1,63}}: "
                f"{clip(h.namespace)}",
            )
        )
    queues = list(h.queues)
    if not queues:
        v.append(FieldViolation("hello.queues", "name at least one queue"))
    elif len(queues) > MAX_HELLO_QUEUES:
        v.append(FieldViolation("hello.queues", f"at most {MAX_HELLO_QUEUES} queues, got {len(queues)}"))
    else:
        bad = [(i, q) for i, q in enumerate(queues) if not names.QUEUE_RE.fullmatch(q)]
        for i, q in bad[:_MAX_VIOLATIONS]:
            v.append(
                FieldViolation(f"hello.queues[{i}]", f"must match [a-z0-9][a-z0-9._-]{{0,63}}: {clip(q)}")
            )
        if len(bad) > _MAX_VIOLATIONS:
            v.append(FieldViolation("hello.queues", f"{len(bad) - _MAX_VIOLATIONS} more invalid queue names"))
    if not (1 <= h.credits <= MAX_CREDITS):
        v.append(FieldViolation("hello.credits", f"must be between 1 and {MAX_CREDITS}"))
    if v:
        raise InvalidArgument(v)
    assert ns is not None
    return Hello(wid, ns, list(dict.fromkeys(queues)), h.credits)


def authorize_hello(h: Hello, principal: Principal, *, namespace_given: bool) -> Hello:
    """The hello as the authenticated ``principal`` may hold it: the namespace and queues come from
    its worker grants, never from the hello alone. A hello without a namespace
    (``namespace_given`` false) gets the principal's one worker namespace when it has exactly one
    (else ``default``).

    Raises :class:`PermissionDenied`: NAMESPACE_NOT_ALLOWED when the principal holds no worker grant
    there (the same whether or not the namespace exists), QUEUE_NOT_GRANTED naming the first queue
    outside its grant. Performs no I/O."""
    ns = h.namespace
    if not namespace_given:
        mine = principal.worker_namespaces()
        if len(mine) == 1 and principal.worker_queues(names.DEFAULT_NAMESPACE) is None:
            ns = mine[0]
    allowed = principal.worker_queues(ns)
    if allowed is None:
        raise PermissionDenied(f"the caller may not lease from namespace {ns!r}", metadata={"namespace": ns})
    if ALL not in allowed:
        for q in h.queues:
            if q not in allowed:
                raise PermissionDenied(
                    f"queue {clip(q)} is not granted to the caller in namespace {ns!r}",
                    reason=ErrorReason.QUEUE_NOT_GRANTED,
                    metadata={"namespace": ns, "queue": q[:ECHO_CHARS]},
                )
    return Hello(h.worker_id, ns, h.queues, h.credits)


@functools.lru_cache(maxsize=8192)
def _job_id(job: str) -> uuid.UUID | None:
    """The job id of ``namespaces/{ns}/jobs/{uuid}``, None if malformed. Cached: each attempt's name
    is parsed for its accept, every heartbeat and its result (hot path: parsing was ~8 % of the
    dispatcher's CPU in a drain profile, py-spy, 2026-12-01). 8,192 names (~3 MiB) cover the attempts
    in flight; 65,536 made the dispatcher's RSS grow 112 -> 139 MiB over a 1M-job herd
    (bench.herd, 2026-12-02), against "memory flat"."""
    try:
        return names.parse_job_name(job, "attempt.job")[1]
    except GnomonError:
        return None


def _uuid_of(raw: bytes, _new=object.__new__, _set=object.__setattr__, _from=int.from_bytes) -> uuid.UUID:
    """``uuid.UUID(bytes=raw)`` for 16 bytes, without its argument checks (~0.75 against ~1.6 µs)."""
    u = _new(uuid.UUID)
    _set(u, "int", _from(raw))
    _set(u, "is_safe", uuid.SafeUUID.unknown)
    return u


def attempt_key(ref: wpb.AttemptRef) -> AttemptKey | None:
    """The key of an :class:`AttemptRef` whose attempt is >= 1 and whose job is named by ``job_id``
    (16 bytes: the UUID, set by the dispatcher in assignments and echoed by workers) or, when
    ``job_id`` is empty (workers of earlier releases), by ``job`` = ``namespaces/{ns}/jobs/{uuid}``
    (parsed by :func:`gnomon.common.names.parse_job_name`); None for a malformed one (the caller
    refuses that item alone). With ``job_id`` set, ``job`` is not parsed here: the id names the
    attempt, as the parsed id did (the name's namespace is still compared with the stream's by
    :meth:`~gnomon.dispatcher.flow.StreamEdge.split` for an attempt the stream does not hold)."""
    raw = ref.job_id
    if raw:
        job_id = _uuid_of(raw) if len(raw) == 16 else None
    else:
        job_id = _job_id(ref.job)
    if job_id is None or ref.attempt < 1:
        return None
    return AttemptKey(job_id, ref.attempt, ref.version, ref.fencing_token)


def oversized(msg) -> GnomonError | None:
    """The error ending the stream (reason PROTOCOL_VIOLATION) when the ``LeaseRequest`` ``msg``
    carries more than :data:`MAX_ITEMS_PER_MESSAGE` items; None when it does not."""
    kind = msg.WhichOneof("kind")
    if kind in ("accepts", "releases"):
        n = len(getattr(msg, kind).attempts)
    elif kind == "heartbeats":
        n = max(len(msg.heartbeats.attempts), len(msg.heartbeats.checkpoints))
    elif kind == "results":
        n = len(msg.results.results)
    else:
        return None
    if n <= MAX_ITEMS_PER_MESSAGE:
        return None
    return GnomonError(
        f"a {kind} message carries {n} items; at most {MAX_ITEMS_PER_MESSAGE} per message",
        reason=ErrorReason.PROTOCOL_VIOLATION,
    )
