"""The data plane's storage API in one import (``from gnomon.common.storage import dispatch as store``).

The queries live in modules split by concern; this module only re-exports them:

* :mod:`.fencing`: ``record_ownership``, ``check_fence`` (shard fencing tokens);
* :mod:`.claims`: ``claim_due``, ``next_due_in``, ``CLAIM``, ``NO_RETRY_CAP``;
* :mod:`.outbox`: ``pending_outbox``, ``mark_published``;
* :mod:`.leases`: ``accept``, ``heartbeat`` (the worker's compare-and-set writes);
* :mod:`.results`: ``complete`` (results and the after-failure transition's write);
* the domain types of :mod:`gnomon.common.domain.attempts`: ``AttemptId``, ``AttemptKey``,
  ``Claimed``, ``Result``.
"""

from __future__ import annotations

from gnomon.common.domain.attempts import AttemptId, AttemptKey, Claimed, Result
from gnomon.common.storage.claims import CLAIM, NO_RETRY_CAP, claim_due, next_due_in
from gnomon.common.storage.fencing import check_fence, record_ownership
from gnomon.common.storage.leases import accept, heartbeat
from gnomon.common.storage.outbox import mark_published, pending_outbox
from gnomon.common.storage.results import complete

__all__ = [
    "CLAIM",
    "NO_RETRY_CAP",
    "AttemptId",
    "AttemptKey",
    "Claimed",
    "Result",
    "accept",
    "check_fence",
    "claim_due",
    "complete",
    "heartbeat",
    "mark_published",
    "next_due_in",
    "pending_outbox",
    "record_ownership",
]
