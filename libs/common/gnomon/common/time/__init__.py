"""gnomon.common.time: the pure recurrence engine (cron, RFC 5545 RRULE, interval) with DST policies.

Every occurrence is computed from local wall time in the rule's IANA zone at evaluation time
(tzdata from the pinned ``tzdata`` wheel, see :func:`tzdata_version`), then localized under the
schedule's DST gap/fold policy. See docs/time.md.
"""

from .errors import RULE_ERROR_REASONS, RuleError
from .model import DstFold, DstGap, Occurrence, RuleKind, RuleSpec
from .recurrence import Recurrence, compile_rule, is_elapsed_time_rule
from .zones import get_zone, tzdata_version

__all__ = [
    "RULE_ERROR_REASONS",
    "DstFold",
    "DstGap",
    "Occurrence",
    "Recurrence",
    "RuleError",
    "RuleKind",
    "RuleSpec",
    "compile_rule",
    "get_zone",
    "is_elapsed_time_rule",
    "tzdata_version",
]
