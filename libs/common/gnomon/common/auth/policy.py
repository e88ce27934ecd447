"""What every RPC requires: the one table the authorization interceptor consults
(:data:`POLICY`, keyed by full method name ``/package.Service/Method``).

A :class:`Rule` names a :class:`Permission` and where the namespace comes from (:class:`Scope`):

* ``NAMESPACE``: the request's ``parent`` (empty = ``default``), else its ``name``, else the field
  ``field`` names; the caller needs the permission there (or in ``*``);
* ``CLUSTER``: the caller needs the permission in ``*`` (cluster-wide methods);
* ``AUTHENTICATED``: any authenticated caller (discovery; listings that filter to what the caller sees);
* ``STREAM``: any authenticated caller; the worker stream checks its namespace and queues itself
  against the principal's worker grants once the hello arrives.

Every mutating method also declares, beside its permission, how it is admitted against the
namespace's job quotas (:class:`Admission`: how it counts the jobs it will write, and which quotas
apply; :attr:`Admission.NONE` for a method that creates no job). The admission is enforced in one
place: the authorization interceptor binds it to the call (:mod:`gnomon.common.rpc.admission`) once
the caller is authorized, and the engine calls it with its exact count before it writes
(:meth:`gnomon.api.quotas.QuotaGuard.admit` checks the quotas); no servicer admits by itself. Unit
tests keep the counting set equal to the job-creating methods, require a declaration on every
mutating method, and forbid a servicer to call the quota guard's admission. The planner, which creates
jobs without an RPC, admits in its planning transaction (:mod:`gnomon.planner.planning`: a run at the
quota is recorded SKIPPED_QUOTA).

A method of a registered service that is missing here is refused (deny by default); a unit test
checks that every method of every service the servers register has a rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gnomon.common.auth.principals import Permission as P


class Scope(StrEnum):
    """Where a rule's namespace comes from (see the module docstring)."""

    NAMESPACE = "namespace"
    CLUSTER = "cluster"
    AUTHENTICATED = "authenticated"
    STREAM = "stream"


class Admission(StrEnum):
    """How a method counts the jobs it will write (:attr:`NONE`: it writes none). The count is admitted against
    ``max_pending_jobs`` (pending + count must stay within it) and, for the :attr:`rated` kinds
    (jobs created at once), ``max_create_rate``, before anything is written; a refusal writes nothing.

    * ``JOB``: exactly one job (CreateJob);
    * ``REQUESTS``: one job per entry of ``requests`` (BatchCreateJobs);
    * ``TRIGGER``: the job the overlap policy lets run now, 0 or 1, counted inside the write
      transaction (TriggerSchedule; a BUFFERED trigger is released by the planner, which admits it);
    * ``BACKFILL``: the new BUFFERED occurrences of the range after deduplication, counted inside the
      write transaction (BackfillSchedule; the planner releases them paced by the catch-up budget,
      so no create-rate token is taken);
    * ``REPLAY``: min(matching dead letters, ``max_jobs``), counted inside the replay's first
      transaction (ReplayDeadLetters; paced by ``max_rate``, so no create-rate token is taken);
    * ``NONE``: the method creates no job (it may change one, or a schedule whose runs the planner
      admits when it creates them); declared explicitly on every other mutating method.
    """

    NONE = "none"
    JOB = "job"
    REQUESTS = "requests"
    TRIGGER = "trigger"
    BACKFILL = "backfill"
    REPLAY = "replay"

    @property
    def counts(self) -> bool:
        """Whether the method creates jobs, so its calls are admitted (every kind but :attr:`NONE`)."""
        return self is not Admission.NONE

    @property
    def rated(self) -> bool:
        """Whether the count also takes ``max_create_rate`` tokens (jobs created at once)."""
        return self in (Admission.JOB, Admission.REQUESTS, Admission.TRIGGER)


@dataclass(frozen=True)
class Rule:
    """``permission`` required in the namespace ``scope`` gives; ``mutating`` calls are audited;
    ``field``: dotted request field holding the namespace or a name under it (NAMESPACE scope,
    when the request has neither ``parent`` nor ``name``); ``optional_name``: an empty ``name`` reads
    nothing stored (PreviewSchedule of an unsaved rule), so any authenticated caller may send it;
    ``cluster_parent``: ``parent`` may be ``namespaces/*`` (the cluster-wide entries), which needs the
    permission in ``*`` (only ``*`` grants count); for other rules it is malformed; ``admits``: how
    the call is admitted against the job quotas (:class:`Admission`; None: not declared, allowed only
    for a method that writes nothing)."""

    permission: P | None
    scope: Scope
    mutating: bool = False
    field: str = ""
    optional_name: bool = False
    cluster_parent: bool = False
    admits: Admission | None = None


def _ns(
    permission: P,
    *,
    mutating: bool = False,
    field: str = "",
    optional_name: bool = False,
    cluster_parent: bool = False,
    admits: Admission | None = None,
) -> Rule:
    return Rule(permission, Scope.NAMESPACE, mutating, field, optional_name, cluster_parent, admits)


def _cluster(permission: P, *, mutating: bool = False, admits: Admission | None = None) -> Rule:
    return Rule(permission, Scope.CLUSTER, mutating, admits=admits)


_NO_JOBS = Admission.NONE


_ANY = Rule(None, Scope.AUTHENTICATED)

