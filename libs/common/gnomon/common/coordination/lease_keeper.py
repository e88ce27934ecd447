"""Keeping one etcd lease alive, and knowing when to stop trusting it (:class:`LeaseKeeper`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from gnomon.common.coordination.etcd_types import EtcdError

if TYPE_CHECKING:  # the client is only named in annotations
    from gnomon.common.coordination.etcd import EtcdClient

__all__ = ["LeaseKeeper"]

log = logging.getLogger("gnomon.common.coordination.etcd")


class LeaseKeeper:
    """Holds one etcd lease alive in the background and tells its holder when to stop trusting it.

    Safety rule (docs/concepts.md, "Coordination"): trust the lease only until a LOCAL deadline
    = (monotonic time when the last successful keepalive was SENT) + granted TTL - safety_margin_s.
    A holder that cannot renew stops acting before the lease expires; it does not wait to be fenced.

    Args:
        client: the etcd client to use (not closed by the keeper).
        ttl_s: lease TTL to request, whole seconds >= 1. etcd may grant more (its minimum TTL); the
            granted TTL reported by etcd is what the deadline uses.
        safety_margin_s: seconds subtracted from the TTL for the local deadline (covers clock-rate
            differences and scheduling delay); default ``max(1.0, ttl_s / 3)``. Must be < ``ttl_s``.

    Raises:
        ValueError: ``ttl_s`` < 1 or the margin is not in ``[0, ttl_s)``.

    Renewal runs every ``ttl / 3`` seconds. After a failed keepalive (transport error or no reply in
    time) it retries on a new stream every 0.2 s (at most ``ttl / 3``), each attempt bounded by the
    time left to the local deadline. When the deadline passes without a successful renewal, or etcd
    answers TTL 0 (lease gone), :attr:`lost` is set and renewal stops for good; take a new lease
    (a new keeper) to carry on. Time is ``time.monotonic()``.

    Typical use::

        keeper = LeaseKeeper(client, ttl_s=10)
        lease_id = await keeper.start()
        acquired, kv = await client.create_if_absent(key, me, lease_id)
        ...  # before each fenced action: if not keeper.valid(): stop acting
        await keeper.stop()
    """

    #: delay (seconds) between renewal attempts after a failed one (capped at ttl / 3)
    RETRY_DELAY_S = 0.2

    def __init__(self, client: EtcdClient, ttl_s: int = 10, *, safety_margin_s: float | None = None) -> None:
        if ttl_s < 1:
            raise ValueError("ttl_s must be >= 1 second")
        margin = max(1.0, ttl_s / 3) if safety_margin_s is None else float(safety_margin_s)
        if not 0 <= margin < ttl_s:
            raise ValueError(f"safety_margin_s must be in [0, ttl_s={ttl_s}); got {margin}")
        self._client = client
        self.ttl_s: int = ttl_s
        """TTL requested from etcd, seconds."""
        self.safety_margin_s: float = margin
        """Seconds the local deadline stays ahead of the granted TTL."""
        self.granted_ttl_s: int = 0
        """TTL etcd reported on the last successful grant/keepalive, seconds (0 before start)."""
        self.lost: asyncio.Event = asyncio.Event()
        """Set once the lease is known lost (TTL 0 reply, local deadline passed without renewal, renew task
        failed, or :meth:`stop` was called); never cleared."""
        self._lease_id = 0
        self._deadline = float("-inf")  # time.monotonic() seconds
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def lease_id(self) -> int:
        """The lease id granted by :meth:`start`.

        Raises:
            RuntimeError: :meth:`start` has not completed.
        """
        if not self._lease_id:
            raise RuntimeError("LeaseKeeper.start() has not granted a lease yet")
        return self._lease_id

    def valid(self) -> bool:
        """True while ``time.monotonic()`` is before the local deadline and the lease is not known lost."""
        return not self.lost.is_set() and time.monotonic() < self._deadline

    def remaining(self) -> float:
        """Seconds left until the local deadline; <= 0 when not :meth:`valid`."""
        if self.lost.is_set():
            return min(0.0, self._deadline - time.monotonic())
        return self._deadline - time.monotonic()

    async def start(self) -> int:
        """Grant the lease, start the background renew task, and return the lease id.

        Raises:
            RuntimeError: already started.
            EtcdError: the grant failed (nothing was started).
        """
        if self._task is not None or self._lease_id:
            raise RuntimeError("LeaseKeeper already started")
        sent = time.monotonic()
        lease_id, granted = await self._client._lease_grant_ttl(self.ttl_s)
        self._lease_id = lease_id
        self._renewed(sent, granted)
        self._task = asyncio.create_task(self._run(), name=f"etcd-lease-keeper-{lease_id:x}")
        return lease_id

    def _renewed(self, sent: float, ttl: int) -> None:
        self.granted_ttl_s = ttl
        self._deadline = max(self._deadline, sent + ttl - self.safety_margin_s)

    def _mark_lost(self, why: str) -> None:
        if not self.lost.is_set():
            if not self._stopping:
                log.warning("etcd lease %x lost: %s", self._lease_id, why)
            self._deadline = min(self._deadline, time.monotonic())
            self.lost.set()

    async def _run(self) -> None:
        interval = max(self.granted_ttl_s, self.ttl_s) / 3
        next_at = time.monotonic() + interval
        try:
            while True:
                now = time.monotonic()
                if now >= self._deadline:
                    self._mark_lost("local deadline passed without a successful keepalive")
                    return
                await asyncio.sleep(max(0.0, min(next_at, self._deadline) - now))
                if time.monotonic() >= self._deadline:
                    self._mark_lost("local deadline passed without a successful keepalive")
                    return
                sent = time.monotonic()
                try:
                    # Never wait on a reply past the local deadline: by then the answer no longer matters.
                    async with asyncio.timeout(max(0.0, self._deadline - sent)):
                        ttl = await self._client.lease_keepalive(self._lease_id)
                except (EtcdError, TimeoutError) as err:
                    why = str(err) if isinstance(err, EtcdError) else "no reply before the local deadline"
                    log.info(
                        "etcd lease %x keepalive failed (%.2f s left): %s",
                        self._lease_id,
                        self.remaining(),
                        why,
                    )
                    next_at = time.monotonic() + min(self.RETRY_DELAY_S, interval)
                    continue
                if ttl <= 0:
                    self._mark_lost("etcd reports the lease gone (TTL 0)")
                    return
                self._renewed(sent, ttl)
                next_at = sent + interval
        except asyncio.CancelledError:
            raise
        except BaseException as err:  # a bug or closed client: never leave a holder trusting a dead keeper
            self._mark_lost(f"renew task failed: {err!r}")
            raise
        finally:
            if self._stopping:
                self._mark_lost("stopped")

    async def stop(self, revoke: bool = True) -> None:
        """Stop renewing, set :attr:`lost`, and (if ``revoke``) revoke the lease so its keys go at once.

        Idempotent. A failed revoke is logged, not raised: the lease then simply expires after its TTL.
        """
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._mark_lost("stopped")
        if revoke and self._lease_id:
            try:
                await self._client.lease_revoke(self._lease_id)
            except (EtcdError, RuntimeError) as err:
                log.warning("etcd lease %x revoke failed (it will expire by TTL): %s", self._lease_id, err)
