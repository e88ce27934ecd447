/**
 * The worker: runs an async handler for every attempt the dispatchers assign to it.
 *
 * How it works (the lease protocol, docs/protocol.md): the worker asks the API for the live
 * dispatchers (`ClusterService.ListDispatchers`, every `discoveryIntervalMs`) and keeps one
 * `WorkerService.Lease` stream to each ({@link DispatcherSession}). Assignments from all streams go
 * into one local FIFO; at most `concurrency` handlers run at once. Starting an attempt sends its
 * accept; the handler runs once the accept is acknowledged. While it runs, each stream heartbeats
 * all its running attempts in one message; when it ends, a result is reported and re-sent until
 * acknowledged. One credit goes back each time an attempt leaves the worker. A stream that is
 * down hands its running attempts and unacknowledged results to a connected one (routing.ts).
 */
import * as os from "node:os";
import { randomUUID } from "node:crypto";
import * as grpc from "@grpc/grpc-js";
import type { AttemptResult } from "./gen/gnomon/v1/AttemptResult";
import type { ClusterServiceClient } from "./gen/gnomon/v1/ClusterService";
import { channelCredentials, channelOptions, resolveConnection, type Connection, type ConnectionOptions } from "./connection";
import { JobContext } from "./context";
import { GnomonError } from "./errors";
import { cancellationOf, classifyError } from "./failures";
import { gnomon, toDuration } from "./proto";
import { monotonic } from "./protocol";
import { reroute } from "./routing";
import { Attempt, type SessionHost, type WorkerIdentity } from "./attempts";
import { DispatcherSession } from "./session";
import { runHandler } from "./tracing";

/** A job handler: resolve = success; throw = failure (see errors.ts for the failure classes). */
export type Handler = (ctx: JobContext) => Promise<unknown> | unknown;

/** Worker events: `assigned`, `started`, `finished` (succeeded), `failed`, `released` (handed back
 * unstarted), `dropped` (ended without a report: refused, lease lost or abandoned at shutdown). */
export type WorkerEvent = "assigned" | "started" | "finished" | "failed" | "released" | "dropped";

/** Options of a {@link Worker}; connection settings as for the Client (see connection.ts). */
export interface WorkerOptions extends ConnectionOptions {
  /** Queue names served (1 to 100). */
  queues: string[] | string;
  /** The handler. */
  handler: Handler;
  /** Handlers running at once, 1-10000 (default 16); also each stream's credits. */
  concurrency?: number;
  /** Unique id of this worker process; default `<host>:<pid>:<random>`. */
  workerId?: string;
  /** Explicit dispatcher addresses (`host:port`); disables discovery. */
  dispatchers?: string[];
  /** Region passed to ListDispatchers ("" = the API's region). */
  region?: string;
  /** Milliseconds between discovery refreshes (default 2000). */
  discoveryIntervalMs?: number;
  /** Milliseconds a graceful drain waits for running handlers (default 30000). */
  drainTimeoutMs?: number;
  /** Milliseconds a graceful drain then waits for result/release acks (default 5000). */
  ackTimeoutMs?: number;
  /** Called on each event; must not throw (exceptions are logged and ignored). */
  onEvent?: (kind: WorkerEvent, ctx: JobContext) => void;
  /** Log sink (default: stderr, at the level of `GNOMON_LOG_LEVEL`, WARNING when unset). */
  logger?: (level: "debug" | "info" | "warn" | "error", msg: string) => void;
  /** Install SIGTERM/SIGINT handlers that drain (default true). */
  handleSignals?: boolean;
}

/** Milliseconds given to handlers cancelled at the end of the drain timeout before they are abandoned. */
export const SHUTDOWN_GRACE_MS = 2000;
/** Max gRPC message size accepted from a dispatcher: batches of 256 KiB payloads exceed 4 MiB. */
export const MAX_RECEIVE_MESSAGE_BYTES = 64 * 1024 * 1024;
const TICK_MS = 100;
const LEASE_CHECK_MS = 250;
const LEVELS = { debug: 0, info: 1, warn: 2, error: 3 };

