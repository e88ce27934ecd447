/**
 * What a handler receives: {@link JobContext}.
 */
import type { Assignment__Output } from "./gen/gnomon/v1/Assignment";
import { CancelledError, type CancelReason } from "./errors";
import { durationMs, toDate } from "./proto";

/** Largest progress checkpoint ({@link JobContext.checkpoint}), in bytes: 64 KiB. */
export const MAX_CHECKPOINT_BYTES = 64 * 1024;

interface Waiter {
  seq: number;
  resolve: () => void;
  reject: (err: Error) => void;
}

/**
 * One attempt as its handler sees it.
 *
 * Cancellation is cooperative: `signal` is aborted (with a {@link CancelledError} as its reason)
 * when cancellation of the job was requested (`cancel_requested`), when the dispatcher refused the
 * attempt (`refused`), when its lease could not be renewed in time (`lease_lost`), when its
 * `start_to_close` bound passed (`start_to_close`), or when the worker's drain timeout ran out
 * (`shutdown`). The worker never kills a handler; pass `signal` to what you await.
 */
export class JobContext {
  /** Full job name `namespaces/{ns}/jobs/{id}`. */
  readonly job: string;
  /** 1-based attempt number. */
  readonly attempt: number;
  /** Job version the attempt was claimed at (decimal string). */
  readonly version: string;
  /** Fencing token of the dispatching shard owner (decimal string). */
  readonly fencingToken: string;
  /** Queue the job was dispatched on. */
  readonly queue: string;
  /** Payload bytes (see {@link json} and {@link text}). */
  readonly payload: Buffer;
  /** Stable across attempts of the job: deduplicate side effects with it. */
  readonly idempotencyKey: string;
  /** The checkpoint an earlier attempt saved with {@link checkpoint}, or null if none did. */
  readonly lastCheckpoint: Buffer | null;
  /** The job's deadline, or null. */
  readonly deadline: Date | null;
  /** When the job became eligible, or null if not sent. */
  readonly scheduleTime: Date | null;
  /** The job's attempt limit (0 if not sent). */
  readonly maxAttempts: number;
  /** Lease length each heartbeat renews, in ms (null if not sent). */
  readonly leaseDurationMs: number | null;
  /** The job's start-to-close bound in ms (null if none). */
  readonly startToCloseMs: number | null;
  /** For an occurrence of a schedule: its name; "" for a one-time job. */
  readonly schedule: string;
  /** For an occurrence: its nominal fire time, else null. */
  readonly nominalTime: Date | null;
  /** W3C trace context of the attempt's delivery (`traceparent`, `tracestate`); empty when the job
   * is not traced. A traced handler already runs in a `gnomon.handler` span continuing it. */
  readonly traceContext: Readonly<Record<string, string>>;
  /** Aborted when the attempt should stop (see the class comment). */
  readonly signal: AbortSignal;
  /** The lease end last reported by the dispatcher (database clock), or null. */
  leaseExpireTime: Date | null;

  private readonly controller = new AbortController();
  /** Latest checkpoint asked for: sequence number and data. */
  _checkpoint: { seq: number; data: Buffer } | null = null;
  private seq = 0;
  private waiters: Waiter[] = [];
  /** Called when a checkpoint is asked for (the worker sends it with an early heartbeat). */
  _onCheckpoint: (() => void) | null = null;

  constructor(a: Assignment__Output) {
    const ref = a.attempt!;
    this.job = ref.job;
    this.attempt = ref.attempt;
    this.version = String(ref.version);
    this.fencingToken = String(ref.fencingToken);
    this.queue = a.queue;
    this.payload = a.payload ?? Buffer.alloc(0);
    this.idempotencyKey = a.idempotencyKey;
    this.lastCheckpoint = a.checkpoint && a.checkpoint.length ? a.checkpoint : null;
    this.deadline = toDate(a.deadline);
    this.scheduleTime = toDate(a.scheduleTime);
    this.maxAttempts = a.maxAttempts ?? 0;
    this.leaseDurationMs = durationMs(a.leaseDuration);
    this.startToCloseMs = durationMs(a.startToClose);
    this.schedule = a.schedule ?? "";
    this.nominalTime = toDate(a.nominalTime);
    this.leaseExpireTime = toDate(a.leaseExpireTime);
    this.traceContext = { ...(a.traceContext ?? {}) };
    this.signal = this.controller.signal;
  }

  /** The payload decoded as UTF-8 JSON. */
  json<T = unknown>(): T {
    return JSON.parse(this.payload.toString("utf8")) as T;
  }

  /** The payload decoded as UTF-8 text. */
  text(): string {
    return this.payload.toString("utf8");
  }

  /** True once {@link signal} is aborted. */
  get cancelled(): boolean {
    return this.signal.aborted;
  }

  /** Why the attempt was cancelled, or null. */
  get cancelReason(): CancelReason | null {
    return this.signal.aborted ? (this.signal.reason as CancelledError).reason : null;
  }

  /**
   * Saves a progress checkpoint (at most {@link MAX_CHECKPOINT_BYTES}; empty clears it): if this
   * attempt is lost or fails, the job's next attempt receives it as `lastCheckpoint`. It travels
   * with the next heartbeat (sent early for it) and is saved only while this attempt still holds
   * its lease. Resolves when the dispatcher acknowledged it (or a later checkpoint); rejects with a
   * RangeError when too large, or with a CancelledError/Error when the attempt ended or the
   * dispatcher refused it.
   */
  checkpoint(data: Uint8Array | string): Promise<void> {
    const buf = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data);
    if (buf.length > MAX_CHECKPOINT_BYTES) {
      return Promise.reject(new RangeError(`checkpoint of ${buf.length} bytes exceeds ${MAX_CHECKPOINT_BYTES}`));
    }
    if (this.signal.aborted) return Promise.reject(this.signal.reason);
    const seq = ++this.seq;
    this._checkpoint = { seq, data: buf };
    const p = new Promise<void>((resolve, reject) => this.waiters.push({ seq, resolve, reject }));
    // A handler may checkpoint without awaiting: its rejection (the attempt ended first) must not be
    // an unhandled rejection that ends the process. Awaiting `p` still sees it.
    p.catch(() => undefined);
    this._onCheckpoint?.();
    return p;
  }

  /** The dispatcher settled checkpoint `seq`: resolves every waiter up to it (`ok`), or rejects
   * them with `reason`. */
  _checkpointSettled(seq: number, ok: boolean, reason: string): void {
    const keep: Waiter[] = [];
    for (const w of this.waiters) {
      if (w.seq > seq) keep.push(w);
      else if (ok) w.resolve();
      else w.reject(new Error(`checkpoint refused: ${reason || "refused"}`));
    }
    this.waiters = keep;
  }

  /** Aborts {@link signal} with `reason` (the first reason wins); rejects pending checkpoints.
   * Returns true if it was not aborted yet. */
  _cancel(reason: CancelReason): boolean {
    if (this.signal.aborted) return false;
    const err = new CancelledError(reason);
    this.controller.abort(err);
    if (reason === "refused" || reason === "lease_lost") {
      for (const w of this.waiters) w.reject(err);
      this.waiters = [];
    }
    return true;
  }

  /** The attempt ended: pending checkpoint promises reject. */
  _end(): void {
    for (const w of this.waiters) w.reject(new Error("attempt ended before the checkpoint was acknowledged"));
    this.waiters = [];
  }
}
