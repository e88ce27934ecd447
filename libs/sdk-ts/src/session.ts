/**
 * One worker's relationship with one dispatcher: the `WorkerService.Lease` stream, kept alive
 * across reconnects (capped, jittered backoff, reset by each welcome). Credits and items awaiting
 * an ack are the bookkeeping of a pure {@link LeaseProtocol}; writes are coalesced by an
 * {@link OutgoingBuffer} and flushed once per event-loop turn. A session talks to its worker only
 * through {@link SessionHost}.
 */
import * as grpc from "@grpc/grpc-js";
import type { Ack__Output } from "./gen/gnomon/v1/Ack";
import type { Assignment__Output } from "./gen/gnomon/v1/Assignment";
import type { AttemptRef } from "./gen/gnomon/v1/AttemptRef";
import type { AttemptResult } from "./gen/gnomon/v1/AttemptResult";
import type { LeaseRequest } from "./gen/gnomon/v1/LeaseRequest";
import type { LeaseResponse__Output } from "./gen/gnomon/v1/LeaseResponse";
import type { WorkerServiceClient } from "./gen/gnomon/v1/WorkerService";
import { Attempt, heartbeatBatch, type SessionHost, type WorkerIdentity } from "./attempts";
import { JobContext } from "./context";
import { GnomonError } from "./errors";
import { OutgoingBuffer, refKey } from "./outgoing";
import { toDate, durationMs } from "./proto";
import { AckOutcome, LeaseProtocol, LocalLease, initialLeaseMs, isFinalRefusal, monotonic, reconnectDelayMs } from "./protocol";

/** Heartbeat interval used until (or if) the welcome names one (ms). */
export const DEFAULT_HEARTBEAT_MS = 5000;
/** How long to wait for the dispatcher's welcome (ms). */
export const WELCOME_TIMEOUT_MS = 10_000;
/** A dispatcher gone from discovery is still reconnected to this long while it holds our work (ms). */
export const UNLISTED_GRACE_MS = 30_000;
/** Codes that end a stream before its welcome "for good": the worker stops with a GnomonError. */
export const FATAL_CODES: ReadonlySet<number> = new Set([
  grpc.status.INVALID_ARGUMENT,
  grpc.status.PERMISSION_DENIED,
  grpc.status.UNAUTHENTICATED,
  grpc.status.UNIMPLEMENTED,
]);

type Call = grpc.ClientDuplexStream<LeaseRequest, LeaseResponse__Output>;

