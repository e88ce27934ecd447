"""History of a fault run and the checker of the invariants in docs/concepts.md.

A run records what clients did (:meth:`History.created`: job name, id and the ``schedule_time``
the API returned), and after the run :meth:`History.collect` reads what the system did: the job
rows, every attempt row (claim/accept/finish times by the database clock, token, dispatcher,
worker, state) and the executions the handler wrote to its record file. :func:`check` then asserts
the invariants it can observe and returns a :class:`Report`; tests do ``assert report.ok, report``.

Invariants checked (numbers as in docs/concepts.md, "Invariants"):

* **never lost** (2): every created job exists and is terminal (or, with ``require_terminal=False``,
  visibly pending: SCHEDULED / QUEUED / RUNNING).
* **never early** (1, 7): every attempt's ``claimed_at`` (DB clock) >= the job's ``scheduled_at``
  as created; the last attempt's ``claimed_at`` >= the job's current ``scheduled_at``; a retry is
  claimed no earlier than its predecessor finished; every handler start (worker wall clock) >=
  ``scheduled_at`` - ``skew_margin_s`` (one machine here; the margin covers process vs DB clock).
* **duplicates only where allowed** (3): one execution per (job, attempt) at most, and executed
  under the attempt's current token; a job executed in several attempts only where each earlier
  attempt is LOST (lease expired) or FAILED (the handler failed, a retry); never two SUCCEEDED
  attempts; never two attempts live (accepted and not LOST) at overlapping times; at most one
  attempt QUEUED or RUNNING at the end.
* **legal transitions** (the job lifecycle): the job's path derived from its attempts (SCHEDULED -> QUEUED
  -> RUNNING -> SCHEDULED (retry) ... -> final state) follows ``gnomon.common.domain.states.TRANSITIONS``;
  attempt numbers are 1..n with no gaps; non-final attempts are ended; the job's state agrees with
  its last attempt.

This module is also a worker handler module (``history:run``, with ``tests/faults`` on PYTHONPATH).
"""

from __future__ import annotations

import collections
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import psycopg
from psycopg.rows import dict_row

from gnomon.common.domain.states import TERMINAL, AttemptState, JobState, is_legal

#: ``CASE WHEN`` the job row is QUEUED and its current attempt (``a``) RUNNING: a running job.
_RUN = "CASE WHEN j.state = 'QUEUED' AND a.state = 'RUNNING'"

# -- the handler -------------------------------------------------------------------------------


