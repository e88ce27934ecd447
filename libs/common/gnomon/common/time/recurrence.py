"""compile_rule and Recurrence: the one entry point the planner and the API use."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, tzinfo

from . import cron as _cron
from . import rrule as _rrule
from . import rruleset as _rruleset
from .errors import RuleError
from .interval import check_interval
from .interval import occurrences as _interval_occurrences
from .localize import localize
from .model import DstFold, DstGap, Occurrence, RuleKind, RuleSpec
from .rrule_expand import HORIZON
from .zones import get_zone, min_offset_near, utc_offset

UTC = UTC
_US = timedelta(microseconds=1)


def _utc_naive(dt: datetime, field: str) -> datetime:
    """An instant as naive UTC (a naive input is read as UTC)."""
    if not isinstance(dt, datetime):
        raise RuleError("INVALID_TIME_RANGE", field, f"{field} must be a datetime")
    if dt.tzinfo is None:
        return dt
    return dt.astimezone(UTC).replace(tzinfo=None)


def is_elapsed_time_rule(spec: RuleSpec) -> bool:
    """True when the rule follows elapsed time (Vixie cron): cron whose hour field is ``*`` or has
    a step, RRULE with FREQ HOURLY/MINUTELY/SECONDLY and no BYHOUR, and every INTERVAL rule.
    Raises RuleError like :func:`compile_rule` for an invalid rule."""
    return compile_rule(spec).elapsed_time


class Recurrence:
    """A compiled, immutable rule. Thread-safe; cheap to keep and reuse.

    Attributes:
        spec: the :class:`RuleSpec` it was compiled from.
        elapsed_time: True for an elapsed-time rule (both fold passes fire, gap times are
            skip markers whatever the policy); False for a pinned rule (policies apply).
    """

    def __init__(
        self,
        spec: RuleSpec,
        zone: tzinfo,
        plan: datetime | _cron.CronPlan | _rrule.RRulePlan,
        elapsed: bool,
        start: datetime | None,
        end: datetime | None,
    ) -> None:
        self.spec = spec
        self.elapsed_time = elapsed
        self._zone = zone
        self._plan = plan
        self._start = start  # naive UTC lower bound (inclusive) or None
        self._end = end  # naive UTC upper bound (inclusive) or None

    def __repr__(self) -> str:
        return f"Recurrence({self.spec!r})"

    def _iter(self, after_naive: datetime) -> Iterator[Occurrence]:
        spec = self.spec
        if self._start is not None and after_naive < self._start:
            after_naive = self._start - _US
        plan = self._plan
        if isinstance(plan, datetime):  # INTERVAL: the plan is the anchor T0
            assert spec.interval is not None  # checked by compile
            return _interval_occurrences(plan, spec.interval, self._zone, after_naive, self._end)
        zone = self._zone
        w0 = after_naive + min_offset_near(zone, after_naive)
        w0 = w0.replace(microsecond=0)
        if isinstance(plan, _rrule.RRulePlan):
            return _rruleset.occurrences(
                plan,
                zone,
                elapsed=self.elapsed_time,
                dst_gap=spec.dst_gap,
                dst_fold=spec.dst_fold,
                w0=w0,
                after=after_naive,
                end=self._end,
            )
        cands = _cron.candidates(plan, w0)
        return localize(
            cands,
            zone,
            elapsed=self.elapsed_time,
            dst_gap=spec.dst_gap,
            dst_fold=spec.dst_fold,
            after=after_naive,
            end=self._end,
        )

    def iter_after(self, after: datetime, *, include_skipped: bool = True) -> Iterator[Occurrence]:
        """Occurrences strictly after the UTC instant ``after`` (naive = UTC), ascending fire_time.

        Fired occurrences strictly increase (equal instants are merged into one, notes joined);
        skip markers (``skipped_dst_gap``) are included unless ``include_skipped=False``. Ends at
        ``spec.end``, at the end of an RRULE COUNT/UNTIL, or when no occurrence exists within
        50 years of the search point; each ``next()`` is bounded.
        """
        it = self._iter(_utc_naive(after, "after"))
        if include_skipped:
            return it
        return (o for o in it if not o.skipped_dst_gap)

    def next_after(self, after: datetime) -> Occurrence | None:
        """The first *firing* occurrence strictly after the UTC instant ``after``, or None."""
        for o in self._iter(_utc_naive(after, "after")):
            if not o.skipped_dst_gap:
                return o
        return None

    def preview(self, after: datetime, count: int, *, include_skipped: bool = True) -> list[Occurrence]:
        """The first ``count`` items of :meth:`iter_after` as a list (fewer when the rule ends)."""
        return list(itertools.islice(self.iter_after(after, include_skipped=include_skipped), max(0, count)))


def compile_rule(spec: RuleSpec) -> Recurrence:
    """Validate ``spec`` and compile it (cached: equal specs share one :class:`Recurrence`).

    Raises:
        RuleError: ``INVALID_TIME_ZONE`` (time_zone), ``INVALID_CRON`` / ``INVALID_RRULE`` with the
            position of the fault (cron / rrule), ``INVALID_INTERVAL`` (interval),
            ``RULE_NEVER_FIRES`` (cron / rrule / interval: no occurrence within 50 years of the
            search point or before end_time), ``RRULE_UNBOUNDED`` (rrule),
            ``INVALID_TIME_RANGE`` (end_time before start_time; start_time missing for an
            INTERVAL anchor or an RRULE without DTSTART).
    """
    try:
        return _compile(spec)
    except TypeError as e:  # unhashable field values: compile uncached
        if "unhashable" not in str(e):
            raise
        return _compile.__wrapped__(spec)
    except OverflowError as e:  # a bounded search ran past year 1 or 9999 (e.g. DTSTART 9999-12-31)
        raise RuleError(
            "INVALID_TIME_RANGE",
            "start_time",
            "the rule's times are too close to year 1 or 9999 to be searched",
        ) from e


@functools.lru_cache(maxsize=65536)
def _compile(spec: RuleSpec) -> Recurrence:
    if not isinstance(spec.kind, RuleKind):
        try:
            spec = RuleSpec(**{**spec.__dict__, "kind": RuleKind(spec.kind)})
        except ValueError as e:
            raise RuleError("INVALID_CRON", "kind", f"unknown rule kind {spec.kind!r}") from e
    if not isinstance(spec.dst_gap, DstGap) or not isinstance(spec.dst_fold, DstFold):
        spec = RuleSpec(
            **{**spec.__dict__, "dst_gap": DstGap(spec.dst_gap), "dst_fold": DstFold(spec.dst_fold)}
        )
    zone = get_zone(spec.time_zone)
    start = _utc_naive(spec.start, "start_time") if spec.start is not None else None
    end = _utc_naive(spec.end, "end_time") if spec.end is not None else None
    if start is not None and end is not None and end < start:
        raise RuleError(
            "INVALID_TIME_RANGE", "end_time", f"end_time {spec.end} is before start_time {spec.start}"
        )
    field = {RuleKind.CRON: "cron", RuleKind.RRULE: "rrule", RuleKind.INTERVAL: "interval"}[spec.kind]
    if spec.kind is RuleKind.INTERVAL:
        check_interval(spec.interval)
        if start is None:
            raise RuleError(
                "INVALID_TIME_RANGE", "start_time", "an INTERVAL rule needs start_time (the anchor T0)"
            )
        anchor = start.replace(microsecond=0)
        rec = Recurrence(spec, zone, anchor, True, None, end)
        if end is not None and anchor > end:
            raise RuleError("RULE_NEVER_FIRES", "interval", "the anchor start_time is after end_time")
        return rec
    if spec.kind is RuleKind.CRON:
        plan = _cron.parse_cron(spec.expression)
        rec = Recurrence(spec, zone, plan, plan.elapsed, start, end)
        # deterministic where possible: from start_time; else 50 years before end_time; else now
        if start is not None:
            probe_from = start
        elif end is not None:
            probe_from = end - HORIZON
        else:
            probe_from = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    else:
        start_local = None
        if start is not None:
            start_local = start.replace(tzinfo=UTC).astimezone(zone).replace(tzinfo=None)
        rplan = _rrule.parse_rrule(spec.expression, zone, spec.time_zone, start_local)
        rec = Recurrence(spec, zone, rplan, rplan.elapsed, start, end)
        # search from a day before DTSTART or the first RDATE, whichever is earlier (as instants:
        # a wall time in a gap may fire at the transition, before it read with either offset)
        firsts = [rplan.dtstart, *rplan.rdates[:1]]
        d0 = min([w - utc_offset(zone, w) for w in firsts] + list(rplan.rdates_utc[:1])) - timedelta(days=1)
        probe_from = max(d0, start) if start is not None else d0
    first = next(rec._iter(probe_from - timedelta(seconds=1)), None)
    if first is None:
        where = " before end_time" if end is not None else " within 50 years"
        raise RuleError("RULE_NEVER_FIRES", field, f"'{spec.expression}' has no occurrence{where}")
    return rec
