/**
 * Worker-side state of one assignment ({@link Attempt}) and what a dispatcher session needs from its
 * worker ({@link SessionHost}): the small, explicit interface between session.ts and worker.ts.
 */
import type { AttemptRef } from "./gen/gnomon/v1/AttemptRef";
import type { Checkpoint } from "./gen/gnomon/v1/Checkpoint";
import type { JobContext } from "./context";
import type { GnomonError } from "./errors";
import type { LocalLease } from "./protocol";
import type { DispatcherSession } from "./session";

/** Worker-side state of an attempt. */
export type AttemptState = "queued" | "running" | "done" | "released" | "dropped";

/** One assignment as the worker tracks it. `borrowed`: moved to another session than the one that
 * delivered it (its credit is not that session's to return). */
export class Attempt {
  state: AttemptState = "queued";
  droppedReason: string | null = null;
  acceptSent = 0;
  launched = false;
  cpInflight: number | null = null;
  cpAcked = 0;
  borrowed = false;
  constructor(
    readonly key: string,
    readonly ref: AttemptRef,
    readonly ctx: JobContext,
    public session: DispatcherSession,
    readonly lease: LocalLease,
  ) {}

  /** Marks a running attempt as no longer ours (no result will be reported) and aborts its signal. */
  drop(reason: string, cancel: "refused" | "lease_lost" | "shutdown"): void {
    if (this.droppedReason === null) this.droppedReason = reason;
    this.ctx._cancel(cancel);
  }
}

/** Who says hello on every stream. */
export interface WorkerIdentity {
  workerId: string;
  /** `namespaces/{ns}`. */
  namespace: string;
  queues: string[];
  concurrency: number;
}

/** What a session needs from its worker. */
export interface SessionHost {
  readonly draining: boolean;
  /** A new assignment: queue it for a free handler slot. */
  deliver(att: Attempt): void;
  /** The accept of `att` was acknowledged: run its handler. */
  launch(att: Attempt): void;
  /** `att` took a slot but its handler will never run: free the slot. */
  abandon(att: Attempt): void;
  /** Reports an event (released, dropped, ...). */
  emit(kind: string, ctx: JobContext): void;
  /** A stream of `session` was welcomed. */
  connected(session: DispatcherSession): void;
  /** A pending result or release was settled. */
  acked(): void;
  /** `session` is over for good. */
  ended(session: DispatcherSession): void;
  /** A dispatcher rejected the worker for good. */
  fatal(err: GnomonError): void;
  log(level: "debug" | "info" | "warn", msg: string): void;
}


/**
 * One heartbeat of a session at monotonic `now`: the references of its running, not dropped
 * attempts (each records the heartbeat as in flight on its lease), the checkpoints to carry (at most
 * one per attempt: the latest asked for, only when none is in flight and it is newer than the last
 * acknowledged; it is then marked in flight), and the shortest lease among them (ms; Infinity when
 * none), which bounds the next heartbeat period to a third of it.
 */
export function heartbeatBatch(attempts: Iterable<Attempt>, now: number): { refs: AttemptRef[]; cps: Checkpoint[]; minLeaseMs: number } {
  const refs: AttemptRef[] = [];
  const cps: Checkpoint[] = [];
  let minLeaseMs = Infinity;
  for (const att of attempts) {
    if (att.state !== "running" || att.droppedReason !== null) continue;
    refs.push(att.ref);
    att.lease.heartbeatSent(now);
    minLeaseMs = Math.min(minLeaseMs, att.lease.leaseMs);
    const cp = att.ctx._checkpoint;
    if (cp && att.cpInflight === null && cp.seq > att.cpAcked && att.launched) {
      att.cpInflight = cp.seq;
      cps.push({ attempt: att.ref, data: cp.data });
    }
  }
  return { refs, cps, minLeaseMs };
}