/** The worker's relationship with one dispatcher address (see the module comment). */
export class DispatcherSession {
  readonly attempts = new Map<string, Attempt>();
  readonly protocol: LeaseProtocol<AttemptRef, AttemptResult>;
  readonly buffer: OutgoingBuffer;
  listed = true;
  unlistedSince: number | null = null;
  closing = false;
  ended = false;
  connected = false;
  dispatcherId = "";
  heartbeatMs = DEFAULT_HEARTBEAT_MS;
  minLeaseMs = Infinity;
  /** Set when a checkpoint waits: the next tick heartbeats at once. */
  checkpointDue = false;
  private call: Call | null = null;
  private flushScheduled = false;
  private lastHb = 0;
  private hbUnansweredSince: number | null = null;
  /** Consecutive stream tries without a welcome (the reconnect backoff; reset by each welcome). */
  private failures = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly host: SessionHost,
    private readonly identity: WorkerIdentity,
    readonly address: string,
    private readonly client: WorkerServiceClient,
    private readonly metadata: grpc.Metadata,
    readonly isStatic = false,
  ) {
    this.protocol = new LeaseProtocol(identity.concurrency);
    this.buffer = new OutgoingBuffer(() => this.scheduleFlush());
  }

  // -- lifecycle -------------------------------------------------------------------------------

  /** Discovery says whether the dispatcher is still registered. */
  setListed(listed: boolean): void {
    if (listed) {
      this.listed = true;
      this.unlistedSince = null;
    } else if (this.listed) {
      this.listed = false;
      this.unlistedSince = monotonic();
    }
  }

  /** True while results or releases await their ack. */
  hasUnacked(): boolean {
    return this.protocol.hasUnacked();
  }

  /** Opens the first stream. */
  start(): void {
    this.connect();
  }

  private shouldReconnect(): boolean {
    if (this.closing) return false;
    const work = this.attempts.size > 0 || this.hasUnacked();
    if (this.isStatic || this.listed) return !(this.host.draining && !work);
    return work && monotonic() - (this.unlistedSince ?? 0) < UNLISTED_GRACE_MS;
  }

  private connect(): void {
    this.timer = null;
    if (this.closing) return this.teardown();
    const call = this.client.Lease(this.metadata);
    this.call = call;
    let welcomed = false;
    const granted = this.protocol.hello(this.attempts.size);
    const { workerId, namespace, queues } = this.identity;
    call.write({ hello: { workerId, namespace, queues, credits: granted } });
    const welcomeTimer = setTimeout(() => {
      if (!welcomed) {
        this.host.log("warn", `dispatcher ${this.address}: no welcome within ${WELCOME_TIMEOUT_MS} ms`);
        call.cancel();
      }
    }, WELCOME_TIMEOUT_MS);
    let over = false;
    const end = (err: grpc.ServiceError | null) => {
      if (over) return;
      over = true;
      clearTimeout(welcomeTimer);
      this.streamEnded(call, welcomed, err);
    };
    call.on("data", (msg: LeaseResponse__Output) => {
      if (this.call !== call) return;
      if (!welcomed) {
        if (msg.kind !== "welcome") {
          this.host.log("warn", `dispatcher ${this.address}: expected welcome, got ${msg.kind}`);
          call.cancel();
          return;
        }
        welcomed = true;
        clearTimeout(welcomeTimer);
        this.onWelcome(msg, granted);
        return;
      }
      this.hbUnansweredSince = null;
      this.handle(msg);
    });
    call.on("error", (err: grpc.ServiceError) => end(err));
    call.on("end", () => end(null));
    call.on("status", () => undefined);
  }

  private onWelcome(msg: LeaseResponse__Output, granted: number): void {
    const w = msg.welcome!;
    this.dispatcherId = w.dispatcherId;
    const hb = durationMs(w.heartbeatInterval);
    if (hb !== null && hb > 0) this.heartbeatMs = hb;
    this.connected = true;
    this.failures = 0;
    this.lastHb = monotonic();
    this.hbUnansweredSince = null;
    this.buffer.clear();
    const again = this.protocol.resendAll();
    for (const r of again.accepts) this.buffer.addAccept(r);
    for (const r of again.results) this.buffer.addResult(r);
    for (const r of again.releases) this.buffer.addRelease(r);
    this.host.log(
      "info",
      `dispatcher ${this.address} (${this.dispatcherId || "?"}): connected, ${granted} credit(s), heartbeat every ${this.heartbeatMs} ms`,
    );
    this.host.connected(this);
  }

  private streamEnded(call: Call, welcomed: boolean, err: grpc.ServiceError | null): void {
    if (this.call !== call) return;
    this.call = null;
    this.connected = false;
    this.hbUnansweredSince = null;
    for (const att of [...this.attempts.values()]) {
      att.lease.forgetInflight();
      att.cpInflight = null;
      if (att.state === "queued") {
        // Unstarted attempts belong to the stream that delivered them: the dispatcher returns them
        // to its outbox when the stream ends and re-delivers them.
        att.state = "dropped";
        this.attempts.delete(att.key);
        this.host.emit("dropped", att.ctx);
      }
    }
    if (err && !welcomed && FATAL_CODES.has(err.code) && !this.closing) {
      this.host.fatal(GnomonError.fromServiceError(err));
      return this.teardown();
    }
    if (!this.shouldReconnect()) return this.teardown();
    this.failures = welcomed ? 1 : this.failures + 1;
    const level = this.failures % 12 === 1 ? "warn" : "debug";
    this.host.log(level, `dispatcher ${this.address}: stream ended (${err ? `${err.code} ${err.details}` : "closed"}); reconnecting`);
    this.timer = setTimeout(() => this.connect(), reconnectDelayMs(this.failures));
  }

  private teardown(): void {
    if (this.ended) return;
    this.ended = true;
    this.connected = false;
    this.call = null;
    for (const att of [...this.attempts.values()]) {
      if (att.state === "queued") att.state = "dropped";
      else if (att.state === "running") {
        att.drop("session ended", "lease_lost");
        this.abandon(att);
      }
    }
    if (this.protocol.results.size && !this.closing) {
      this.host.log("warn", `dispatcher ${this.address} gone with ${this.protocol.results.size} unacknowledged result(s)`);
    }
    this.host.ended(this);
  }

  private abandon(att: Attempt): void {
    if (!att.launched) {
      att.launched = true;
      this.host.abandon(att);
    }
  }

  /** Half-closes the stream; resolves when it ended or after `timeoutMs`, then cancels it. */
  close(timeoutMs = 1000): Promise<void> {
    this.closing = true;
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
      this.teardown();
    }
    const call = this.call;
    if (!call) {
      this.teardown();
      return Promise.resolve();
    }
    this.flush();
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        call.cancel();
        resolve();
      }, timeoutMs);
      const done = () => {
        clearTimeout(t);
        resolve();
      };
      call.once("status", done);
      call.once("close", done);
      call.end();
    });
  }

  // -- writing ---------------------------------------------------------------------------------

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => {
      this.flushScheduled = false;
      this.flush();
    });
  }

  private flush(): void {
    const call = this.call;
    if (!call || !this.connected) return; // the next welcome re-sends what is pending
    for (const msg of this.buffer.take()) call.write(msg);
  }

  // -- incoming --------------------------------------------------------------------------------

  private handle(msg: LeaseResponse__Output): void {
    if (msg.kind === "assignments") {
      for (const a of msg.assignments!.assignments) this.onAssignment(a);
    } else if (msg.kind === "acks") {
      for (const a of msg.acks!.acks) this.onAck(a);
    }
  }

  private onAssignment(a: Assignment__Output): void {
    const r = a.attempt!;
    const ref: AttemptRef = { job: r.job, jobId: r.jobId, attempt: r.attempt, version: r.version, fencingToken: r.fencingToken };
    const key = refKey(ref);
    const sent = this.protocol.redelivered(key);
    if (this.attempts.has(key) || sent !== undefined) {
      this.creditBack(); // a re-delivery consumed a credit
      if (sent !== undefined) this.buffer.addResult(sent);
      return;
    }
    const ctx = new JobContext(a);
    const expire = ctx.leaseExpireTime ? ctx.leaseExpireTime.getTime() : null;
    const att = new Attempt(key, ref, ctx, this, new LocalLease(initialLeaseMs(ctx.leaseDurationMs, expire)));
    if (this.host.draining) {
      att.state = "released";
      this.protocol.release(key, ref);
      this.buffer.addRelease(ref);
      this.host.emit("released", ctx);
      return;
    }
    this.attempts.set(key, att);
    this.host.deliver(att);
  }

  private onAck(ack: Ack__Output): void {
    const key = refKey(ack.attempt ?? {});
    const att = this.attempts.get(key);
    switch (ack.kind) {
      case "ACK_KIND_HEARTBEAT": {
        if (!att || att.state !== "running") return;
        if (ack.ok && ack.cancelRequested && !ack.leaseExpireTime) {
          this.afterRenewal(att, ack); // unprompted cancellation push: renews nothing
          return;
        }
        att.lease.heartbeatAcked(ack.ok);
        if (ack.ok || isFinalRefusal(ack.reason)) this.afterRenewal(att, ack);
        return;
      }
      case "ACK_KIND_RESULT": {
        const [outcome, delay] = this.protocol.resultAck(key, ack.ok, ack.reason);
        if (outcome === AckOutcome.RETRY) this.retryLater("result", key, ack.reason, delay);
        if (outcome !== AckOutcome.SETTLED) return;
        if (!ack.ok) this.host.log("warn", `dispatcher ${this.address} refused the result of ${ack.attempt?.job} attempt ${ack.attempt?.attempt}: ${ack.reason || "?"}`);
        this.host.acked();
        return;
      }
      case "ACK_KIND_ACCEPT": {
        const running = att !== undefined && att.state === "running";
        const [outcome, delay] = this.protocol.acceptAck(key, ack.ok, ack.reason, running);
        if (outcome === AckOutcome.RETRY) this.retryLater("accept", key, ack.reason, delay);
        if (outcome !== AckOutcome.SETTLED || !att || att.state !== "running") return;
        if (ack.ok && ack.leaseExpireTime) att.lease.renewFrom(att.acceptSent);
        this.afterRenewal(att, ack);
        if (ack.ok) {
          if (!att.launched) this.host.launch(att);
        } else {
          this.abandon(att);
          this.handBack(att, ack.reason);
        }
        return;
      }
      case "ACK_KIND_CHECKPOINT": {
        if (!att || att.cpInflight === null) return;
        const seq = att.cpInflight;
        att.cpInflight = null;
        if (LeaseProtocol.checkpointAck(ack.ok, ack.reason)) {
          att.cpAcked = Math.max(att.cpAcked, seq);
          att.ctx._checkpointSettled(seq, ack.ok, ack.reason);
        } else {
          this.checkpointDue = true; // transient refusal: goes out again with the next heartbeat
        }
        return;
      }
      case "ACK_KIND_RELEASE": {
        const [outcome, delay] = this.protocol.releaseAck(key, ack.ok, ack.reason);
        if (outcome === AckOutcome.RETRY) this.retryLater("release", key, ack.reason, delay);
        else if (outcome === AckOutcome.SETTLED) this.host.acked();
        return;
      }
    }
  }

  /** An accept settled as refused with `reason`, its slot already freed. A transient reason (the
   * SDK gave up after MAX_ACCEPT_RETRIES re-sends) means the dispatcher may still hold the attempt
   * as delivered: it is released (never dropped silently). A final reason: not ours, nothing to do. */
  private handBack(att: Attempt, reason: string): void {
    this.attempts.delete(att.key);
    if (isFinalRefusal(reason) || this.ended) return;
    this.host.log("warn", `gave up on the accept of ${att.ctx.job} attempt ${att.ctx.attempt} (${reason}); releasing it`);
    att.state = "released";
    this.protocol.release(att.key, att.ref);
    this.buffer.addRelease(att.ref);
    this.host.emit("released", att.ctx);
  }

  private retryLater(kind: "accept" | "result" | "release", key: string, reason: string, delay: number): void {
    this.host.log("info", `dispatcher ${this.address}: ${kind} of ${key} not applied (${reason}); re-sending in ${delay} ms`);
    setTimeout(() => {
      if (this.ended || !this.connected) return; // the next stream re-sends everything pending
      if (kind === "result") {
        const r = this.protocol.results.get(key);
        if (r) this.buffer.addResult(r);
      } else if (kind === "accept") {
        const r = this.protocol.accepts.get(key);
        if (r) this.buffer.addAccept(r);
      } else {
        const r = this.protocol.releases.get(key);
        if (r) this.buffer.addRelease(r);
      }
    }, delay).unref();
  }

  private afterRenewal(att: Attempt, ack: Ack__Output): void {
    if (ack.ok) {
      if (ack.leaseExpireTime) att.ctx.leaseExpireTime = toDate(ack.leaseExpireTime);
      if (ack.cancelRequested && att.ctx._cancel("cancel_requested")) {
        this.host.log("info", `cancellation requested for ${att.ctx.job} attempt ${att.ctx.attempt}`);
      }
    } else if (att.droppedReason === null) {
      const reason = ack.reason || "REFUSED";
      att.drop(reason, reason === "LEASE_EXPIRED" ? "lease_lost" : "refused");
      this.host.log("warn", `dispatcher ${this.address} refused ${att.ctx.job} attempt ${att.ctx.attempt} (${reason}); dropping it`);
    }
  }

  // -- outgoing (called by the worker) ---------------------------------------------------------

  /** The handler of `att` is starting: queue its accept. */
  accept(att: Attempt): void {
    att.state = "running";
    att.acceptSent = monotonic();
    this.protocol.accept(att.key, att.ref);
    this.buffer.addAccept(att.ref);
    if (att.lease.leaseMs < this.minLeaseMs) this.minLeaseMs = att.lease.leaseMs;
  }

  /** The handler of `att` returned: forget it, give its credit back, queue `result` (null: nothing
   * to report, the attempt was dropped). */
  finished(att: Attempt, result: AttemptResult | null): void {
    this.attempts.delete(att.key);
    this.protocol.finish(att.key, result);
    if (result === null) this.buffer.discard(att.key);
    else this.buffer.addResult(result);
    if (!att.borrowed) this.creditBack();
  }

  /** Returns an unstarted attempt to the dispatcher (it is re-delivered). */
  release(att: Attempt): void {
    att.state = "released";
    this.attempts.delete(att.key);
    this.protocol.release(att.key, att.ref);
    this.buffer.addRelease(att.ref);
    this.creditBack();
  }

  /** One attempt of this stream left the worker: return its credit (batched). */
  creditBack(): void {
    this.buffer.addCredits(this.protocol.creditBack(this.host.draining));
  }

  /** Moves a running attempt here from a session whose stream is down (see routing.ts). */
  adopt(att: Attempt): void {
    att.session = this;
    att.borrowed = true;
    att.cpInflight = null;
    att.lease.forgetInflight();
    this.attempts.set(att.key, att);
    if (att.lease.leaseMs < this.minLeaseMs) this.minLeaseMs = att.lease.leaseMs;
  }

  // -- timers (called by the worker's ticker) --------------------------------------------------

  /** Sends the periodic heartbeat when due, detects a silent stream, and (when `checkLeases`)
   * drops attempts whose local lease ran out. */
  tick(now: number, checkLeases: boolean): void {
    if (checkLeases) this.checkLeases(now);
    if (!this.connected) return;
    const interval = Math.min(this.heartbeatMs, this.minLeaseMs / 3);
    if (this.hbUnansweredSince !== null && now - this.hbUnansweredSince > Math.max(3 * interval, 10_000)) {
      this.host.log("warn", `dispatcher ${this.address}: no answer for ${Math.round(now - this.hbUnansweredSince)} ms; reconnecting`);
      this.hbUnansweredSince = null;
      this.call?.cancel();
      return;
    }
    const due = now - this.lastHb >= interval || this.checkpointDue;
    if (!due || this.buffer.heartbeatPending) return;
    this.lastHb = now;
    this.checkpointDue = false;
    const { refs, cps, minLeaseMs } = heartbeatBatch(this.attempts.values(), now);
    this.minLeaseMs = minLeaseMs;
    if (refs.length) {
      this.buffer.setHeartbeats(refs, cps);
      if (this.hbUnansweredSince === null) this.hbUnansweredSince = now;
    }
  }

  private checkLeases(now: number): void {
    for (const att of [...this.attempts.values()]) {
      const bound = att.ctx.startToCloseMs;
      if (bound !== null && att.launched && att.state === "running" && !att.ctx.cancelled && now - att.acceptSent > bound) {
        att.ctx._cancel("start_to_close");
        this.host.log("warn", `${att.ctx.job} attempt ${att.ctx.attempt} passed its start_to_close; cancelling it`);
      }
      if (!att.lease.lost(now)) continue;
      if (att.state === "running" && att.droppedReason === null) {
        att.drop("lease lost", "lease_lost");
        this.host.log("warn", `lease of ${att.ctx.job} attempt ${att.ctx.attempt} could not be renewed in time; cancelling it`);
        this.abandon(att);
      } else if (att.state === "queued") {
        this.release(att);
        this.host.emit("released", att.ctx);
      }
    }
  }
}
