/**
 * The bookkeeping of the worker side of the lease protocol with one dispatcher, as small pure
 * objects (no gRPC, no timers, no clock of their own): credits, what awaits an ack, what is
 * re-sent and what an ack means (`LeaseProtocol`), and the local lease deadline of one attempt
 * (`LocalLease`). Same rules as the Python SDK (gnomon.sdk.protocol, gnomon.sdk.lease).
 *
 * Credits (the protocol's rule): `hello.credits` is the initial grant; each assignment delivered
 * consumes one credit; nothing returns one implicitly. The worker returns one credit with a
 * `credits` message each time an attempt leaves it (result acknowledged or reported, released,
 * accept refused, lease lost), and the session total is capped at 10000.
 */

/** Ack reasons that are final refusals. Any other reason on an `ok = false` ack (e.g.
 * `DATABASE_UNAVAILABLE`) is transient: the item is re-sent. */
export const FINAL_REFUSALS: ReadonlySet<string> = new Set([
  "STALE_ATTEMPT",
  "STALE_FENCING_TOKEN",
  "LEASE_EXPIRED",
  "NOT_FOUND",
  "INVALID_FIELD",
  "INVALID_ITEM",
  "CHECKPOINT_TOO_LARGE",
]);
/** An accept refused for a transient reason is re-sent at most this many times, then released. */
export const MAX_ACCEPT_RETRIES = 5;
/** Largest credit grant of one hello, and the cap of a session's credit total. */
export const MAX_HELLO_CREDITS = 10000;
/** Lease assumed when an assignment carries neither `lease_duration` nor `lease_expire_time` (ms). */
export const DEFAULT_LEASE_MS = 30_000;

/** True if an `ok = false` ack with this reason means "never" (an empty reason counts as final). */
export function isFinalRefusal(reason: string): boolean {
  return !reason || FINAL_REFUSALS.has(reason);
}

/** Milliseconds before re-sending an item refused for a transient reason the `tries`-th time
 * (1-based): 250 ms doubling, capped at 5 s. */
export function resendDelayMs(tries: number): number {
  return Math.min(5000, 250 * 2 ** Math.max(0, tries - 1));
}

/** What an ack did to the pending item it answers. */
export enum AckOutcome {
  /** Nothing pending under that key (duplicate or late ack). */
  IGNORED = "ignored",
  /** Refused for a transient reason: still pending; re-send after the returned delay. */
  RETRY = "retry",
  /** Acknowledged, or refused for good: no longer pending. */
  SETTLED = "settled",
}

/** Everything re-sent on a new stream. */
export interface Pending<R, S> {
  accepts: R[];
  results: S[];
  releases: R[];
}

/**
 * Credits and acknowledgements of one worker's relationship with one dispatcher. `concurrency`
 * (1-10000) is the worker's handler slots and the most credits one stream holds. Keys identify
 * attempts; `R` (accept/release reference) and `S` (result) are opaque here.
 */
export class LeaseProtocol<R, S> {
  /** Credits granted by the last hello beyond `concurrency - held`, withheld from returns. */
  owed = 0;
  readonly accepts = new Map<string, R>();
  readonly results = new Map<string, S>();
  readonly releases = new Map<string, R>();
  private readonly tries = new Map<string, number>();

  constructor(readonly concurrency: number) {}

  /** Credits for the hello of a new stream while `held` attempts of this dispatcher are still
   * queued or running here: `max(1, min(MAX_HELLO_CREDITS, concurrency - held))`; the surplus over
   * `concurrency` is recorded as {@link owed}. */
  hello(held: number): number {
    const granted = Math.max(1, Math.min(MAX_HELLO_CREDITS, this.concurrency - held));
    this.owed = Math.max(0, held + granted - this.concurrency);
    return granted;
  }

  /** One attempt left the worker: credits to return now (0 or 1). None while `draining` (the
   * dispatcher must stop assigning), none while paying off {@link owed}. */
  creditBack(draining: boolean): number {
    if (draining) return 0;
    if (this.owed > 0) {
      this.owed -= 1;
      return 0;
    }
    return 1;
  }

  /** An accept of `key` is being sent: pending until acknowledged. */
  accept(key: string, ref: R): void {
    this.accepts.set(key, ref);
  }

  /** The attempt ended: `result` is pending until acknowledged; null (nothing to report) forgets
   * its accept too. */
  finish(key: string, result: S | null): void {
    if (result === null) this.accepts.delete(key);
    else this.results.set(key, result);
  }

  /** An unstarted attempt is handed back: the release is pending until acknowledged. */
  release(key: string, ref: R): void {
    this.releases.set(key, ref);
  }

  /** True while results or releases await their ack. */
  hasUnacked(): boolean {
    return this.results.size > 0 || this.releases.size > 0;
  }

  /** Everything still pending, to send again on a new stream. */
  resendAll(): Pending<R, S> {
    return {
      accepts: [...this.accepts.values()],
      results: [...this.results.values()],
      releases: [...this.releases.values()],
    };
  }

  /** An assignment of `key` arrived again: its pending result (to send again), if any. */
  redelivered(key: string): S | undefined {
    return this.results.get(key);
  }

  private refused(kind: string, key: string, ok: boolean, reason: string): number | null {
    const k = `${kind}\u0000${key}`;
    if (ok || isFinalRefusal(reason)) {
      this.tries.delete(k);
      return null;
    }
    const n = (this.tries.get(k) ?? 0) + 1;
    this.tries.set(k, n);
    return resendDelayMs(n);
  }