_METHODS: dict[str, dict[str, Rule]] = {
    "gnomon.v1.JobService": {
        "CreateJob": _ns(P.JOBS_WRITE, mutating=True, admits=Admission.JOB),
        "BatchCreateJobs": _ns(P.JOBS_WRITE, mutating=True, admits=Admission.REQUESTS),
        "GetJob": _ns(P.JOBS_READ),
        "ListJobs": _ns(P.JOBS_READ),
        "ListJobAttempts": _ns(P.JOBS_READ),
        "CancelJob": _ns(P.JOBS_WRITE, mutating=True, admits=_NO_JOBS),
        "RescheduleJob": _ns(P.JOBS_WRITE, mutating=True, admits=_NO_JOBS),
    },
    "gnomon.v1.ScheduleService": {
        "CreateSchedule": _ns(P.SCHEDULES_WRITE, mutating=True, admits=_NO_JOBS),
        "GetSchedule": _ns(P.SCHEDULES_READ),
        "ListSchedules": _ns(P.SCHEDULES_READ),
        "UpdateSchedule": _ns(P.SCHEDULES_WRITE, mutating=True, admits=_NO_JOBS, field="schedule.name"),
        "DeleteSchedule": _ns(P.SCHEDULES_WRITE, mutating=True, admits=_NO_JOBS),
        "PauseSchedule": _ns(P.SCHEDULES_OPERATE, mutating=True, admits=_NO_JOBS),
        "ResumeSchedule": _ns(P.SCHEDULES_OPERATE, mutating=True, admits=_NO_JOBS),
        "TriggerSchedule": _ns(P.SCHEDULES_OPERATE, mutating=True, admits=Admission.TRIGGER),
        "BackfillSchedule": _ns(P.SCHEDULES_OPERATE, mutating=True, admits=Admission.BACKFILL),
        "PreviewSchedule": _ns(P.SCHEDULES_READ, optional_name=True),
        "ListScheduleOccurrences": _ns(P.SCHEDULES_READ),
        # a prediction: reads schedules, writes nothing (`name` or `parent`: see request_namespace)
        "SimulateOutage": _ns(P.SCHEDULES_READ),
    },
    "gnomon.v1.QueueService": {
        "GetQueue": _ns(P.QUEUES_READ),
        "SetQueueRateLimit": _ns(P.QUEUES_WRITE, mutating=True, admits=_NO_JOBS),
    },
    "gnomon.v1.DeadLetterService": {
        "ListDeadLetters": _ns(P.DEAD_LETTERS_READ),
        # audited by the replay itself, in its own transaction, with its filter and counts
        "ReplayDeadLetters": _ns(P.DEAD_LETTERS_REPLAY, admits=Admission.REPLAY),
        # parent namespaces/*: the cluster-wide entries, for audit.read in * only
        "ListAuditEntries": _ns(P.AUDIT_READ, cluster_parent=True),
    },
    "gnomon.v1.ClusterService": {
        "ListDispatchers": _ANY,
        "ListShards": _ANY,
    },
    "gnomon.v1.NamespaceService": {
        "CreateNamespace": _cluster(P.NAMESPACE_ADMIN, mutating=True, admits=_NO_JOBS),
        "GetNamespace": _ns(P.NAMESPACE_READ),
        "ListNamespaces": _ANY,
        "UpdateNamespace": _ns(P.NAMESPACE_ADMIN, mutating=True, admits=_NO_JOBS, field="namespace.name"),
        "DeleteNamespace": _cluster(P.NAMESPACE_ADMIN, mutating=True, admits=_NO_JOBS),
    },
    "gnomon.v1.AccessService": {
        "CreatePrincipal": _cluster(P.NAMESPACE_ADMIN, mutating=True, admits=_NO_JOBS),
        "GetPrincipal": _cluster(P.NAMESPACE_ADMIN),
        "ListPrincipals": _cluster(P.NAMESPACE_ADMIN),
        "DisablePrincipal": _cluster(P.NAMESPACE_ADMIN, mutating=True, admits=_NO_JOBS),
        "CreateApiKey": _cluster(P.NAMESPACE_ADMIN, mutating=True, admits=_NO_JOBS),
        "ListApiKeys": _cluster(P.NAMESPACE_ADMIN),
        "RevokeApiKey": _cluster(P.NAMESPACE_ADMIN, mutating=True, admits=_NO_JOBS),
        "GrantRole": _ns(P.NAMESPACE_ADMIN, mutating=True, admits=_NO_JOBS, field="namespace"),
        "RevokeRole": _ns(P.NAMESPACE_ADMIN, mutating=True, admits=_NO_JOBS, field="namespace"),
        "ListGrants": _ns(P.NAMESPACE_ADMIN, field="namespace"),
        "WhoAmI": _ANY,
    },
    "gnomon.v1.WorkerService": {
        "Lease": Rule(P.LEASE, Scope.STREAM),
    },
    "gnomon.internal.v1.HintService": {
        "WakeDispatcher": _cluster(P.SERVICE),
        "WakePlanner": _cluster(P.SERVICE),
    },
}

#: ``/package.Service/Method`` -> its rule.
POLICY: dict[str, Rule] = {
    f"/{svc}/{m}": rule for svc, methods in _METHODS.items() for m, rule in methods.items()
}

#: Services answered without any credential (health checks by load balancers and orchestrators).
PUBLIC_SERVICES = frozenset({"grpc.health.v1.Health"})
#: Server reflection (open, authenticated or off by GNOMON_AUTH_REFLECTION).
REFLECTION_SERVICES = frozenset(
    {"grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection"}
)
