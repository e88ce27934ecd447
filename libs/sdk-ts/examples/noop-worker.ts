/**
 * A worker whose handler does nothing (measures Gnomon's own cost per job; used by
 * `python -m bench.drain --workers-lang ts`). Connection settings from the environment / profile.
 *
 *   node dist/examples/noop-worker.js <concurrency> <queue> [queue ...]
 *
 * Runs until SIGTERM/SIGINT (graceful drain), then exits 0.
 */
import { Worker } from "../src";

const [concurrency, ...queues] = process.argv.slice(2);
if (!queues.length) {
  process.stderr.write("usage: noop-worker <concurrency> <queue> [queue ...]\n");
  process.exit(2);
}
new Worker({ queues, concurrency: Number(concurrency), handler: async () => undefined })
  .run()
  .then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
      process.exit(1);
    },
  );
