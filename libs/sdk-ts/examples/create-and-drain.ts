/**
 * Runnable example: creates N jobs on a queue with the Client, then drains them with a Worker and
 * stops once every one of them succeeded. Connection settings come from the environment / config
 * profile (GNOMON_API, GNOMON_TLS_CA_FILE, GNOMON_API_KEY, ...), as for the Python SDK.
 *
 *   node dist/examples/create-and-drain.js <queue> [count=50] [concurrency=8]
 *
 * Prints one JSON line: {"created": [job names], "succeeded": <count>, "elapsed_s": <float>}.
 */
import { Client, Worker } from "../src";

async function main(): Promise<void> {
  const [queue, countArg, concArg] = process.argv.slice(2);
  if (!queue) throw new Error("usage: create-and-drain <queue> [count] [concurrency]");
  const count = Number(countArg ?? 50);
  const client = new Client();
  const created: string[] = [];
  for (let i = 0; i < count; i++) {
    const job = await client.createJob(queue, JSON.stringify({ n: i }));
    created.push(job.name);
  }
  const want = new Set(created);
  const done = new Set<string>();
  const t0 = performance.now();
  const worker = new Worker({
    queues: [queue],
    concurrency: Number(concArg ?? 8),
    handler: async (ctx) => {
      const body = ctx.json<{ n: number }>();
      if (typeof body.n !== "number") throw new Error("bad payload");
    },
    onEvent: (kind, ctx) => {
      if (kind === "finished" && want.has(ctx.job)) {
        done.add(ctx.job);
        if (done.size === want.size) worker.drain();
      }
    },
  });
  await worker.run();
  client.close();
  const elapsed = (performance.now() - t0) / 1000;
  process.stdout.write(JSON.stringify({ created, succeeded: done.size, elapsed_s: elapsed }) + "\n");
}

main().catch((err) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
