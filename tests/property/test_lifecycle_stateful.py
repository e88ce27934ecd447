"""Stateful property test of the job lifecycle against the real storage (PostgreSQL).

Hypothesis interleaves create / claim / accept (also duplicate and stale deliveries) / heartbeat /
result / cancel / lease loss + reap / fencing-token hand-over, and after every step checks:
every observed state change is a legal transition (gnomon.common.domain.states) with a larger version;
a job never has two live (QUEUED or RUNNING) attempts; a SUCCEEDED job has exactly one SUCCEEDED
attempt and no job has two; no attempt is accepted by two workers.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from sqlalchemy import select, update

from gnomon.common.domain.attempts import AttemptKey, Result
from gnomon.common.domain.states import is_legal
from gnomon.common.errors import StaleFencingToken
from gnomon.common.storage import cancel as cancel_store
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import fencing as fencing_store
from gnomon.common.storage import job_view, reaping
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage import leases as lease_store
from gnomon.common.storage import results as result_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.schema import attempts, jobs
from gnomon_attempt_support import accept_as_previous_release
from gnomon_test_support import fenced, new_job_spec, open_engine

CLASSES = ["TRANSIENT", "THROTTLED", "PERMANENT", "AMBIGUOUS"]


def make_machine(db_url: str):
    class Lifecycle(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.loop = asyncio.new_event_loop()
            self.engine = open_engine(db_url, pool_size=2)
            self.shard = 0
            self.token = self.run(self._next_token())
            self.deliveries: list[AttemptKey] = []
            self.seen: dict[uuid.UUID, tuple[str, int]] = {}

        def run(self, coro):
            return self.loop.run_until_complete(coro)

        async def _next_token(self) -> int:
            async with self.engine.connect() as c:
                from gnomon.common.storage.schema import shard_owners

                cur = (
                    await c.execute(
                        select(shard_owners.c.token).where(
                            shard_owners.c.region == "local", shard_owners.c.shard == 0
                        )
                    )
                ).scalar()
            tok = (cur or 0) + 1
            await run_transaction(
                self.engine, lambda c: fencing_store.record_ownership(c, "local", 0, tok, "prop")
            )
            return tok

        def teardown(self):
            self.run(self.engine.dispose())
            self.loop.close()

        @rule(idempotent=st.booleans(), max_attempts=st.integers(1, 3))
        def create(self, idempotent, max_attempts):
            jid = uuid.uuid4()
            new = new_job_spec(
                id=jid,
                queue="prop",
                schedule_at=datetime.now(UTC) - timedelta(seconds=1),
                max_attempts=max_attempts,
                idempotent=idempotent,
            )
            self.run(run_transaction(self.engine, lambda c: jobs_store.insert_job(c, new)))
            self.seen[jid] = ("SCHEDULED", 1)

        @rule(limit=st.integers(1, 3), stale=st.booleans())
        def claim(self, limit, stale):
            tok = self.token - 1 if stale else self.token
            try:
                got = self.run(
                    fenced(
                        self.engine,
                        {0: tok},
                        lambda fx: claim_store.claim_due(
                            fx, targets=[("default", "prop")], limit=limit, dispatcher_id="prop"
                        ),
                    )
                )
            except StaleFencingToken:
                assert stale
                return
            assert not stale or not got, "a stale token claimed jobs"
            # make retried jobs due at once (retry backoff would otherwise hide them)
            self.deliveries += [AttemptKey(c.job_id, c.attempt, c.version, c.token) for c in got]

        @rule()
        def hand_over(self):
            self.token = self.run(self._next_token())

        @rule(data=st.data(), worker=st.sampled_from(["w1", "w2"]))
        def accept(self, data, worker):
            if self.deliveries:
                k = data.draw(st.sampled_from(self.deliveries))
                self.run(run_transaction(self.engine, lambda c: lease_store.accept(c, [k], worker)))

        @rule(data=st.data())
        def accept_as_previous_release(self, data):
            # the rows an older release's accept left (jobs.state RUNNING): read and moved on alike
            if self.deliveries:
                k = data.draw(st.sampled_from(self.deliveries))
                self.run(run_transaction(self.engine, lambda c: accept_as_previous_release(c, k)))

        @rule(data=st.data())
        def heartbeat(self, data):
            if self.deliveries:
                k = data.draw(st.sampled_from(self.deliveries))
                self.run(run_transaction(self.engine, lambda c: lease_store.heartbeat(c, [k])))

        @rule(data=st.data(), ok=st.booleans(), cls=st.sampled_from(CLASSES))
        def result(self, data, ok, cls):
            if self.deliveries:
                k = data.draw(st.sampled_from(self.deliveries))
                r = Result(key=k, succeeded=ok, failure_class=cls, error="boom")
                self.run(
                    run_transaction(
                        self.engine, lambda c: result_store.complete(c, [r], retry_delay_s=lambda r, a: 0)
                    )
                )

        @rule(data=st.data())
        def lose_lease_and_reap(self, data):
            if self.deliveries:
                k = data.draw(st.sampled_from(self.deliveries))

                async def go():
                    async with self.engine.begin() as c:
                        await c.execute(
                            update(attempts)
                            .where(attempts.c.job_id == k.job_id, attempts.c.attempt == k.attempt)
                            .values(lease_expires_at=datetime.now(UTC) - timedelta(minutes=1))
                        )
                    await run_transaction(
                        self.engine,
                        lambda c: reaping.reap_lost_leases(
                            c, region="local", skew_margin_s=0, limit=50, retry_delay_s=lambda a: 0
                        ),
                    )

                self.run(go())

        @rule(data=st.data())
        def cancel(self, data):
            if self.seen:
                jid = data.draw(st.sampled_from(sorted(self.seen)))
                self.run(run_transaction(self.engine, lambda c: cancel_store.cancel_job(c, "default", jid)))

        @invariant()
        def lifecycle_is_legal(self) -> None:
            if not self.seen:
                return

            async def read():
                async with self.engine.connect() as c:
                    js = (
                        await c.execute(
                            # as a client sees them (derived from the current attempt)
                            select(jobs.c.id, job_view.STATE, job_view.VERSION)
                            .select_from(job_view.JOB_FROM)
                            .where(jobs.c.id.in_(list(self.seen)))
                        )
                    ).all()
                    ats = (
                        await c.execute(
                            select(
                                attempts.c.job_id, attempts.c.attempt, attempts.c.state, attempts.c.worker_id
                            ).where(attempts.c.job_id.in_(list(self.seen)))
                        )
                    ).all()
                return js, ats

            js, ats = self.run(read())
            for jid, state, version in js:
                prev_state, prev_version = self.seen[jid]
                assert version >= prev_version, (jid, prev_state, state, prev_version, version)
                if state != prev_state:
                    # a change of state is a legal transition and bumps the version (a cancel request
                    # on a RUNNING job bumps the version without changing the state)
                    assert version > prev_version, (jid, prev_state, state, prev_version, version)
                    assert is_legal(prev_state, state), f"illegal {prev_state} -> {state}"
                self.seen[jid] = (state, version)
            by_job: dict = {}
            for jid, att, st_, worker in ats:
                by_job.setdefault(jid, []).append((att, st_, worker))
            for jid, state, _ in js:
                rows = by_job.get(jid, [])
                live = [r for r in rows if r[1] in ("QUEUED", "RUNNING")]
                assert len(live) <= 1, f"two live attempts: {rows}"
                succeeded = [r for r in rows if r[1] == "SUCCEEDED"]
                assert len(succeeded) <= 1, f"two accepted successes: {rows}"
                if state == "SUCCEEDED":
                    assert len(succeeded) == 1
                if state in ("QUEUED", "RUNNING"):
                    assert len(live) == 1, f"{state} without a live attempt: {rows}"

    return Lifecycle


def test_job_lifecycle_is_always_a_legal_path(db_url):
    machine = make_machine(db_url)
    machine.TestCase.settings = settings(
        max_examples=10, stateful_step_count=20, deadline=None, suppress_health_check=list(HealthCheck)
    )
    machine.TestCase().runTest()
