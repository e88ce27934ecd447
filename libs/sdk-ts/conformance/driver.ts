/**
 * The TypeScript SDK's conformance driver: a worker of `@gnomon/sdk` that obeys the command
 * contract of tests/conformance/README.md (each job's payload says what its handler does; every step
 * is appended to the events file as one JSON line). Only the public SDK API is used, so this file is
 * also an example of a worker.
 *
 * Started by the conformance harness as `node libs/sdk-ts/dist/conformance/driver.js` with
 * GNOMON_API, GNOMON_NAMESPACE, GNOMON_TLS_CA_FILE, GNOMON_API_KEY (or GNOMON_INSECURE=true),
 * GNOMON_TLS_SERVER_NAME (read by the SDK itself), CONFORMANCE_QUEUE (required),
 * CONFORMANCE_CONCURRENCY (default 4) and CONFORMANCE_EVENTS (required: the JSON-lines file events
 * are appended to). SIGTERM/SIGINT start the SDK's graceful drain; the process then exits 0.
 */
import * as fs from "node:fs";
import {
  AmbiguousError,
  classifyError,
  PermanentError,
  ThrottledError,
  TransientError,
  Worker,
  type JobContext,
} from "../src";

/** Exit code of `{"do": "exit"}` (what a shell reports for a SIGKILLed process). */
const EXIT_CODE = 137;

/** The SDK's cancel reason → the contract's `reason` of a `cancelled` event. */
const REASONS: Record<string, string> = { cancel_requested: "cancel", lease_lost: "lease_lost", refused: "lease_lost" };

interface Command {
  do?: string;
  class?: string;
  message?: string;
  retry_after_s?: number;
  s?: number;
  timeout_s?: number;
  data?: string;
}

/** Appends one JSON object per line with a single `write` to a descriptor opened for appending. */
class Events {
  private readonly fd: number;
  constructor(path: string) {
    this.fd = fs.openSync(path, "a");
  }
  emit(event: string, ctx: JobContext | null, fields: Record<string, unknown> = {}): void {
    const record = { event, job: ctx ? ctx.job : "", attempt: ctx ? ctx.attempt : 0, pid: process.pid, t: Date.now() / 1000, ...fields };
    fs.writeSync(this.fd, JSON.stringify(record) + "\n");
  }
}

function failure(c: Command): Error {
  const message = String(c.message || "conformance failure");
  switch (c.class) {
    case "transient":
      return new TransientError(message);
    case "permanent":
      return new PermanentError(message);
    case "throttled":
      return new ThrottledError(Number(c.retry_after_s ?? 0) * 1000, message);
    case "ambiguous":
      return new AmbiguousError(message);
    default:
      return new PermanentError(`unknown failure class ${JSON.stringify(c.class)}`);
  }
}

/** Blocks the event loop for `ms` milliseconds (no timer, no I/O, no heartbeat runs meanwhile). */
function blockSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason);
    };
    const t = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

class Driver {
  constructor(private readonly events: Events) {}

  /** Runs the payload's command, emitting `start` first and `finish` (after `cancelled` when
   * cancelled) last. */
  handle = async (ctx: JobContext): Promise<void> => {
    this.events.emit("start", ctx, {
      fencing_token: Number(ctx.fencingToken),
      idempotency_key: ctx.idempotencyKey,
      last_checkpoint: ctx.lastCheckpoint ? ctx.lastCheckpoint.toString("utf8") : null,
    });
    try {
      await this.run(ctx, ctx.json<Command>());
    } catch (err) {
      const f = classifyError(err, ctx.signal);
      this.events.emit("finish", ctx, { outcome: "failed", class: f.failureClass.replace("FAILURE_CLASS_", "").toLowerCase() });
      throw err;
    }
    this.events.emit("finish", ctx, { outcome: "succeeded", class: null });
  };

  private async run(ctx: JobContext, c: Command): Promise<void> {
    switch (c.do) {
      case "succeed":
        return;
      case "fail":
        throw failure(c);
      case "sleep":
        return this.wait(ctx, Number(c.s) * 1000);
      case "block":
        if (ctx.attempt === 1) blockSync(Number(c.s) * 1000);
        return;
      case "checkpoint":
        if (ctx.lastCheckpoint === null) {
          await ctx.checkpoint(String(c.data ?? "")); // resolves once the dispatcher acknowledged it
          this.events.emit("checkpointed", ctx);
          throw new TransientError("checkpoint saved; failing to resume on the next attempt");
        }
        return;
      case "wait_cancel":
        return this.wait(ctx, Number(c.timeout_s ?? 30) * 1000);
      case "exit":
        if (ctx.attempt === 1) process.exit(EXIT_CODE);
        return;
      default:
        throw new PermanentError(`unknown command ${JSON.stringify(c.do)}`);
    }
  }

  /** Awaits `ms` while heartbeats go on; a cancellation cuts it short: `cancelled` is emitted and
   * the signal's CancelledError thrown (the SDK reports PERMANENT for a cancel request and nothing
   * for a lost lease). */
  private async wait(ctx: JobContext, ms: number): Promise<void> {
    try {
      await sleep(ms, ctx.signal);
    } catch (err) {
      const reason = ctx.cancelReason ?? "";
      this.events.emit("cancelled", ctx, { reason: REASONS[reason] ?? reason });
      throw err;
    }
  }
}

async function main(): Promise<number> {
  const queue = process.env.CONFORMANCE_QUEUE;
  const path = process.env.CONFORMANCE_EVENTS;
  if (!queue || !path) throw new Error("CONFORMANCE_QUEUE and CONFORMANCE_EVENTS are required");
  const events = new Events(path);
  const worker = new Worker({
    queues: [queue],
    concurrency: Number(process.env.CONFORMANCE_CONCURRENCY || 4),
    handler: new Driver(events).handle,
  });
  const run = worker.run();
  if (await worker.waitConnected(30_000)) events.emit("ready", null);
  await run;
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  },
);
