"""Recurring schedules, their occurrence records and previews (``ScheduleService``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .jobs import RetryPolicy

__all__ = ["Schedule", "JobTemplate", "ScheduleOccurrence", "PreviewFireTime"]


@dataclass(frozen=True, slots=True)
class JobTemplate:
    """What every occurrence job of a schedule gets (mirror of ``gnomon.v1.JobTemplate``).

    Attributes:
        queue: queue of the occurrence jobs.
        payload: payload bytes.
        max_attempts: attempt limit, or ``None`` for the server default (3).
        lease_duration: per-attempt lease, or ``None`` (server default 30 s).
        idempotent: an attempt with an unknown outcome may be retried.
        retry_policy: the :class:`~gnomon.sdk.RetryPolicy`, or ``None`` (server defaults).
        start_to_close: the longest one attempt may run once started, or ``None``.
        start_deadline: an occurrence not dispatched this long after its time expires, or ``None``.
    """

    queue: str
    payload: bytes = b""
    max_attempts: int | None = None
    lease_duration: timedelta | None = None
    idempotent: bool = False
    retry_policy: RetryPolicy | None = None
    start_to_close: timedelta | None = None
    start_deadline: timedelta | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A recurring schedule (mirror of ``gnomon.v1.Schedule``).

    Attributes:
        name: ``namespaces/{namespace}/schedules/{id}``.
        cron / rrule / interval: the rule; exactly one is set (``cron``/``rrule`` text, or the
            ``interval`` ``timedelta`` of an ``every`` rule), the others ``None``.
        time_zone: IANA zone the rule is evaluated in.
        dst_gap: ``"SHIFT_FORWARD"`` or ``"SKIP"``; dst_fold: ``"FIRST"``, ``"SECOND"`` or ``"BOTH"``.
        misfire_policy: ``"RUN_LATEST"``, ``"SKIP"``, ``"COALESCE"`` or ``"RUN_ALL"``.
        misfire_grace / catchup_window / jitter: spans (``timedelta``) or ``None`` (server default).
        max_catchup: RUN_ALL's limit (0: the server default).
        overlap_policy: ``"ALLOW"``, ``"SKIP"``, ``"BUFFER_ONE"``, ``"BUFFER_ALL"``, ``"CANCEL_OTHER"``.
        start_time / end_time: UTC-aware bounds of the occurrences, or ``None``.
        job_template: :class:`JobTemplate`.
        paused: nothing is planned while paused.
        version: bumped by every change; etag: its opaque form for conditional updates.
        create_time, update_time, next_fire_time, planned_through_time: UTC-aware or ``None``.
        region: home region. tzdata_version: the tzdata the server evaluates zones with.
    """

    name: str
    cron: str | None
    rrule: str | None
    interval: timedelta | None
    time_zone: str
    dst_gap: str
    dst_fold: str
    misfire_policy: str
    misfire_grace: timedelta | None
    catchup_window: timedelta | None
    max_catchup: int
    overlap_policy: str
    start_time: datetime | None
    end_time: datetime | None
    jitter: timedelta | None
    job_template: JobTemplate
    paused: bool
    version: int
    etag: str
    create_time: datetime | None
    update_time: datetime | None
    next_fire_time: datetime | None
    planned_through_time: datetime | None
    region: str
    tzdata_version: str

    @property
    def id(self) -> str:
        """The schedule id (last segment of :attr:`name`)."""
        return self.name.rsplit("/", 1)[-1]


