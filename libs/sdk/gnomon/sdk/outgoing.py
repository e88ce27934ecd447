"""The per-stream outgoing buffer that coalesces worker -> dispatcher messages.

Everything the worker wants to tell one dispatcher (accepts, heartbeats, results, releases,
credits) is added here; the stream's single sender task calls :meth:`OutgoingBuffer.take` when
woken and writes the returned messages. Whatever piled up since the last write goes out as one
message per kind (docs/performance.md: never one stream message per job when several are pending),
split only to keep each message under ``max_per_message`` items.

Order of the messages returned by one ``take()``: accepts, heartbeats, results, releases, credits
-- so an attempt's accept always precedes its result even when both were queued together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb

__all__ = ["OutgoingBuffer", "ref_key", "RefKey"]

RefKey = tuple[str, int, int]
T = TypeVar("T")

#: Default item caps per message. Results carry an error text of up to 4096 characters, so they
#: get a smaller cap to stay well under gRPC's default 4 MiB message limit.
DEFAULT_MAX_REFS = 1000
DEFAULT_MAX_RESULTS = 100
#: Checkpoint bytes per ``heartbeats`` message (a checkpoint is up to 64 KiB; a dispatcher accepts
#: messages of up to 16 MiB). A single larger checkpoint still goes out, alone.
DEFAULT_MAX_CHECKPOINT_BYTES = 1024 * 1024


def ref_key(ref: wpb.AttemptRef) -> RefKey:
    """Identity of an attempt for matching acks: ``(job, attempt, fencing_token)``.

    The version is left out on purpose: completion is idempotent per (job, attempt, fencing
    token) (worker_service.proto), and a dispatcher may echo a bumped version in acks.
    """
    return (ref.job, ref.attempt, ref.fencing_token)


class OutgoingBuffer:
    """Pending outgoing protocol items of one stream, coalesced per kind.

    Args:
        notify: called (no arguments) whenever something is added; the stream wires it to the
            sender's wake-up event. ``None``: no notification.
        max_refs: max attempts per ``accepts``/``heartbeats``/``releases`` message.
        max_results: max results per ``results`` message.

    Accepts, results and releases are de-duplicated by :func:`ref_key` (adding the same attempt
    twice before a take keeps one entry; a result replaces an earlier one). Credits add up.
    Heartbeats (with their checkpoints) are a single pending list, replaced by each
    :meth:`set_heartbeats`.
    Not thread-safe: use it from the event loop only.
    """

    __slots__ = (
        "_accepts",
        "_results",
        "_releases",
        "_credits",
        "_heartbeats",
        "_checkpoints",
        "_notify",
        "max_refs",
        "max_results",
        "max_checkpoint_bytes",
    )

    def __init__(
        self,
        notify: Callable[[], None] | None = None,
        *,
        max_refs: int = DEFAULT_MAX_REFS,
        max_results: int = DEFAULT_MAX_RESULTS,
        max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES,
    ) -> None:
        if max_refs < 1 or max_results < 1:
            raise ValueError("max_refs and max_results must be >= 1")
        self._accepts: dict[RefKey, wpb.AttemptRef] = {}
        self._results: dict[RefKey, wpb.AttemptResult] = {}
        self._releases: dict[RefKey, wpb.AttemptRef] = {}
        self._credits = 0
        self._heartbeats: list[wpb.AttemptRef] | None = None
        self._checkpoints: list[wpb.Checkpoint] = []
        self._notify = notify
        self.max_refs = max_refs
        self.max_results = max_results
        self.max_checkpoint_bytes = max_checkpoint_bytes

    # -- adding -------------------------------------------------------------------------------

    def add_accept(self, ref: wpb.AttemptRef) -> None:
        """Queues an accept for ``ref`` (the assignment's AttemptRef, echoed unchanged)."""
        self._accepts[ref_key(ref)] = ref
        self._wake()

    def add_result(self, result: wpb.AttemptResult) -> None:
        """Queues a result (replacing a not-yet-sent result of the same attempt)."""
        self._results[ref_key(result.attempt)] = result
        self._wake()

    def add_release(self, ref: wpb.AttemptRef) -> None:
        """Queues a release of an unstarted attempt."""
        self._releases[ref_key(ref)] = ref
        self._wake()

    def add_credits(self, n: int) -> None:
        """Adds ``n`` (> 0) credits to the next ``credits`` message; ``n <= 0`` is ignored."""
        if n > 0:
            self._credits += n
            self._wake()

    def set_heartbeats(
        self, refs: Iterable[wpb.AttemptRef], checkpoints: Iterable[wpb.Checkpoint] = ()
    ) -> None:
        """Sets the attempts of the next ``heartbeats`` message and the progress checkpoints it
        carries (replacing a pending, unsent one). An empty ``refs`` clears both."""
        refs = list(refs)
        self._heartbeats = refs or None
        self._checkpoints = list(checkpoints) if refs else []
        if refs:
            self._wake()

    def discard(self, key: RefKey) -> None:
        """Forgets any pending accept, result and release of the attempt ``key``."""
        self._accepts.pop(key, None)
        self._results.pop(key, None)
        self._releases.pop(key, None)

    def clear(self) -> None:
        """Drops everything pending (used when a stream is replaced: the new stream re-queues what
        is still unacknowledged)."""
        self._accepts.clear()
        self._results.clear()
        self._releases.clear()
        self._credits = 0
        self._heartbeats = None
        self._checkpoints = []

    # -- inspecting ---------------------------------------------------------------------------

    @property
    def heartbeat_pending(self) -> bool:
        """True if a heartbeats message is waiting to be taken."""
        return self._heartbeats is not None

    @property
    def credits(self) -> int:
        """Credits waiting to be sent."""
        return self._credits

    def __len__(self) -> int:
        """Number of pending items (accepts + results + releases + heartbeat refs, plus 1 if any
        credits are pending)."""
        return (
            len(self._accepts)
            + len(self._results)
            + len(self._releases)
            + len(self._heartbeats or ())
            + (1 if self._credits else 0)
        )

    def __bool__(self) -> bool:
        return bool(self._accepts or self._results or self._releases or self._credits or self._heartbeats)

    # -- taking -------------------------------------------------------------------------------

    def take(self) -> list[wpb.LeaseRequest]:
        """Removes everything pending and returns it as ``LeaseRequest`` messages, one per kind
        (more only when a kind exceeds its per-message cap), in the order accepts, heartbeats,
        results, releases, credits. Returns ``[]`` when nothing is pending."""
        out: list[wpb.LeaseRequest] = []
        if self._accepts:
            refs = list(self._accepts.values())
            self._accepts.clear()
            for chunk in _chunks(refs, self.max_refs):
                out.append(wpb.LeaseRequest(accepts=wpb.AttemptRefs(attempts=chunk)))
        if self._heartbeats:
            refs, cps = self._heartbeats, self._checkpoints
            self._heartbeats, self._checkpoints = None, []
            msgs = [wpb.Heartbeats(attempts=chunk) for chunk in _chunks(refs, self.max_refs)]
            # the first batch of checkpoints rides on the last heartbeats message, the rest alone
            for i, cp_chunk in enumerate(_byte_chunks(cps, self.max_checkpoint_bytes)):
                if i == 0:
                    msgs[-1].checkpoints.extend(cp_chunk)
                else:
                    msgs.append(wpb.Heartbeats(checkpoints=cp_chunk))
            out.extend(wpb.LeaseRequest(heartbeats=m) for m in msgs)
        if self._results:
            results = list(self._results.values())
            self._results.clear()
            for result_chunk in _chunks(results, self.max_results):
                out.append(wpb.LeaseRequest(results=wpb.AttemptResults(results=result_chunk)))
        if self._releases:
            refs = list(self._releases.values())
            self._releases.clear()
            for chunk in _chunks(refs, self.max_refs):
                out.append(wpb.LeaseRequest(releases=wpb.AttemptRefs(attempts=chunk)))
        if self._credits:
            n = self._credits
            self._credits = 0
            while n > 0:  # WorkerCredits is int32; keep each grant in the hello range (<= 10000)
                step = min(n, 10000)
                out.append(wpb.LeaseRequest(credits=wpb.WorkerCredits(credits=step)))
                n -= step
        return out

    def _wake(self) -> None:
        if self._notify is not None:
            self._notify()


def _chunks(items: list[T], size: int) -> Iterator[list[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _byte_chunks(checkpoints: list[wpb.Checkpoint], budget: int) -> Iterator[list[wpb.Checkpoint]]:
    """Groups checkpoints so that each group's data adds up to at most ``budget`` bytes (a single
    larger one forms a group of its own)."""
    chunk: list[wpb.Checkpoint] = []
    size = 0
    for cp in checkpoints:
        n = len(cp.data)
        if chunk and size + n > budget:
            yield chunk
            chunk, size = [], 0
        chunk.append(cp)
        size += n
    if chunk:
        yield chunk
