/**
 * Runnable example: every Client call once, against a running Gnomon (connection settings from the
 * environment / profile). Creates jobs and a schedule on `<queue>` (nobody needs to serve it) and
 * prints one JSON line with what each call returned.
 *
 *   node dist/examples/client-tour.js <queue>
 */
import { Client, GnomonError, toTimestamp } from "../src";

async function main(): Promise<void> {
  const queue = process.argv[2];
  if (!queue) throw new Error("usage: client-tour <queue>");
  const c = new Client();
  const out: Record<string, unknown> = {};
  // jobs
  const later = await c.createJob(queue, JSON.stringify({ hello: "world" }), { delayMs: 3_600_000, maxAttempts: 3 });
  out.created = { state: later.state, maxAttempts: later.maxAttempts };
  const again = await c.createJob(queue, "x", { requestId: "5b0d5bd6-4a43-4a8e-9d6f-6f1d1b2c3d4e" });
  const dup = await c.createJob(queue, "x", { requestId: "5b0d5bd6-4a43-4a8e-9d6f-6f1d1b2c3d4e" });
  out.requestIdDeduplicates = again.name === dup.name;
  const batch = await c.createJobs([1, 2, 3].map(() => ({ queue, delay: { seconds: "3600", nanos: 0 } })));
  out.batch = batch.length;
  out.got = (await c.getJob(later.name)).payload.toString("utf8");
  const moved = await c.rescheduleJob(later.name, { delayMs: 7_200_000 });
  out.rescheduled = moved.scheduleTime !== null && Number(moved.scheduleTime.seconds) > Number(later.scheduleTime!.seconds);
  out.listed = (await c.listJobs({ queue, pageSize: 100 })).jobs.length;
  out.cancel = (await c.cancelJob(later.name)).outcome;
  out.attempts = (await c.listJobAttempts(later.name)).attempts.length;
  try {
    await c.getJob("00000000-0000-0000-0000-000000000000");
  } catch (e) {
    out.notFound = e instanceof GnomonError ? e.codeName : String(e);
  }
  // schedules
  const s = await c.createSchedule({ interval: { seconds: "3600", nanos: 0 }, startTime: toTimestamp(new Date()), jobTemplate: { queue } });
  out.schedule = s.name.startsWith(`${c.parent}/schedules/`);
  out.scheduleGot = (await c.getSchedule(s.name)).name === s.name;
  out.schedulesListed = (await c.listSchedules({ queue })).schedules.length;
  out.paused = (await c.pauseSchedule(s.name)).schedule?.paused;
  out.resumed = !(await c.resumeSchedule(s.name)).paused;
  out.triggered = (await c.triggerSchedule(s.name)).job?.queue === queue;
  out.withdrawn = await c.deleteSchedule(s.name); // pending occurrence jobs withdrawn with it
  // dead letters
  out.deadLetters = (await c.listDeadLetters({ queue })).deadLetters.length;
  const replay = await c.replayDeadLetters({ queue, maxRate: 1, maxJobs: 10, dryRun: true, reason: "client tour" });
  out.replayDryRun = replay.dryRun;
  // queues
  out.queue = (await c.getQueue(queue)).name;
  const limited = await c.setQueueRateLimit(queue, 5, 10);
  out.rateLimit = limited.rateLimit ? { rate: limited.rateLimit.rate, burst: limited.rateLimit.burst } : null;
  out.unlimited = (await c.setQueueRateLimit(queue, 0)).rateLimit === null;
  c.close();
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((err) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
