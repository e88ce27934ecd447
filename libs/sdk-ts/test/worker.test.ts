// Worker behaviour against a scripted in-process dispatcher (test/fake-dispatcher.ts): credits,
// accept before the handler, results re-sent until acknowledged, accepts given up and released,
// cancellation, drain, rerouting to another dispatcher, fatal rejection.
import { test } from "node:test";
import * as assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { CancelledError, GnomonError, Worker, type JobContext } from "../src";
import { FakeDispatcher, QUIET, until, type Stream } from "./fake-dispatcher";

test("discovery from the API address; one credit back per finished attempt; the handler starts only after its accept ack", async () => {
  const order: string[] = [];
  const fake = new FakeDispatcher();
  fake.script = {
    onHello: (s: Stream, credits: number) => {
      assert.equal(credits, 2);
      for (let i = 0; i < 2; i++) fake.assign(s, fake.ref());
    },
    ackAccept: (ref) => {
      order.push(`ack ${ref.job}`);
      return {};
    },
  };
  await fake.start();
  let assigned = 2;
  const worker = new Worker({
    ...QUIET,
    api: fake.address, // only the API address: the dispatcher is found by ListDispatchers
    queues: ["q"],
    concurrency: 2,
    handler: async (ctx: JobContext) => {
      order.push(`start ${ctx.job}`);
      await new Promise((r) => setTimeout(r, 5));
    },
  });
  const run = worker.run();
  // keep the dispatcher honest: a new assignment only for a credit returned
  const feeder = setInterval(() => {
    while (assigned < 10 && assigned < fake.creditsGranted + fake.creditsReturned) {
      fake.assign(fake.streams[0], fake.ref());
      assigned++;
    }
  }, 5);
  await until(() => fake.items("results").length === 10, 5000, "10 results");
  clearInterval(feeder);
  await until(() => fake.creditsReturned === 10, 2000, "10 credits back");
  worker.drain();
  await run;
  for (const r of fake.items("results")) assert.equal(r.outcome, "OUTCOME_SUCCEEDED");
  for (const job of new Set(fake.items("accepts").map((r) => r.job))) {
    assert.ok(order.indexOf(`ack ${job}`) < order.indexOf(`start ${job}`), `${job} started before its accept ack`);
  }
  assert.equal(fake.creditsReturned, 10); // no credit for anything else
  fake.stop();
});

test("a result refused with DATABASE_UNAVAILABLE is re-sent until acknowledged; the handler ran once", async () => {
  const fake = new FakeDispatcher();
  fake.script = {
    onHello: (s) => fake.assign(s, fake.ref()),
    ackResult: (_ref, n) => (n < 3 ? { ok: false, reason: "DATABASE_UNAVAILABLE" } : {}),
  };
  await fake.start();
  let runs = 0;
  const worker = new Worker({ ...QUIET, dispatchers: [fake.address], queues: ["q"], concurrency: 1, handler: () => void runs++ });
  const run = worker.run();
  await until(() => fake.items("results").length === 3, 5000, "3 result sends");
  await until(() => fake.creditsReturned === 1, 2000, "the credit back");
  worker.drain();
  await run;
  assert.equal(runs, 1);
  assert.equal(fake.items("results").length, 3);
  fake.stop();
});

test("an accept refused transiently 6 times is released, never dropped, and its credit returned", async () => {
  const fake = new FakeDispatcher();
  fake.script = {
    onHello: (s) => fake.assign(s, fake.ref()),
    ackAccept: () => ({ ok: false, reason: "DATABASE_UNAVAILABLE" }),
  };
  await fake.start();
  let runs = 0;
  const worker = new Worker({ ...QUIET, dispatchers: [fake.address], queues: ["q"], concurrency: 1, handler: () => void runs++ });
  const run = worker.run();
  try {
    // the release and the returned credit are two messages: wait for both, not for the first
    await until(() => fake.items("releases").length === 1 && fake.creditsReturned >= 1, 15_000, "the release and its credit");
    assert.equal(fake.items("accepts").length, 6); // the first send and 5 re-sends
    assert.equal(fake.creditsReturned, 1);
  } finally {
    worker.drain();
    await run;
    fake.stop();
  }
  assert.equal(runs, 0);
});

test("cancel_requested on a heartbeat ack aborts ctx.signal; the escaped CancelledError is reported PERMANENT", async () => {
  const fake = new FakeDispatcher();
  fake.script = {
    onHello: (s) => fake.assign(s, fake.ref()),
    ackHeartbeat: () => ({ ok: true, cancelRequested: true, leaseExpireTime: { seconds: String(Math.floor(Date.now() / 1000) + 10), nanos: 0 } }),
  };
  await fake.start();
  let reason: unknown = null;
  const worker = new Worker({
    ...QUIET,
    dispatchers: [fake.address],
    queues: ["q"],
    concurrency: 1,
    handler: (ctx) =>
      new Promise((_resolve, reject) =>
        ctx.signal.addEventListener("abort", () => {
          reason = ctx.cancelReason;
          reject(ctx.signal.reason);
        }),
      ),
  });
  const run = worker.run();
  await until(() => fake.items("results").length === 1, 5000, "the result");
  worker.drain();
  await run;
  assert.equal(reason, "cancel_requested");
  const [r] = fake.items("results");
  assert.equal(r.outcome, "OUTCOME_FAILED");
  assert.equal(r.failureClass, "FAILURE_CLASS_PERMANENT");
  assert.match(r.error, /CancelledError/);
  fake.stop();
});

