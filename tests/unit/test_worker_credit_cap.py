"""The running total of a worker session's credits is capped at the hello limit (docs/api.md "Worker
stream limits"): many ``WorkerCredits`` messages cannot grow it past 10000; the excess is ignored."""

from __future__ import annotations

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.dispatcher.hello import MAX_CREDITS
from gnomon.dispatcher.servicer import WorkerServicer
from gnomon.dispatcher.sessions import SessionRegistry


async def _feed(messages):
    for m in messages:
        yield m


async def test_credit_messages_are_clipped_at_the_hello_limit() -> None:
    registry = SessionRegistry()
    wakes: list[int] = []
    servicer = WorkerServicer(
        registry,
        None,  # type: ignore[arg-type]  # credits write nothing
        dispatcher_id="d",
        region="local",
        heartbeat_interval_s=1.0,
        on_credits=lambda: wakes.append(1),
    )
    s = registry.add("w", "default", ["q"], 9_000)
    msgs = [wpb.LeaseRequest(credits=wpb.WorkerCredits(credits=2**31 - 1)) for _ in range(50)]
    msgs += [wpb.LeaseRequest(credits=wpb.WorkerCredits(credits=-5))]
    await servicer._read(s, _feed(msgs))
    assert s.credits == MAX_CREDITS == 10_000
    assert len(wakes) == 1  # only the message that added something woke the claim loop
    assert registry.capacity() == {("default", "q"): MAX_CREDITS}


def test_add_credits_returns_what_was_added() -> None:
    registry = SessionRegistry()
    s = registry.add("w", "default", ["q"], 10)
    assert registry.add_credits(s, 5, cap=20) == 5 and s.credits == 15
    assert registry.add_credits(s, 50, cap=20) == 5 and s.credits == 20
    assert registry.add_credits(s, 1, cap=20) == 0 and s.credits == 20
    s.credits = 25  # above the cap (e.g. a lowered limit): nothing added, nothing taken
    assert registry.add_credits(s, 3, cap=20) == 0 and s.credits == 25