/** The default log sink: stderr, from the level in `GNOMON_LOG_LEVEL` (DEBUG, INFO, WARNING, ERROR or
 * CRITICAL, any case; the variable the services read too), default WARNING. */
function defaultLogger(): (level: keyof typeof LEVELS, msg: string) => void {
  const names: Record<string, number> = { DEBUG: 0, INFO: 1, WARNING: 2, WARN: 2, ERROR: 3, CRITICAL: 4 };
  const min = names[(process.env.GNOMON_LOG_LEVEL || "WARNING").trim().toUpperCase()] ?? 2;
  return (level, msg) => {
    if (LEVELS[level] >= min) process.stderr.write(`gnomon worker ${level}: ${msg}\n`);
  };
}

/**
 * Runs `handler(ctx)` for each attempt of jobs on `queues`. Lifecycle: `await worker.run()` (resolves
 * after a drain; rejects with a GnomonError when a dispatcher rejects the worker for good, e.g. an
 * invalid queue name or PERMISSION_DENIED). `worker.drain()` (or SIGTERM/SIGINT) starts the graceful
 * drain: stop taking work (no more credits; assignments still arriving are released), release every
 * received-but-unstarted attempt, wait up to `drainTimeoutMs` for running handlers (their results
 * are reported as usual), then abort their signals (`shutdown`) and wait {@link SHUTDOWN_GRACE_MS};
 * wait up to `ackTimeoutMs` for acks, close the streams. A second drain() skips the waiting.
 */
export class Worker {
  readonly queues: string[];
  readonly concurrency: number;
  readonly workerId: string;
  readonly connection: Connection;
  draining = false;
  private readonly opts: WorkerOptions;
  private readonly sessions = new Map<string, DispatcherSession>();
  private readonly queue: Attempt[] = [];
  private qHead = 0;
  private readonly active = new Set<Attempt>();
  private readonly creds: grpc.ChannelCredentials;
  private readonly metadata = new grpc.Metadata();
  private readonly host: SessionHost;
  private readonly log: (level: "debug" | "info" | "warn" | "error", msg: string) => void;
  private cluster: ClusterServiceClient | null = null;
  private ticker: NodeJS.Timeout | null = null;
  private discoveryTimer: NodeJS.Timeout | null = null;
  private running = false;
  private fatalError: GnomonError | null = null;
  private stopRequested: (() => void) | null = null;
  private forced = false;
  private wakers: (() => void)[] = [];
  private connectedWaiters: (() => void)[] = [];
  private everConnected = false;
  private drainBeforeRun = false;

