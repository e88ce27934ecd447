// The TypeScript SDK's twin of history.run (tests/faults/history.py): a worker of @gnomon/sdk whose
// handler records "<job> <attempt> <key> <token> <wall s> <pid>" to $GNOMON_TEST_RECORD at start (one
// append write), then sleeps payload.sleep seconds if the attempt is in payload.sleep_attempts
// (default [1]) and $GNOMON_TEST_SLEEP_OK is unset or names this worker ($GNOMON_TEST_WORKER); a
// cancellation cuts the sleep short. Needs the built package (scripts/bootstrap builds libs/sdk-ts).
//
//   node tests/faults/history_worker.js <concurrency> <queue> [queue ...]
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const { Worker } = require(path.join(__dirname, "..", "..", "libs", "sdk-ts", "dist", "src"));

const [concurrency, ...queues] = process.argv.slice(2);

async function run(ctx) {
  const line = `${ctx.job} ${ctx.attempt} ${ctx.idempotencyKey} ${ctx.fencingToken} ${(Date.now() / 1000).toFixed(6)} ${process.pid}\n`;
  const fd = fs.openSync(process.env.GNOMON_TEST_RECORD, "a");
  try {
    fs.writeSync(fd, line);
  } finally {
    fs.closeSync(fd);
  }
  let spec = {};
  try {
    spec = JSON.parse(ctx.payload.toString("utf8") || "{}");
  } catch {
    spec = {};
  }
  const ok = process.env.GNOMON_TEST_SLEEP_OK;
  if (spec.sleep && (spec.sleep_attempts || [1]).includes(ctx.attempt) && (!ok || ok === process.env.GNOMON_TEST_WORKER)) {
    await new Promise((resolve) => {
      const t = setTimeout(resolve, Number(spec.sleep) * 1000);
      ctx.signal.addEventListener("abort", () => {
        clearTimeout(t);
        resolve();
      });
    });
  }
}

new Worker({ queues, concurrency: Number(concurrency), handler: run }).run().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`${err && err.stack ? err.stack : String(err)}\n`);
    process.exit(1);
  },
);
