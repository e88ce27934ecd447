"""The one exception of the recurrence engine: :class:`RuleError`."""

from __future__ import annotations

#: Every reason a rule can be refused for, with its meaning (mirrored in docs/time.md).
RULE_ERROR_REASONS: dict[str, str] = {
    "INVALID_CRON": "The cron expression does not parse; the message names the field position.",
    "INVALID_RRULE": "The RFC 5545 text does not parse; the message names the line/part position.",
    "INVALID_INTERVAL": "The interval is not a whole number of seconds in [1 s, 366 days].",
    "INVALID_TIME_ZONE": "The time zone is not an IANA name known to the pinned tzdata.",
    "RULE_NEVER_FIRES": "The rule has no occurrence within 50 years of its search point (or before end_time).",
    "RRULE_UNBOUNDED": "The RRULE would expand too expensively (or COUNT/RDATE/EXDATE exceed the limits).",
    "RULE_TOO_EXPENSIVE": "Finding the rule's next time exceeds the bounded work of one search.",
    "INVALID_TIME_RANGE": "end_time is before start_time, or the anchor/start time is missing.",
}


class RuleError(ValueError):
    """A rule refused by :func:`gnomon.common.time.compile_rule`.

    Attributes:
        reason: UPPER_SNAKE reason, one of :data:`RULE_ERROR_REASONS`.
        field: the request field path the fault is in: ``cron``, ``rrule``, ``interval``,
            ``time_zone``, ``start_time`` or ``end_time``.
        message: human text; for cron and RRULE it names the position of the fault
            (``field 3 (day-of-month) '32': out of range 1-31``, ``RRULE part 2 'BYDAY=XX': ...``).
    """

    def __init__(self, reason: str, field: str, message: str):
        if reason not in RULE_ERROR_REASONS:
            raise ValueError(f"undocumented rule error reason {reason}")
        super().__init__(f"{reason} ({field}): {message}")
        self.reason = reason
        self.field = field
        self.message = message
