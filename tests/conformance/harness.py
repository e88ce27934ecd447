"""The conformance harness (imported as ``harness``; pytest puts ``tests/conformance`` on ``sys.path``):
a real suite, a driver of one SDK started as a subprocess with the contract's environment, its events
file, and the history as the API reports it. ``tests/conformance/README.md`` is the contract.

    Conformance   one suite + the driver under test: start drivers, create jobs, read jobs/attempts
    most_running  the peak number of handlers a driver ran at once
    DriverProcess one running driver: wait for ``ready``, SIGTERM, wait for its exit, its log
    read_events   the events file, each line checked against the contract's shape
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drivers import Driver

from gnomon.sdk import Client, Job, JobAttempt, RetryPolicy

#: Settings of the conformance suite. Leases are noticed lost within about a second (heartbeat
#: interval, reaper sweep and skew margin short), released attempts are re-delivered quickly (relay),
#: and the queue-level brakes (retry budget, circuit breaker) are off: the suite judges a worker, and
#: a queue that fails on purpose must not be paused by the scheduler's own protection.
SUITE_ENV = {
    "GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "0.5",
    "GNOMON_DISPATCHER_RELAY_INTERVAL_S": "0.3",
    "GNOMON_REAPER_INTERVAL_S": "0.2",
    "GNOMON_REAPER_SKEW_MARGIN_S": "0.5",
    "GNOMON_RETRY_BUDGET_ENABLED": "false",
    "GNOMON_BREAKER_ENABLED": "false",
}

#: Retries without waiting: 0.2 s before every retry (no jitter), unless THROTTLED says otherwise.
FAST_RETRY = RetryPolicy(initial_backoff=0.2, max_backoff=0.2, multiplier=1.0, jitter=0.0)

#: Job states after which nothing changes.
FINAL = frozenset({"SUCCEEDED", "DEAD", "CANCELLED", "EXPIRED"})

#: Fields every event carries, and those of each kind (the contract).
_COMMON = {"event", "job", "attempt", "pid", "t"}
_KINDS: dict[str, set[str]] = {
    "ready": set(),
    "start": {"fencing_token", "idempotency_key", "last_checkpoint"},
    "finish": {"outcome", "class"},
    "cancelled": {"reason"},
    "checkpointed": set(),
}


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events appended to ``path`` so far ([] if none), oldest first. A last line without its
    newline (being written) is left for the next read. Raises AssertionError for a line that is not
    a JSON object of the contract's shape (unknown kind, missing field, wrong type)."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    out = []
    for line in text.split("\n")[:-1]:
        if not line.strip():
            continue
        ev = json.loads(line)
        assert isinstance(ev, dict) and ev.get("event") in _KINDS, f"not a contract event: {line!r}"
        missing = (_COMMON | _KINDS[ev["event"]]) - set(ev)
        assert not missing, f"event lacks {sorted(missing)}: {line!r}"
        assert isinstance(ev["attempt"], int) and isinstance(ev["pid"], int), line
        assert isinstance(ev["t"], (int, float)) and isinstance(ev["job"], str), line
        if ev["event"] == "finish":
            assert ev["outcome"] in ("succeeded", "failed"), line
        if ev["event"] == "cancelled":
            assert ev["reason"] in ("cancel", "lease_lost", "shutdown", "start_to_close"), line
        out.append(ev)
    return out


def of(events: Iterable[dict[str, Any]], kind: str, job: str | None = None) -> list[dict[str, Any]]:
    """The events of ``kind`` (of ``job`` if given)."""
    return [e for e in events if e["event"] == kind and (job is None or e["job"] == job)]


def most_running(events: Iterable[dict[str, Any]], pid: int) -> int:
    """The most handlers process ``pid`` ran at once: the peak of ``start`` minus ``finish`` events in
    the order it wrote them (a handler killed before ``finish`` counts as running to the end)."""
    running = peak = 0
    for e in events:
        if e["pid"] == pid and e["event"] in ("start", "finish"):
            running += 1 if e["event"] == "start" else -1
            peak = max(peak, running)
    return peak


@dataclass
class DriverProcess:
    """One driver subprocess (own session, so its process group is its pid; registered with the
    suite's watchdog, so it dies with the test process)."""

    popen: subprocess.Popen[bytes]
    events_path: Path
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def events(self) -> list[dict[str, Any]]:
        """Every event in the (shared) events file of its case."""
        return read_events(self.events_path)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Waits for this process's ``ready`` event; AssertionError (with its log) if it exits first
        or ``timeout_s`` seconds pass."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(e["event"] == "ready" and e["pid"] == self.pid for e in self.events()):
                return
            if self.popen.poll() is not None:
                raise AssertionError(
                    f"driver exited with {self.popen.returncode} before ready:\n{self.log()}"
                )
            time.sleep(0.05)
        raise AssertionError(f"driver not ready after {timeout_s} s:\n{self.log()}")

    def terminate(self) -> None:
        """Sends SIGTERM (the graceful drain)."""
        self.popen.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout_s: float) -> int:
        """Waits for the process to exit and returns its exit code; AssertionError after ``timeout_s``."""
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"driver still running after {timeout_s} s:\n{self.log()}") from None

    def kill(self) -> None:
        """SIGKILLs its process group (if still there) and reaps it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)
        from gnomon.devservers import Watchdog

        Watchdog.remove(f"conformance-driver-{self.popen.pid}")

    def log(self, lines: int = 40) -> str:
        """The last ``lines`` lines of its stdout/stderr."""
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


@dataclass
class Conformance:
    """The suite (``gnomon.cli.suite.Suite``, started) and the driver under test; every driver a
    case starts is killed when the case ends (:meth:`case`)."""

    suite: Any
    driver: Driver
    work: Path
    client: Client
    running: list[DriverProcess] = field(default_factory=list)

    def driver_env(self, queue: str, events: Path, concurrency: int) -> dict[str, str]:
        """The environment of the contract: the inherited one without any ``GNOMON_*``/``CONFORMANCE_*``
        variable (nothing but the contract reaches the driver), then the suite's address, namespace
        and credentials, and the case's queue, concurrency and events file."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GNOMON_", "CONFORMANCE_"))}
        env.update(
            {
                "GNOMON_API": self.suite.api_address,
                "GNOMON_NAMESPACE": "default",
                "CONFORMANCE_QUEUE": queue,
                "CONFORMANCE_CONCURRENCY": str(concurrency),
                "CONFORMANCE_EVENTS": str(events),
                "XDG_CONFIG_HOME": str(self.work / "config"),  # no user profile for SDKs that read one
                "PYTHONUNBUFFERED": "1",
            }
        )
        creds = self.suite.credentials
        if creds is None:
            env["GNOMON_INSECURE"] = "true"
        else:
            env["GNOMON_TLS_CA_FILE"] = creds.ca_file
            env["GNOMON_API_KEY"] = Path(creds.admin_key_file).read_text().strip()
        return env

    def start(self, queue: str, *, concurrency: int = 4, ready: bool = True) -> DriverProcess:
        """Starts the driver serving ``queue`` (events to ``<work>/<queue>.events.jsonl``, shared by
        every driver of the queue) and, with ``ready``, waits for its ``ready`` event."""
        from gnomon.devservers import Watchdog

        events = self.work / f"{queue}.events.jsonl"
        n = sum(1 for p in self.running if p.events_path == events)
        log_path = self.work / f"{queue}.driver-{n}.log"
        argv = [
            str(self.driver.cwd / a) if a.endswith((".py", ".js")) and not os.path.isabs(a) else a
            for a in self.driver.argv
        ]
        with open(log_path, "ab") as logf:
            popen = subprocess.Popen(
                argv,
                cwd=self.driver.cwd,
                env=self.driver_env(queue, events, concurrency),
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        Watchdog.add(f"conformance-driver-{popen.pid}", kill=[popen.pid])
        proc = DriverProcess(popen, events, log_path)
        self.running.append(proc)
        if ready:
            proc.wait_ready()
        return proc

    @contextlib.contextmanager
    def case(self) -> Iterator[Conformance]:
        """Kills every driver started inside the block when it ends."""
        try:
            yield self
        finally:
            for p in self.running:
                p.kill()
            self.running.clear()

    def create(self, queue: str, command: dict[str, Any], n: int = 1, **job: Any) -> list[str]:
        """Creates ``n`` jobs on ``queue`` with the JSON payload ``command`` (``job``: more
        ``create_job`` arguments); returns their names in creation order."""
        if n == 1:
            return [self.client.create_job(queue, command, **job).name]
        with ThreadPoolExecutor(8) as pool:
            return [
                j.name for j in pool.map(lambda _: self.client.create_job(queue, command, **job), range(n))
            ]

    def jobs(self, queue: str) -> dict[str, Job]:
        """Every job of ``queue`` by name (one List call per 1000 jobs)."""
        return {j.name: j for j in self.client.list_jobs(queue=queue, page_size=1000)}

    def wait_final(self, queue: str, names: list[str], timeout_s: float) -> dict[str, Job]:
        """Waits until every job in ``names`` is in a final state; returns them by name. On timeout,
        AssertionError with the states reached and the drivers' logs."""
        deadline = time.monotonic() + timeout_s
        while True:
            jobs = self.jobs(queue)
            pending = [n for n in names if jobs[n].state not in FINAL]
            if not pending:
                return {n: jobs[n] for n in names}
            if time.monotonic() > deadline:
                states: dict[str, int] = {}
                for n in pending:
                    states[jobs[n].state] = states.get(jobs[n].state, 0) + 1
                logs = "\n".join(f"--- {p.log_path.name}\n{p.log()}" for p in self.running)
                raise AssertionError(
                    f"{len(pending)} of {len(names)} jobs not final after {timeout_s} s: {states}\n{logs}"
                )
            time.sleep(0.2)

    def attempts(self, name: str) -> list[JobAttempt]:
        """The attempt history of job ``name``, oldest first."""
        return self.client.list_job_attempts(name)


def failure_class(a: JobAttempt | Job) -> str:
    """The failure class name of an attempt or job, upper case without prefix (``"TRANSIENT"``),
    whether the SDK reports it as a string or as an enum name; ``""`` for none (or UNSPECIFIED)."""
    name = str(getattr(a.failure_class, "name", a.failure_class) or "").upper().removeprefix("FAILURE_CLASS_")
    return "" if name == "UNSPECIFIED" else name