def run(ctx) -> None:
    """Records ``<job> <attempt> <key> <token> <wall s> <pid>`` to ``$GNOMON_TEST_RECORD`` at start,
    then sleeps ``payload.sleep`` seconds if the attempt is in ``payload.sleep_attempts`` (default
    [1]) and ``$GNOMON_TEST_SLEEP_OK`` is unset or names this worker (``GNOMON_TEST_WORKER``)."""
    line = (
        f"{ctx.job} {ctx.attempt} {ctx.idempotency_key} {ctx.fencing_token} {time.time():.6f} {os.getpid()}\n"
    )
    fd = os.open(os.environ["GNOMON_TEST_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    try:
        spec = json.loads(ctx.payload or b"{}")
    except ValueError:
        spec = {}
    if spec.get("sleep") and ctx.attempt in spec.get("sleep_attempts", [1]):
        deadline = time.monotonic() + float(spec["sleep"])
        while time.monotonic() < deadline and not ctx.cancelled:
            time.sleep(0.05)


# -- the history ---------------------------------------------------------------------------------


@dataclass
class Created:
    name: str
    job_id: uuid.UUID
    scheduled_at: datetime
    idempotent: bool


@dataclass
class History:
    """Client calls of one run plus, after :meth:`collect`, the database's and handler's view."""

    created_jobs: list[Created] = field(default_factory=list)
    jobs: dict = field(default_factory=dict)  # job_id -> row dict
    attempts: dict = field(default_factory=dict)  # job_id -> [row dict] by attempt
    executions: list[dict] = field(default_factory=list)
    notes: dict = field(default_factory=dict)

    def created(self, job, idempotent: bool = False) -> None:
        """Records a ``CreateJob`` reply (an SDK ``Job``)."""
        self.created_jobs.append(
            Created(job.name, uuid.UUID(job.name.rsplit("/", 1)[1]), job.schedule_time, idempotent)
        )

    def collect(self, db_url: str, record_path: str) -> History:
        """Reads jobs, attempts and handler executions (call after the run)."""
        ids = [c.job_id for c in self.created_jobs]
        with psycopg.connect(db_url.replace("postgresql+psycopg://", "postgresql://")) as c:
            cur = c.cursor(row_factory=dict_row)
            self.jobs = {
                r["id"]: r
                for r in cur.execute(
                    # state, version and started_at as a client sees them: a QUEUED row whose current
                    # attempt is RUNNING is a RUNNING job (the accept writes only the attempt)
                    f"SELECT j.id, {_RUN} THEN 'RUNNING' ELSE j.state END AS state, "
                    f"j.version + {_RUN} THEN 1 ELSE 0 END AS version, j.attempt, j.scheduled_at, "
                    f"j.dispatched_at, {_RUN} THEN a.accepted_at ELSE j.started_at END AS started_at, "
                    "j.finished_at, j.idempotent, j.failure_class FROM jobs j LEFT JOIN attempts a "
                    "ON a.job_id = j.id AND a.attempt = j.attempt WHERE j.id = ANY(%s)",
                    (ids,),
                )
            }
            self.attempts = collections.defaultdict(list)
            for r in cur.execute(
                "SELECT job_id, attempt, shard, token, state, dispatcher_id, worker_id, claimed_at, "
                "accepted_at, lease_expires_at, finished_at, failure_class FROM attempts "
                "WHERE job_id = ANY(%s) ORDER BY job_id, attempt",
                (ids,),
            ):
                self.attempts[r["job_id"]].append(r)
        self.executions = []
        if os.path.exists(record_path):
            with open(record_path) as f:
                for line in f:
                    p = line.split()
                    if len(p) >= 6:
                        self.executions.append(
                            {
                                "name": p[0],
                                "job_id": uuid.UUID(p[0].rsplit("/", 1)[1]),
                                "attempt": int(p[1]),
                                "key": p[2],
                                "token": int(p[3]),
                                "wall": float(p[4]),
                                "pid": int(p[5]),
                            }
                        )
        return self


# -- the checker ---------------------------------------------------------------------------------


@dataclass
class Report:
    ok: bool
    violations: list[str]
    stats: dict

    def __str__(self) -> str:
        head = f"checker: {'ok' if self.ok else f'{len(self.violations)} violation(s)'}; {self.stats}"
        return "\n  ".join([head, *self.violations[:50]])


def _path(job: dict, atts: list[dict]) -> list[JobState]:
    """The job-state path implied by its attempts (what can be observed after the fact)."""
    path = [JobState.SCHEDULED]
    for i, a in enumerate(atts):
        last = i == len(atts) - 1
        path.append(JobState.QUEUED)
        if a["accepted_at"] is not None:
            path.append(JobState.RUNNING)
        st = a["state"]
        if st in (AttemptState.QUEUED, AttemptState.RUNNING):
            continue  # still live: the job is QUEUED / RUNNING
        if not last or job["state"] == JobState.SCHEDULED:
            path.append(JobState.SCHEDULED)  # a retry (after FAILED/LOST)
        else:
            path.append(job["state"])
    if not atts and job["state"] != JobState.SCHEDULED:
        path.append(job["state"])
    return path


def check(h: History, *, skew_margin_s: float = 1.0, require_terminal: bool = True) -> Report:
    """Checks the invariants listed in the module docstring; returns a :class:`Report`."""
    v: list[str] = []
    stats: collections.Counter[str] = collections.Counter()
    execs: collections.defaultdict[uuid.UUID, list[dict]] = collections.defaultdict(list)
    for e in h.executions:
        execs[e["job_id"]].append(e)
    created_ids = {c.job_id for c in h.created_jobs}
    for jid in execs:
        if jid not in created_ids:
            v.append(f"execution of a job nobody created: {jid}")
    for c in h.created_jobs:
        job = h.jobs.get(c.job_id)
        if job is None:
            v.append(f"LOST: {c.name} created but not in the database")
            continue
        stats["jobs"] += 1
        stats[f"job_{job['state']}"] += 1
        atts = h.attempts.get(c.job_id, [])
        stats["attempts"] += len(atts)
        # never lost
        if job["state"] not in TERMINAL:
            if require_terminal or job["state"] not in (
                JobState.SCHEDULED,
                JobState.QUEUED,
                JobState.RUNNING,
            ):
                v.append(f"NOT DONE: {c.name} is {job['state']} (attempt {job['attempt']})")
        # attempt numbering and per-attempt sanity
        if [a["attempt"] for a in atts] != list(range(1, len(atts) + 1)) or job["attempt"] != len(atts):
            v.append(f"GAP: {c.name} attempts {[a['attempt'] for a in atts]}, job.attempt {job['attempt']}")
        for i, a in enumerate(atts):
            tag = f"{c.name}#{a['attempt']}"
            stats[f"attempt_{a['state']}"] += 1
            if a["claimed_at"] < c.scheduled_at:
                v.append(f"EARLY: {tag} claimed {a['claimed_at']} < scheduled {c.scheduled_at}")
            if (
                i > 0
                and atts[i - 1]["finished_at"] is not None
                and a["claimed_at"] < atts[i - 1]["finished_at"]
            ):
                v.append(
                    f"EARLY RETRY: {tag} claimed {a['claimed_at']} before #{i} ended {atts[i - 1]['finished_at']}"
                )
            if a["accepted_at"] is not None and a["accepted_at"] < a["claimed_at"]:
                v.append(f"ORDER: {tag} accepted before claimed")
            if i < len(atts) - 1 and a["state"] not in (AttemptState.FAILED, AttemptState.LOST):
                v.append(f"ILLEGAL: {tag} is {a['state']} but a later attempt exists")
        if atts and job["state"] != JobState.SCHEDULED:
            last = atts[-1]
            if last["claimed_at"] < job["scheduled_at"]:
                v.append(
                    f"EARLY: {c.name} last attempt claimed {last['claimed_at']} < scheduled {job['scheduled_at']}"
                )
            want = {
                JobState.SUCCEEDED: {AttemptState.SUCCEEDED},
                JobState.QUEUED: {AttemptState.QUEUED},
                JobState.RUNNING: {AttemptState.RUNNING},
                JobState.CANCELLED: {
                    AttemptState.CANCELLED,
                    AttemptState.FAILED,
                    AttemptState.LOST,
                    AttemptState.SUCCEEDED,
                },
                JobState.FAILED: {AttemptState.FAILED},
                JobState.DEAD: {AttemptState.FAILED, AttemptState.LOST},
            }.get(job["state"])
            if want is not None and last["state"] not in want:
                v.append(f"MISMATCH: {c.name} is {job['state']} but its last attempt is {last['state']}")
        if sum(1 for a in atts if a["state"] == AttemptState.SUCCEEDED) > 1:
            v.append(f"DUPLICATE: {c.name} has two SUCCEEDED attempts")
        if sum(1 for a in atts if a["state"] in (AttemptState.QUEUED, AttemptState.RUNNING)) > 1:
            v.append(
                f"DUPLICATE: {c.name} has two live attempts {[(a['attempt'], a['state']) for a in atts]}"
            )
        live = sorted(
            (a for a in atts if a["accepted_at"] is not None and a["state"] != AttemptState.LOST),
            key=lambda a: a["accepted_at"],
        )
        for x, y in zip(live, live[1:]):
            if x["finished_at"] is None or y["accepted_at"] < x["finished_at"]:
                v.append(f"OVERLAP: {c.name} attempts {x['attempt']} and {y['attempt']} RUNNING at once")
        # legal transitions
        path = _path(job, atts)
        for src, dst in zip(path, path[1:]):
            if not is_legal(src, dst):
                v.append(f"TRANSITION: {c.name} {src} -> {dst} in {path}")
                break
        # executions
        by_att = {a["attempt"]: a for a in atts}
        ex = execs.get(c.job_id, [])
        stats["executions"] += len(ex)
        per_attempt = collections.Counter(e["attempt"] for e in ex)
        for n, k in per_attempt.items():
            if k > 1:
                v.append(f"DUPLICATE: {c.name} attempt {n} executed {k} times")
        for e in ex:
            a = by_att.get(e["attempt"])
            if a is None:
                v.append(f"PHANTOM: {c.name} executed attempt {e['attempt']} that has no attempt row")
                continue
            if e["token"] != a["token"]:
                v.append(
                    f"STALE TOKEN: {c.name}#{e['attempt']} ran under token {e['token']}, attempt has {a['token']}"
                )
            if a["accepted_at"] is None:
                v.append(f"UNACCEPTED: {c.name}#{e['attempt']} executed but never accepted")
            if e["wall"] < c.scheduled_at.timestamp() - skew_margin_s:
                v.append(
                    f"EARLY: {c.name}#{e['attempt']} started {e['wall']:.3f} < scheduled "
                    f"{c.scheduled_at.timestamp():.3f} - {skew_margin_s}"
                )
        if len(per_attempt) > 1:
            stats["jobs_executed_more_than_once"] += 1
            for n in per_attempt:
                a = by_att.get(n)
                if (
                    a is not None
                    and n != max(per_attempt)
                    and a["state"] not in (AttemptState.LOST, AttemptState.FAILED)
                ):
                    v.append(
                        f"DUPLICATE: {c.name} re-executed although attempt {n} is {a['state']} (not LOST/FAILED)"
                    )
        if (
            job["state"] == JobState.SUCCEEDED
            and not ex
            and h.executions is not None
            and h.notes.get("expect_executions", True)
        ):
            v.append(f"NO EXECUTION: {c.name} SUCCEEDED but the handler never recorded it")
    return Report(not v, v, {k: stats[k] for k in sorted(stats)})


def seeded_mix(rng, n: int, *, max_delay_s: float) -> list[timedelta]:
    """``n`` delays: a third due now, the rest uniform in (0, max_delay_s], from ``rng``."""
    return [
        timedelta(0) if rng.random() < 1 / 3 else timedelta(seconds=round(rng.uniform(0.05, max_delay_s), 3))
        for _ in range(n)
    ]


# -- shared helpers of the fault tests ------------------------------------------------------------

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAULTS_DIR = os.path.dirname(os.path.abspath(__file__))


def worker_env(record: str, **extra) -> dict:
    """Environment of a worker process running ``history:run``."""
    return {
        "GNOMON_TEST_RECORD": record,
        "PYTHONPATH": os.pathsep.join([TESTS_DIR, FAULTS_DIR]),
        **{k: str(v) for k, v in extra.items()},
    }


def metric(address: str, name: str) -> float:
    """Sum of every sample of ``name`` on the Prometheus endpoint at ``address`` (0 if absent)."""
    from gnomon_test_support import scrape

    text = scrape(address)
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def db_now(db_url: str) -> datetime:
    """``now()`` of the database (the one clock)."""
    with psycopg.connect(db_url.replace("postgresql+psycopg://", "postgresql://")) as c:
        row = c.execute("SELECT now()").fetchone()
        assert row is not None
        return row[0]