  constructor(opts: WorkerOptions) {
    const queues = typeof opts.queues === "string" ? [opts.queues] : [...(opts.queues ?? [])];
    if (!queues.length || !queues.every((q) => typeof q === "string" && q)) {
      throw new RangeError("queues must be a non-empty list of non-empty queue names");
    }
    if (typeof opts.handler !== "function") throw new TypeError("handler must be a function");
    const concurrency = opts.concurrency ?? 16;
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 10000) {
      throw new RangeError("concurrency must be an integer between 1 and 10000");
    }
    if (opts.dispatchers !== undefined && !opts.dispatchers.length) {
      throw new RangeError("dispatchers, when given, must list at least one host:port");
    }
    this.opts = opts;
    this.queues = queues;
    this.concurrency = concurrency;
    this.workerId = opts.workerId ?? `${os.hostname()}:${process.pid}:${randomUUID().replace(/-/g, "").slice(0, 12)}`;
    this.connection = resolveConnection(opts);
    this.creds = channelCredentials(this.connection);
    this.log = opts.logger ?? defaultLogger();
    this.host = this.makeHost();
  }

  /** Number of handlers running now. */
  get runningHandlers(): number {
    return this.active.size;
  }

  /** Addresses of dispatchers with a live (welcomed) stream. */
  get connectedDispatchers(): string[] {
    return [...this.sessions.values()].filter((s) => s.connected).map((s) => s.address);
  }

  /** Resolves once at least one dispatcher stream was welcomed (true), or after `timeoutMs` (false). */
  waitConnected(timeoutMs = 30_000): Promise<boolean> {
    if (this.everConnected) return Promise.resolve(true);
    return new Promise((resolve) => {
      const t = setTimeout(() => resolve(false), timeoutMs);
      this.connectedWaiters.push(() => {
        clearTimeout(t);
        resolve(true);
      });
    });
  }

  /** Runs the worker until {@link drain} (or a signal) and the drain is over. */
  async run(): Promise<void> {
    if (this.running) throw new Error("worker is already running");
    if (this.drainBeforeRun) {
      this.drainBeforeRun = false; // drain() before run(): this run returns at once
      return;
    }
    this.running = true;
    this.draining = false;
    this.forced = false;
    const stop = new Promise<void>((resolve) => (this.stopRequested = resolve));
    const onSignal = () => this.drain();
    const signals: NodeJS.Signals[] = this.opts.handleSignals === false ? [] : ["SIGTERM", "SIGINT"];
    for (const s of signals) process.on(s, onSignal);
    const ns = this.connection.namespace;
    this.log("info", `worker ${this.workerId} serving ${this.queues.join(",")} in namespaces/${ns} (concurrency ${this.concurrency})`);
    let lastCheck = 0;
    this.ticker = setInterval(() => {
      const now = monotonic();
      const check = now - lastCheck >= LEASE_CHECK_MS;
      if (check) lastCheck = now;
      reroute(this.sessions.values());
      for (const s of [...this.sessions.values()]) s.tick(now, check);
    }, TICK_MS);
    if (this.opts.dispatchers) {
      for (const a of this.opts.dispatchers) this.openSession(a, true);
    } else {
      this.startDiscovery();
    }
    try {
      await stop;
      await this.shutdown();
    } finally {
      for (const s of signals) process.off(s, onSignal);
      this.running = false;
      this.stopRequested = null;
    }
    if (this.fatalError) throw this.fatalError;
  }

  /** Starts the graceful drain (see the class comment); a second call skips the waiting. Returns at
   * once: await {@link run} for the end. Called before {@link run}, makes that run return at once. */
  drain(): void {
    if (!this.running) {
      this.drainBeforeRun = true;
      return;
    }
    if (this.draining) {
      this.forced = true;
      this.wake();
      return;
    }
    this.draining = true;
    this.stopRequested?.();
  }

  // -- sessions / discovery --------------------------------------------------------------------

  private clientOptions(): grpc.ChannelOptions {
    return channelOptions(this.connection, {
      "grpc.max_receive_message_length": MAX_RECEIVE_MESSAGE_BYTES,
      "grpc.keepalive_time_ms": 30_000,
    });
  }

  private openSession(address: string, isStatic: boolean): void {
    const Ctor = gnomon().gnomon.v1.WorkerService;
    const client = new Ctor(address, this.creds, this.clientOptions());
    const identity: WorkerIdentity = {
      workerId: this.workerId,
      namespace: `namespaces/${this.connection.namespace}`,
      queues: this.queues,
      concurrency: this.concurrency,
    };
    const s = new DispatcherSession(this.host, identity, address, client, this.metadata, isStatic);
    this.sessions.set(address, s);
    s.start();
  }

  private startDiscovery(): void {
    const Ctor = gnomon().gnomon.v1.ClusterService;
    this.cluster = new Ctor(this.connection.address, this.creds, this.clientOptions());
    let failing = false;
    const interval = this.opts.discoveryIntervalMs ?? 2000;
    const once = () => {
      this.discoveryTimer = null;
      if (this.draining || !this.cluster) return;
      const deadline = new Date(Date.now() + Math.max(1000, interval * 2));
      this.cluster.ListDispatchers({ region: this.opts.region ?? "" }, this.metadata, { deadline }, (err, resp) => {
        if (this.draining) return;
        if (err) {
          if (err.code === grpc.status.PERMISSION_DENIED || err.code === grpc.status.UNAUTHENTICATED) {
            this.fatal(GnomonError.fromServiceError(err));
            return;
          }
          this.log(failing ? "debug" : "warn", `dispatcher discovery via ${this.connection.address} failed: ${err.code} ${err.details}`);
          failing = true;
        } else {
          failing = false;
          const addrs = new Set((resp?.dispatchers ?? []).map((d) => d.address).filter((a) => a));
          this.syncSessions(addrs);
        }
        this.discoveryTimer = setTimeout(once, interval);
      });
    };
    once();
  }

  private syncSessions(addrs: Set<string>): void {
    for (const [a, s] of this.sessions) s.setListed(addrs.has(a));
    if (this.draining) return;
    for (const a of addrs) {
      if (!this.sessions.has(a)) {
        this.log("info", `discovered dispatcher ${a}`);
        this.openSession(a, false);
      }
    }
  }

  private fatal(err: GnomonError): void {
    this.log("error", `dispatcher rejected the worker: ${err.message}`);
    if (!this.fatalError) this.fatalError = err;
    this.forced = true;
    this.drain();
  }

  // -- running handlers ------------------------------------------------------------------------

  private wake(): void {
    const w = this.wakers;
    this.wakers = [];
    for (const f of w) f();
  }

  /** Waits until `cond()` holds, a drain is forced, or `ms` passed. */
  private async waitFor(cond: () => boolean, ms: number): Promise<void> {
    const end = monotonic() + ms;
    while (!cond() && !this.forced) {
      const left = end - monotonic();
      if (left <= 0) return;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 250));
        this.wakers.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  private pump(): void {
    while (this.active.size < this.concurrency && this.qHead < this.queue.length) {
      const att = this.queue[this.qHead++];
      if (this.qHead > 1024 && this.qHead * 2 > this.queue.length) {
        this.queue.splice(0, this.qHead);
        this.qHead = 0;
      }
      if (att.state !== "queued" || att.session.ended) continue;
      if (att.lease.lost()) {
        att.session.release(att); // waited here past its lease: hand it back
        this.emit("released", att.ctx);
        continue;
      }
      this.active.add(att);
      att.session.accept(att);
    }
  }

  private launch(att: Attempt): void {
    if (att.launched || att.state !== "running") return;
    att.launched = true;
    if (att.droppedReason !== null) return this.finish(att, false, null);
    this.emit("started", att.ctx);
    att.ctx._onCheckpoint = () => {
      att.session.checkpointDue = true;
    };
    // in a "gnomon.handler" span when the assignment carries a trace context (tracing.ts)
    const p = runHandler(att.ctx, () => this.opts.handler(att.ctx));
    p.then(
      () => this.finish(att, false, null),
      (err: unknown) => this.finish(att, true, err),
    );
  }

  /** The handler of `att` ended (`failed` with `err`), or an attempt that took a slot never ran:
   * free the slot and hand the result, if any, to its session. */
  private finish(att: Attempt, failed: boolean, err: unknown): void {
    if (att.state === "done") return;
    this.active.delete(att);
    att.state = "done";
    att.ctx._end();
    const session = att.session;
    const ctx = att.ctx;
    const cancel = failed ? cancellationOf(err, ctx.signal) : null;
    if (cancel && (cancel.reason === "refused" || cancel.reason === "lease_lost")) att.drop(cancel.reason, cancel.reason);
    if (att.droppedReason !== null || session.ended) {
      if (!session.ended) session.finished(att, null);
      this.emit("dropped", ctx);
    } else if (!failed) {
      session.finished(att, { attempt: att.ref, outcome: "OUTCOME_SUCCEEDED" });
      this.emit("finished", ctx);
    } else {
      const f = classifyError(err, ctx.signal);
      const result: AttemptResult = { attempt: att.ref, outcome: "OUTCOME_FAILED", failureClass: f.failureClass, error: f.error };
      if (f.retryAfterMs !== null) result.retryAfter = toDuration(f.retryAfterMs);
      this.log("info", `${ctx.job} attempt ${ctx.attempt} failed (${f.failureClass}): ${f.error}`);
      session.finished(att, result);
      this.emit("failed", ctx);
    }
    this.wake();
    if (!this.draining) this.pump();
  }

  private emit(kind: WorkerEvent, ctx: JobContext): void {
    const cb = this.opts.onEvent;
    if (!cb) return;
    try {
      cb(kind, ctx);
    } catch (e) {
      this.log("warn", `onEvent callback failed for ${kind}: ${String(e)}`);
    }
  }

  private makeHost(): SessionHost {
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const w = this;
    return {
      get draining() {
        return w.draining;
      },
      deliver(att) {
        w.queue.push(att);
        w.emit("assigned", att.ctx);
        if (!w.draining) w.pump();
      },
      launch: (att) => w.launch(att),
      abandon: (att) => w.finish(att, false, null),
      emit: (kind, ctx) => w.emit(kind as WorkerEvent, ctx),
      connected() {
        w.everConnected = true;
        const c = w.connectedWaiters;
        w.connectedWaiters = [];
        for (const f of c) f();
      },
      acked: () => w.wake(),
      ended(s) {
        if (w.sessions.get(s.address) === s) w.sessions.delete(s.address);
        w.wake();
        if (!s.closing) {
          w.log("info", `dispatcher ${s.address}: session ended`);
          if (!w.draining) w.pump();
        }
      },
      fatal: (err) => w.fatal(err),
      log: (level, msg) => w.log(level, msg),
    };
  }

  // -- drain -----------------------------------------------------------------------------------

  private async shutdown(): Promise<void> {
    this.draining = true;
    if (this.discoveryTimer) clearTimeout(this.discoveryTimer);
    // 1. release every received-but-unstarted attempt
    while (this.qHead < this.queue.length) {
      const att = this.queue[this.qHead++];
      if (att.state === "queued" && !att.session.ended) {
        att.session.release(att);
        this.emit("released", att.ctx);
      }
    }
    this.queue.length = 0;
    this.qHead = 0;
    // 2. running handlers finish (reported as usual), up to the drain timeout
    if (this.active.size) {
      this.log("info", `draining: waiting for ${this.active.size} running handler(s)`);
      await this.waitFor(() => this.active.size === 0, this.opts.drainTimeoutMs ?? 30_000);
    }
    if (this.active.size) {
      for (const att of this.active) att.ctx._cancel("shutdown");
      await this.waitFor(() => this.active.size === 0, SHUTDOWN_GRACE_MS);
    }
    if (this.active.size) {
      this.log("warn", `abandoning ${this.active.size} running handler(s); their leases will expire`);
      for (const att of [...this.active]) {
        att.drop("shutdown", "shutdown");
        this.finish(att, false, null);
      }
    }
    // 3. results and releases acknowledged, up to the ack timeout
    await this.waitFor(
      () => ![...this.sessions.values()].some((s) => s.hasUnacked() && !s.ended),
      this.forced ? 0 : this.opts.ackTimeoutMs ?? 5000,
    );
    if (this.ticker) clearInterval(this.ticker);
    this.ticker = null;
    await Promise.all([...this.sessions.values()].map((s) => s.close(this.forced ? 200 : 1000)));
    this.sessions.clear();
    this.cluster?.close();
    this.cluster = null;
    this.log("info", `worker ${this.workerId} stopped`);
  }
}
