"""The dispatcher's pending ack tasks are strongly referenced until they have sent their acks.

Found in the structure review: ``WorkerServicer._ack_later`` started a task with
``asyncio.create_task`` and kept no reference; the event loop holds tasks only weakly, so a task
waiting on a database write could be garbage-collected and its acks never sent.
"""

from __future__ import annotations

import asyncio
import gc

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.dispatcher.servicer import WorkerServicer
from gnomon.dispatcher.sessions import SessionRegistry, WorkerSession


async def test_ack_tasks_are_held_until_their_acks_are_sent() -> None:
    servicer = WorkerServicer(
        SessionRegistry(),
        None,  # type: ignore[arg-type]  # no write is submitted here: the future below stands for it
        dispatcher_id="d",
        region="local",
        heartbeat_interval_s=1.0,
        on_credits=lambda: None,
    )
    session = WorkerSession(
        session_id=1, worker_id="w", namespace="default", queues=frozenset({"q"}), credits=1
    )
    write_done: asyncio.Future[list[object]] = asyncio.get_running_loop().create_future()
    ref = wpb.AttemptRef(job="namespaces/default/jobs/00000000-0000-0000-0000-000000000001", attempt=1)

    servicer._ack_later(
        session,
        [ref],
        write_done,
        wpb.ACK_KIND_ACCEPT,
        lambda r, _res: wpb.Ack(attempt=r, kind=wpb.ACK_KIND_ACCEPT, ok=True),
    )
    gc.collect()
    assert len(servicer._ack_tasks) == 1  # referenced while its write is pending

    write_done.set_result([None])
    msg = await asyncio.wait_for(session.out.get(), 5)
    assert [a.ok for a in msg.acks.acks] == [True] and msg.acks.acks[0].attempt == ref
    for _ in range(10):  # the done callback runs on a later loop iteration
        if not servicer._ack_tasks:
            break
        await asyncio.sleep(0)
    assert not servicer._ack_tasks
