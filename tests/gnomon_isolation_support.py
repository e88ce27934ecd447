"""The honest tenant of the isolation tests (docs/security.md "Limits and quotas").

:func:`honest_tenant` runs an honest tenant beside an attack: a principal of its own with client,
worker and reader grants on ``namespace``, a real ``gnomon worker`` process serving ``queue`` with a
no-op handler, and a thread creating one job due every ``period_s`` (each created ``lead_s`` ahead of
its due time). On exit it stops creating, waits until every job it created is finished, and fills
``probe.report`` (:class:`LagReport`) from the jobs themselves: dispatch lag is the job's
``dispatch_time - schedule_time``, both taken by the services (the database clock), so the test
process's own load does not enter the figure.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gnomon.sdk import Client, GnomonError
from gnomon_test_support import wait_for

TESTS_DIR = str(Path(__file__).resolve().parent)

#: States in which an honest job is finished.
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "DEAD", "CANCELLED", "EXPIRED", "SKIPPED"})


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1, nearest rank) of ``values``; 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q * len(ordered)))) - 1]


@dataclass
class LagReport:
    """What the honest tenant saw: ``jobs`` created (``create_errors`` creates refused or failed),
    ``succeeded`` of them, ``states`` (job name -> final state) and the dispatch lags in seconds."""

    jobs: int = 0
    succeeded: int = 0
    create_errors: list[str] = field(default_factory=list)
    lags_s: list[float] = field(default_factory=list)
    states: dict[str, str] = field(default_factory=dict)

    @property
    def p50_s(self) -> float:
        return percentile(self.lags_s, 0.50)

    @property
    def p99_s(self) -> float:
        return percentile(self.lags_s, 0.99)

    @property
    def max_s(self) -> float:
        return max(self.lags_s, default=0.0)

    def assert_within(self, p99_s: float = 1.0, min_jobs: int = 10) -> None:
        """Asserts the honest tenant's bound: at least ``min_jobs`` jobs created, none refused, every
        one SUCCEEDED, and the p99 dispatch lag at most ``p99_s`` seconds."""
        assert not self.create_errors, f"honest creates failed: {self.create_errors[:3]} ({self})"
        assert self.jobs >= min_jobs, f"too few honest jobs to measure: {self}"
        bad = {n: s for n, s in self.states.items() if s != "SUCCEEDED"}
        assert not bad, f"honest jobs did not succeed: {list(bad.items())[:5]} ({self})"
        assert self.p99_s <= p99_s, f"honest p99 dispatch lag {self.p99_s:.3f} s > {p99_s} s ({self})"

    def __str__(self) -> str:
        return (
            f"honest tenant: {self.jobs} jobs, {self.succeeded} succeeded, {len(self.create_errors)} create "
            f"errors; dispatch lag p50 {self.p50_s * 1000:.0f} ms, p99 {self.p99_s * 1000:.0f} ms, "
            f"max {self.max_s * 1000:.0f} ms"
        )


@dataclass
class HonestTenant:
    """A running honest tenant (see :func:`honest_tenant`); ``report`` is filled on exit."""

    namespace: str
    queue: str
    api_key: str
    report: LagReport = field(default_factory=LagReport)


def honest_key(suite, namespace: str) -> str:
    """Creates principal ``honest-<namespace>-<hex>`` with client, worker (every queue) and reader
    grants on ``namespace`` as the suite's admin; returns a fresh API key of it."""
    pid = f"honest-{namespace}-{uuid.uuid4().hex[:6]}"
    with Client(api=suite.api_address) as admin:
        admin.create_principal(pid)
        for role in ("client", "worker", "reader"):
            admin.grant_role(pid, role, namespace)
        return admin.create_api_key(pid).token


@contextmanager
def honest_tenant(
    suite,
    namespace: str = "acme",
    queue: str = "honest",
    *,
    period_s: float = 0.1,
    lead_s: float = 1.0,
    settle_s: float = 60.0,
) -> Iterator[HonestTenant]:
    """Runs the honest tenant while the block runs (module docstring).

    Before yielding, waits until the worker has run a first job (so start-up is not measured). On
    exit waits at most ``settle_s`` seconds for the jobs to finish (unfinished ones stay in
    ``report.states`` with their state, failing :meth:`LagReport.assert_within`) and stops the worker.
    """
    key = honest_key(suite, namespace)
    probe = HonestTenant(namespace, queue, key)
    worker = suite.start_worker(
        [queue],
        "gnomon_test_handlers:noop",
        concurrency=8,
        env={"GNOMON_API_KEY": key, "GNOMON_NAMESPACE": namespace, "PYTHONPATH": TESTS_DIR},
    )
    client = Client(api=suite.api_address, namespace=namespace, api_key=key, timeout=30)
    names: list[str] = []
    stop = threading.Event()
    try:
        first = client.create_job(queue, b"warm-up")
        wait_for(lambda: client.get_job(first.name).state == "SUCCEEDED" or None, 60, "the honest worker")

        def create() -> None:
            due = datetime.now(UTC) + timedelta(seconds=lead_s)
            while not stop.is_set():
                wait = (due - datetime.now(UTC)).total_seconds() - lead_s
                if wait > 0 and stop.wait(wait):
                    break
                try:
                    names.append(client.create_job(queue, b"honest", schedule_time=due).name)
                except GnomonError as e:
                    probe.report.create_errors.append(f"{e.code.name} {e.reason}")
                due += timedelta(seconds=period_s)

        creator = threading.Thread(target=create, name="honest-creator", daemon=True)
        creator.start()
        yield probe
    finally:
        stop.set()
    creator.join(30)
    try:
        deadline = time.monotonic() + settle_s
        pending = list(names)
        report = probe.report
        report.jobs = len(names)
        while pending and time.monotonic() < deadline:
            still = []
            for name in pending:
                job = client.get_job(name)
                report.states[name] = job.state
                if job.state not in TERMINAL:
                    still.append(name)
                elif job.dispatch_time and job.schedule_time:
                    report.lags_s.append((job.dispatch_time - job.schedule_time).total_seconds())
            pending = still
            if pending:
                time.sleep(0.2)
        report.succeeded = sum(1 for s in report.states.values() if s == "SUCCEEDED")
    finally:
        client.close()
        suite.stop_proc(worker)