@dataclass(frozen=True, slots=True)
class ScheduleOccurrence:
    """The decision record of one nominal fire time (mirror of ``gnomon.v1.ScheduleOccurrence``).

    Attributes:
        name: ``namespaces/{ns}/schedules/{id}/occurrences/{occurrence}``.
        nominal_time: UTC-aware nominal fire time, or ``None``.
        local_time: the nominal time as wall time with offset in the schedule's zone.
        decision: ``"FIRED"``, ``"LATE"``, ``"COALESCED"``, ``"BUFFERED"``, ``"SKIPPED_OVERLAP"``,
            ``"SKIPPED_MISFIRE"``, ``"SKIPPED_DST_GAP"``, ``"SKIPPED_PAUSED"``, ``"DEDUPLICATED"``,
            ``"SKIPPED_QUOTA"`` (unknown future values come through as their name).
        source: ``"RULE"``, ``"TRIGGER"`` or ``"BACKFILL"``.
        note: free text (DST shift, why skipped ...).
        job: the occurrence job's name, or ``None`` when no job was made.
        schedule_time: the job's schedule time (jitter applied), or ``None``.
        decide_time: when the decision was made, or ``None``.
        missed_count: for a COALESCE run, how many missed nominal times it stands for (else 0);
            missed_first_time / missed_last_time: their range, or ``None``.
    """

    name: str
    nominal_time: datetime | None
    local_time: str
    decision: str
    source: str
    note: str
    job: str | None
    schedule_time: datetime | None
    decide_time: datetime | None
    missed_count: int = 0
    missed_first_time: datetime | None = None
    missed_last_time: datetime | None = None


@dataclass(frozen=True, slots=True)
class PreviewFireTime:
    """One fire time of a preview: ``fire_time`` (UTC-aware), ``local_time`` (wall time with offset),
    ``note`` (e.g. a DST shift) and ``skipped`` (a nominal time the DST gap policy skips)."""

    fire_time: datetime | None
    local_time: str
    note: str
    skipped: bool


@dataclass(frozen=True, slots=True)
class SkippedOccurrenceRange:
    """Consecutive nominal times of one schedule an outage prediction skips for the same reason
    (mirror of ``gnomon.v1.SkippedOccurrenceRange``): ``decision`` (``"SKIPPED_MISFIRE"``,
    ``"SKIPPED_OVERLAP"``, ``"SKIPPED_DST_GAP"``, ``"SKIPPED_PAUSED"``), ``note`` (why), ``count``
    and the UTC-aware ``first_nominal_time`` / ``last_nominal_time``."""

    decision: str
    note: str
    count: int
    first_nominal_time: datetime | None
    last_nominal_time: datetime | None


@dataclass(frozen=True, slots=True)
class OutagePrediction:
    """What the planner would do with one schedule after an outage (mirror of
    ``gnomon.v1.OutagePrediction``, from ``simulate_outage``).

    Attributes:
        schedule: ``namespaces/{ns}/schedules/{id}``.
        misfire_policy, overlap_policy: the schedule's policies (``"COALESCE"``, ``"SKIP"`` ...).
        missed_count: nominal times in the outage; missed_first_time / missed_last_time: the first and
            last (UTC-aware), or ``None``.
        runs: the predicted decisions that run or wait (FIRED, LATE, COALESCED, BUFFERED) in nominal
            order, as :class:`ScheduleOccurrence` without ``name`` or ``job``; ``schedule_time`` is when
            each run would be released. At most the request's ``max_runs``.
        run_count: how many runs in all.
        skipped: every other nominal time, as :class:`SkippedOccurrenceRange` in nominal order (at
            most ``max_runs`` ranges); skipped_count: how many nominal times are skipped in all.
        catchup_finish_time: the latest release among the runs, or ``None`` when none runs.
        assumptions: the sentences the prediction rests on.
        paused: the schedule is paused (nothing predicted).
    """

    schedule: str
    misfire_policy: str
    overlap_policy: str
    missed_count: int
    missed_first_time: datetime | None
    missed_last_time: datetime | None
    runs: tuple[ScheduleOccurrence, ...]
    run_count: int
    skipped: tuple[SkippedOccurrenceRange, ...]
    catchup_finish_time: datetime | None
    assumptions: tuple[str, ...]
    paused: bool
    skipped_count: int = 0
