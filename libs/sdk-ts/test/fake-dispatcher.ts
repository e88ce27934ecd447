// A scriptable in-process dispatcher (a real grpc-js server speaking WorkerService and
// ClusterService on a loopback port, plaintext) for the worker's unit tests, like the Python SDK
// tests' gnomon_fake_dispatcher: it records every message a worker sends and lets a test decide
// what to answer.
import * as grpc from "@grpc/grpc-js";
import type { LeaseRequest__Output } from "../src/gen/gnomon/v1/LeaseRequest";
import type { LeaseResponse } from "../src/gen/gnomon/v1/LeaseResponse";
import type { Ack } from "../src/gen/gnomon/v1/Ack";
import type { AttemptRef } from "../src/gen/gnomon/v1/AttemptRef";
import { gnomon } from "../src/proto";

export type Stream = grpc.ServerDuplexStream<LeaseRequest__Output, LeaseResponse>;

/** What the fake does with each worker message; defaults acknowledge everything ok. */
export interface Script {
  onHello?(stream: Stream, credits: number): void;
  ackAccept?(ref: AttemptRef, n: number): Partial<Ack> | null;
  ackResult?(ref: AttemptRef, n: number): Partial<Ack> | null;
  ackHeartbeat?(ref: AttemptRef): Partial<Ack> | null;
}

export class FakeDispatcher {
  readonly server = new grpc.Server();
  address = "";
  readonly received: LeaseRequest__Output[] = [];
  readonly streams: Stream[] = [];
  creditsGranted = 0;
  creditsReturned = 0;
  private counts = new Map<string, number>();
  private seq = 0;
  peers: string[] = [];

  constructor(public script: Script = {}) {}

  async start(): Promise<this> {
    const v1 = gnomon().gnomon.v1;
    this.server.addService(v1.WorkerService.service, { Lease: (s: Stream) => this.lease(s) });
    this.server.addService(v1.ClusterService.service, {
      ListDispatchers: (_c: unknown, cb: grpc.sendUnaryData<unknown>) =>
        cb(null, { dispatchers: [this.address, ...this.peers].map((address, i) => ({ dispatcherId: `d${i}`, region: "local", address })) }),
      ListShards: (_c: unknown, cb: grpc.sendUnaryData<unknown>) => cb(null, { shards: [] }),
    });
    const port = await new Promise<number>((resolve, reject) =>
      this.server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
    );
    this.address = `127.0.0.1:${port}`;
    return this;
  }

  stop(): void {
    this.server.forceShutdown();
  }

  /** Attempt reference of a new fake job. */
  ref(): AttemptRef {
    this.seq++;
    return { job: `namespaces/default/jobs/00000000-0000-0000-0000-${String(this.seq).padStart(12, "0")}`, attempt: 1, version: "1", fencingToken: "7" };
  }

  /** Sends one assignment on `stream` (payload: JSON `body`; `extra`: more Assignment fields). */
  assign(stream: Stream, ref: AttemptRef, body: unknown = {}, leaseMs = 10_000, extra: Record<string, unknown> = {}): void {
    stream.write({
      assignments: {
        assignments: [
          { attempt: ref, queue: "q", payload: Buffer.from(JSON.stringify(body)), idempotencyKey: `k-${ref.job}`, leaseDuration: { seconds: String(leaseMs / 1000), nanos: 0 }, ...extra },
        ],
      },
    });
  }

  /** Every item of one kind the worker sent (accepts, results, releases, heartbeats' refs). */
  items(kind: "accepts" | "releases" | "heartbeats"): AttemptRef[];
  items(kind: "results"): { attempt: AttemptRef; outcome: string; failureClass: string; error: string }[];
  items(kind: string): unknown[] {
    const out: unknown[] = [];
    for (const m of this.received) {
      if (m.kind !== kind) continue;
      if (kind === "results") out.push(...m.results!.results);
      else out.push(...((m as unknown as Record<string, { attempts: unknown[] }>)[kind]?.attempts ?? []));
    }
    return out;
  }

  private bump(kind: string, ref: AttemptRef): number {
    const k = `${kind}|${ref.job}`;
    const n = (this.counts.get(k) ?? 0) + 1;
    this.counts.set(k, n);
    return n;
  }

  private lease(stream: Stream): void {
    this.streams.push(stream);
    stream.on("data", (m: LeaseRequest__Output) => {
      this.received.push(m);
      const acks: Ack[] = [];
      const ack = (ref: AttemptRef, kind: Ack["kind"], extra: Partial<Ack> | null | undefined) => {
        if (extra === null) return;
        acks.push({ attempt: ref, kind, ok: true, ...(extra ?? {}) });
      };
      switch (m.kind) {
        case "hello":
          this.creditsGranted += m.hello!.credits;
          stream.write({ welcome: { dispatcherId: "fake", region: "local", heartbeatInterval: { seconds: "0", nanos: 200_000_000 } } });
          this.script.onHello?.(stream, m.hello!.credits);
          return;
        case "credits":
          this.creditsReturned += m.credits!.credits;
          return;
        case "accepts":
          for (const r of m.accepts!.attempts) ack(r, "ACK_KIND_ACCEPT", this.script.ackAccept?.(r, this.bump("accept", r)));
          break;
        case "results":
          for (const r of m.results!.results) ack(r.attempt!, "ACK_KIND_RESULT", this.script.ackResult?.(r.attempt!, this.bump("result", r.attempt!)));
          break;
        case "releases":
          for (const r of m.releases!.attempts) ack(r, "ACK_KIND_RELEASE", {});
          break;
        case "heartbeats":
          for (const r of m.heartbeats!.attempts) ack(r, "ACK_KIND_HEARTBEAT", this.script.ackHeartbeat?.(r));
          for (const c of m.heartbeats!.checkpoints) ack(c.attempt!, "ACK_KIND_CHECKPOINT", {});
          break;
      }
      if (acks.length) stream.write({ acks: { acks } });
    });
    stream.on("end", () => stream.end());
    stream.on("error", () => undefined);
  }
}

/** Resolves once `cond()` holds (polling every 10 ms); rejects after `ms`. */
export async function until(cond: () => boolean, ms = 5000, what = "condition"): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Options every test worker uses: plaintext, no config file, no signal handlers, quiet. */
export const QUIET = {
  insecure: true,
  env: { GNOMON_CONFIG_FILE: "/nonexistent/gnomon-config.toml" },
  handleSignals: false,
  logger: () => undefined,
};
