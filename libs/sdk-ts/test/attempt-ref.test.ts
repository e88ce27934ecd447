// The TypeScript SDK echoes AttemptRef.jobId (the job id as 16 bytes the dispatcher sets) unchanged
// in its accepts and results, so the dispatcher never parses the job name for them.
import { test } from "node:test";
import * as assert from "node:assert/strict";
import { Worker } from "../src";
import { FakeDispatcher, QUIET, until, type Stream } from "./fake-dispatcher";

test("the job id bytes of an assignment are echoed in its accept and result", async () => {
  const fake = new FakeDispatcher();
  const jobId = Buffer.from("00112233445566778899aabbccddeeff", "hex");
  fake.script = { onHello: (s: Stream) => fake.assign(s, { ...fake.ref(), jobId }) };
  await fake.start();
  const worker = new Worker({ ...QUIET, dispatchers: [fake.address], queues: ["q"], concurrency: 1, handler: async () => undefined });
  try {
    const run = worker.run();
    await until(() => fake.items("results").length === 1, 5000, "the result");
    worker.drain();
    await run;
    const sent = [...fake.items("accepts"), ...fake.items("results").map((r) => r.attempt)];
    assert.equal(sent.length, 2);
    for (const ref of sent) assert.deepEqual(Buffer.from(ref.jobId as Uint8Array), jobId);
  } finally {
    worker.drain();
    fake.stop();
  }
});