test("drain releases unstarted attempts, lets the running handler report, returns no credits", async () => {
  const fake = new FakeDispatcher();
  fake.script = { onHello: (s) => [1, 2, 3].forEach(() => fake.assign(s, fake.ref())) };
  await fake.start();
  let started = 0;
  const worker = new Worker({
    ...QUIET,
    dispatchers: [fake.address],
    queues: ["q"],
    concurrency: 1,
    handler: async () => {
      started++;
      await new Promise((r) => setTimeout(r, 300));
    },
  });
  const run = worker.run();
  await until(() => started === 1, 5000, "the first handler");
  await until(() => fake.items("accepts").length === 1 && worker.runningHandlers === 1, 2000, "one running");
  worker.drain();
  await run;
  assert.equal(started, 1);
  assert.equal(fake.items("results").length, 1);
  assert.equal(fake.items("releases").length, 2);
  assert.equal(fake.creditsReturned, 0);
  fake.stop();
});

test("a dispatcher that dies mid-attempt: heartbeats and the result go to another dispatcher", async () => {
  const a = await new FakeDispatcher().start();
  const b = await new FakeDispatcher().start();
  const ref = a.ref();
  a.script = { onHello: (s) => a.assign(s, ref, {}, 3000) };
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let lostSignal = false;
  const worker = new Worker({
    ...QUIET,
    dispatchers: [a.address, b.address],
    queues: ["q"],
    concurrency: 1,
    handler: async (ctx) => {
      await gate;
      lostSignal = ctx.signal.aborted;
    },
  });
  const run = worker.run();
  await until(() => worker.runningHandlers === 1 && a.items("accepts").length === 1, 5000, "the attempt running");
  a.stop(); // crash: never comes back
  await until(() => b.items("heartbeats").some((r) => r.job === ref.job), 5000, "a heartbeat through b");
  release();
  await until(() => b.items("results").some((r) => r.attempt.job === ref.job), 5000, "the result through b");
  worker.drain();
  await run;
  assert.equal(lostSignal, false);
  b.stop();
});

test("a hello refused with INVALID_ARGUMENT stops the worker with a GnomonError", async () => {
  const server = new grpc.Server();
  const { gnomon } = await import("../src/proto");
  server.addService(gnomon().gnomon.v1.WorkerService.service, {
    Lease: (s: grpc.ServerDuplexStream<unknown, unknown>) =>
      s.once("data", () => s.emit("error", { code: grpc.status.INVALID_ARGUMENT, details: "hello.queues[0]: bad queue name" })),
  });
  const port = await new Promise<number>((res, rej) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (e, p) => (e ? rej(e) : res(p))),
  );
  const worker = new Worker({ ...QUIET, dispatchers: [`127.0.0.1:${port}`], queues: ["Bad"], handler: () => undefined });
  await assert.rejects(worker.run(), (err: unknown) => err instanceof GnomonError && err.code === grpc.status.INVALID_ARGUMENT);
  server.forceShutdown();
});

test("the worker validates its options", () => {
  assert.throws(() => new Worker({ ...QUIET, queues: [], handler: () => undefined }), RangeError);
  assert.throws(() => new Worker({ ...QUIET, queues: ["q"], concurrency: 0, handler: () => undefined }), RangeError);
  assert.ok(new CancelledError("shutdown").message.includes("shutdown"));
});

test("a checkpoint saved and acknowledged resolves; one left unawaited when the attempt ends does not crash the process", async () => {
  const fake = new FakeDispatcher();
  fake.script = { onHello: (s) => [1, 2].forEach(() => fake.assign(s, fake.ref())) };
  await fake.start();
  let n = 0;
  let acked = false;
  const worker = new Worker({
    ...QUIET,
    dispatchers: [fake.address],
    queues: ["q"],
    concurrency: 1,
    handler: async (ctx) => {
      if (n++ === 0) {
        await ctx.checkpoint("half way");
        acked = true;
      } else {
        void ctx.checkpoint("never awaited"); // the attempt ends before its ack
      }
    },
  });
  const run = worker.run();
  await until(() => fake.items("results").length === 2, 5000, "both results");
  await new Promise((r) => setTimeout(r, 400)); // past the heartbeat that would carry it
  worker.drain();
  await run;
  assert.ok(acked);
  const cps = fake.received.filter((m) => m.kind === "heartbeats").flatMap((m) => m.heartbeats!.checkpoints);
  assert.equal(cps[0].data.toString(), "half way");
  fake.stop();
});

test("drain() before run() makes that run return at once", async () => {
  const worker = new Worker({ ...QUIET, dispatchers: ["127.0.0.1:1"], queues: ["q"], handler: () => undefined });
  worker.drain();
  await worker.run();
});