  /** Applies a result ack: `[outcome, resend delay ms]`. SETTLED forgets the result and accept. */
  resultAck(key: string, ok: boolean, reason = ""): [AckOutcome, number] {
    if (!this.results.has(key)) return [AckOutcome.IGNORED, 0];
    const delay = this.refused("result", key, ok, reason);
    if (delay !== null) return [AckOutcome.RETRY, delay];
    this.results.delete(key);
    this.accepts.delete(key);
    return [AckOutcome.SETTLED, 0];
  }

  /** Applies a release ack, as {@link resultAck}. */
  releaseAck(key: string, ok: boolean, reason = ""): [AckOutcome, number] {
    if (!this.releases.has(key)) return [AckOutcome.IGNORED, 0];
    const delay = this.refused("release", key, ok, reason);
    if (delay !== null) return [AckOutcome.RETRY, delay];
    this.releases.delete(key);
    return [AckOutcome.SETTLED, 0];
  }

  /** Applies an accept ack. A transient refusal is retried at most {@link MAX_ACCEPT_RETRIES}
   * times and only while the attempt is `stillOurs`; after that it settles as a refusal (the
   * caller then releases the attempt: never dropped silently). */
  acceptAck(key: string, ok: boolean, reason = "", stillOurs = true): [AckOutcome, number] {
    if (!this.accepts.has(key)) return [AckOutcome.IGNORED, 0];
    const k = `accept\u0000${key}`;
    if (!ok && !isFinalRefusal(reason)) {
      const n = (this.tries.get(k) ?? 0) + 1;
      if (n <= MAX_ACCEPT_RETRIES && (stillOurs || this.results.has(key))) {
        this.tries.set(k, n);
        return [AckOutcome.RETRY, resendDelayMs(n)];
      }
    }
    this.accepts.delete(key);
    this.tries.delete(k);
    return [AckOutcome.SETTLED, 0];
  }

  /** True when a checkpoint ack settles the checkpoint in flight (ok or a final refusal); false
   * for a transient refusal (the latest checkpoint goes out again with the next heartbeat). */
  static checkpointAck(ok: boolean, reason = ""): boolean {
    return ok || isFinalRefusal(reason);
  }
}

/** Safety margin (ms) subtracted from a local lease deadline: `max(1 s, lease/5)`, capped at
 * `lease/2` (so a 1 s lease is not lost the moment it is granted). */
export function leaseMarginMs(leaseMs: number): number {
  return Math.min(Math.max(1000, leaseMs / 5), leaseMs / 2);
}

/** A monotonic clock in milliseconds. */
export type Clock = () => number;
/** `performance.now()`: milliseconds on the process's monotonic clock. */
export const monotonic: Clock = () => performance.now();

/**
 * Monotonic deadline of one attempt's lease. The dispatcher reports lease ends in database time;
 * comparing them with the local wall clock would make correctness depend on clock skew, so the
 * worker keeps its own deadline: a lease renewed in answer to a message sent at monotonic `t`
 * cannot end later than `t + leaseMs`. The attempt counts as lost once `now > deadline - margin`.
 */
export class LocalLease {
  readonly margin: number;
  deadline: number;
  private inflight: number[] = [];

  constructor(
    readonly leaseMs: number,
    grantedAt?: number,
    private readonly clock: Clock = monotonic,
  ) {
    this.margin = leaseMarginMs(leaseMs);
    this.deadline = (grantedAt ?? clock()) + leaseMs;
  }

  /** The server renewed the lease in answer to a message sent at `sentAt` (monotonic ms). */
  renewFrom(sentAt: number): void {
    this.deadline = Math.max(this.deadline, sentAt + this.leaseMs);
  }

  /** A heartbeat listing this attempt was queued at `at` (default now); at most 16 remembered. */
  heartbeatSent(at?: number): void {
    this.inflight.push(at ?? this.clock());
    if (this.inflight.length > 16) this.inflight.shift();
  }

  /** Consumes the oldest in-flight heartbeat (acks come back in order); renews from it if `ok`. */
  heartbeatAcked(ok: boolean): void {
    const sent = this.inflight.shift();
    if (sent !== undefined && ok) this.renewFrom(sent);
  }

  /** Forgets in-flight heartbeats (their stream broke; no ack will come). */
  forgetInflight(): void {
    this.inflight = [];
  }

  /** Milliseconds until `deadline - margin` (negative once lost). */
  remaining(now?: number): number {
    return this.deadline - this.margin - (now ?? this.clock());
  }

  /** True once the lease can no longer be trusted. */
  lost(now?: number): boolean {
    return this.remaining(now) < 0;
  }
}

/** Lease length to assume for a fresh assignment (ms): its `lease_duration` when set, else
 * `lease_expire_time - wallNow` (floored at 0; subject to clock skew, a fallback only), else
 * {@link DEFAULT_LEASE_MS}. */
export function initialLeaseMs(durationMs: number | null, expireMs: number | null, wallNow = Date.now()): number {
  if (durationMs !== null && durationMs > 0) return durationMs;
  if (expireMs !== null) return Math.max(0, expireMs - wallNow);
  return DEFAULT_LEASE_MS;
}

/** Reconnect backoff bounds (ms): the first retry waits about BACKOFF_MIN_MS, doubling per
 * consecutive failed try up to BACKOFF_MAX_MS (as the Python SDK: 0.1 s to 5 s). */
export const BACKOFF_MIN_MS = 100;
export const BACKOFF_MAX_MS = 5000;

/** Milliseconds before reconnect try number `failures` (1-based count of consecutive tries without
 * a welcome): `min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2^(failures-1))` with ±20 % jitter (`random`
 * in [0, 1)). */
export function reconnectDelayMs(failures: number, random: () => number = Math.random): number {
  const step = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** Math.max(0, failures - 1));
  return step * (0.8 + 0.4 * random());
}
