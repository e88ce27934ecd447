"""gnomon.sdk: the Python client and worker SDK of Gnomon.

Client side (create and inspect jobs)::

    from gnomon.sdk import Client
    with Client("127.0.0.1:7070", namespace="default") as c:
        job = c.create_job("emails", {"to": "a@example.com"}, delay=5)
        print(c.get_job(job.id).state)          # "SCHEDULED", ... "SUCCEEDED"

Worker side (run jobs)::

    from gnomon.sdk import Worker, PermanentError
    def handle(ctx):                            # or `async def`
        if not ctx.json().get("to"):
            raise PermanentError("no recipient")
    Worker(["emails"], handle, concurrency=16).run()

Times are UTC-aware ``datetime`` objects; spans are ``timedelta`` or float seconds. Every resource
comes back as a frozen model (:mod:`gnomon.sdk.models`). RPC failures raise :class:`GnomonError`
(gRPC code, message, ``reason``, ``field_violations``). :class:`AsyncClient` is the one
implementation; :class:`Client` runs it on a private event loop thread.
"""

from .client import AsyncClient, Client
from .context import JobContext
from .errors import AmbiguousError, Cancelled, GnomonError, PermanentError, ThrottledError, TransientError
from .failures import Failure, FailureClass, classify_exception
from .models import (
    ApiKey,
    AuditEntry,
    CreatedApiKey,
    DeadLetter,
    DeadLetterAttempt,
    DispatcherInfo,
    Grant,
    Job,
    JobAttempt,
    JobTemplate,
    Namespace,
    NamespaceQuotas,
    OutagePrediction,
    PreviewFireTime,
    Principal,
    Queue,
    RateLimit,
    ReplayResult,
    RetryBudgetInfo,
    RetryPolicy,
    Schedule,
    ScheduleOccurrence,
    Shard,
    SkippedOccurrenceRange,
    WhoAmI,
)
from .worker import Worker

__all__ = [
    "Client",
    "AsyncClient",
    "Job",
    "JobAttempt",
    "DispatcherInfo",
    "Shard",
    "Schedule",
    "JobTemplate",
    "ScheduleOccurrence",
    "PreviewFireTime",
    "OutagePrediction",
    "SkippedOccurrenceRange",
    "DeadLetter",
    "DeadLetterAttempt",
    "ReplayResult",
    "AuditEntry",
    "Worker",
    "JobContext",
    "FailureClass",
    "Failure",
    "classify_exception",
    "GnomonError",
    "Cancelled",
    "PermanentError",
    "ThrottledError",
    "AmbiguousError",
    "TransientError",
    "RetryPolicy",
    "Queue",
    "RetryBudgetInfo",
    "RateLimit",
    "Namespace",
    "NamespaceQuotas",
    "Principal",
    "ApiKey",
    "CreatedApiKey",
    "Grant",
    "WhoAmI",
]
