/**
 * The per-stream outgoing buffer that coalesces worker → dispatcher messages: whatever piles up
 * between two writes goes out as one message per kind (split only to keep each under a per-message
 * cap), in the order accepts, heartbeats, results, releases, credits, so an attempt's accept always
 * precedes its result.
 */
import type { AttemptRef } from "./gen/gnomon/v1/AttemptRef";
import type { AttemptResult } from "./gen/gnomon/v1/AttemptResult";
import type { Checkpoint } from "./gen/gnomon/v1/Checkpoint";
import type { LeaseRequest } from "./gen/gnomon/v1/LeaseRequest";
import { MAX_HELLO_CREDITS } from "./protocol";

/** Max attempt references per accepts/heartbeats/releases message. */
export const MAX_REFS = 1000;
/** Max results per results message (each carries up to 4096 characters of error text). */
export const MAX_RESULTS = 100;
/** Checkpoint bytes per heartbeats message (a single larger checkpoint still goes alone). */
export const MAX_CHECKPOINT_BYTES_PER_MESSAGE = 1024 * 1024;

/** The identity of an attempt for matching acks: job, attempt and fencing token (the version is
 * left out: a dispatcher may echo a bumped version in acks). */
export function refKey(ref: { job?: string; attempt?: number; fencingToken?: unknown }): string {
  return `${ref.job ?? ""}|${ref.attempt ?? 0}|${String(ref.fencingToken ?? "0")}`;
}

function chunks<T>(items: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** Pending outgoing items of one stream. `notify` is called whenever something is added. */
export class OutgoingBuffer {
  private accepts = new Map<string, AttemptRef>();
  private results = new Map<string, AttemptResult>();
  private releases = new Map<string, AttemptRef>();
  private heartbeats: AttemptRef[] | null = null;
  private checkpoints: Checkpoint[] = [];
  credits = 0;

  constructor(private readonly notify: () => void = () => {}) {}

  /** Queues an accept (deduplicated per attempt). */
  addAccept(ref: AttemptRef): void {
    this.accepts.set(refKey(ref), ref);
    this.notify();
  }

  /** Queues a result (replacing an unsent result of the same attempt). */
  addResult(result: AttemptResult): void {
    this.results.set(refKey(result.attempt ?? {}), result);
    this.notify();
  }

  /** Queues a release of an unstarted attempt. */
  addRelease(ref: AttemptRef): void {
    this.releases.set(refKey(ref), ref);
    this.notify();
  }

  /** Adds `n` credits to the next credits message (`n <= 0` is ignored). */
  addCredits(n: number): void {
    if (n > 0) {
      this.credits += n;
      this.notify();
    }
  }

  /** Sets the attempts of the next heartbeats message and the checkpoints it carries (replacing an
   * unsent one); empty `refs` clears both. */
  setHeartbeats(refs: AttemptRef[], checkpoints: Checkpoint[] = []): void {
    this.heartbeats = refs.length ? refs : null;
    this.checkpoints = refs.length ? checkpoints : [];
    if (refs.length) this.notify();
  }

  /** True if a heartbeats message waits to be taken. */
  get heartbeatPending(): boolean {
    return this.heartbeats !== null;
  }

  /** Forgets any pending accept, result and release of an attempt. */
  discard(key: string): void {
    this.accepts.delete(key);
    this.results.delete(key);
    this.releases.delete(key);
  }

  /** Drops everything (a stream is replaced; the new one re-queues what is unacknowledged). */
  clear(): void {
    this.accepts.clear();
    this.results.clear();
    this.releases.clear();
    this.heartbeats = null;
    this.checkpoints = [];
    this.credits = 0;
  }

  /** Number of pending items (refs and results, plus 1 when credits are pending). */
  get size(): number {
    return (
      this.accepts.size + this.results.size + this.releases.size + (this.heartbeats?.length ?? 0) + (this.credits ? 1 : 0)
    );
  }

  /** Removes everything pending and returns it as LeaseRequest messages (see the module comment). */
  take(): LeaseRequest[] {
    const out: LeaseRequest[] = [];
    if (this.accepts.size) {
      for (const c of chunks([...this.accepts.values()], MAX_REFS)) out.push({ accepts: { attempts: c } });
      this.accepts.clear();
    }
    if (this.heartbeats) {
      const msgs = chunks(this.heartbeats, MAX_REFS).map((c) => ({ attempts: c, checkpoints: [] as Checkpoint[] }));
      let first = true;
      let group: Checkpoint[] = [];
      let size = 0;
      const flush = () => {
        if (!group.length) return;
        if (first) msgs[msgs.length - 1].checkpoints = group;
        else msgs.push({ attempts: [], checkpoints: group });
        first = false;
        group = [];
        size = 0;
      };
      for (const cp of this.checkpoints) {
        const n = cp.data ? (cp.data as Buffer).length : 0;
        if (group.length && size + n > MAX_CHECKPOINT_BYTES_PER_MESSAGE) flush();
        group.push(cp);
        size += n;
      }
      flush();
      for (const m of msgs) out.push({ heartbeats: m });
      this.heartbeats = null;
      this.checkpoints = [];
    }
    if (this.results.size) {
      for (const c of chunks([...this.results.values()], MAX_RESULTS)) out.push({ results: { results: c } });
      this.results.clear();
    }
    if (this.releases.size) {
      for (const c of chunks([...this.releases.values()], MAX_REFS)) out.push({ releases: { attempts: c } });
      this.releases.clear();
    }
    let n = this.credits;
    this.credits = 0;
    while (n > 0) {
      const step = Math.min(n, MAX_HELLO_CREDITS);
      out.push({ credits: { credits: step } });
      n -= step;
    }
    return out;
  }
}
