// Unit tests of the pure lease-protocol bookkeeping: credits, ack outcomes, re-send backoff, the
// local lease, the outgoing buffer.
import { test } from "node:test";
import * as assert from "node:assert/strict";
import {
  AckOutcome,
  LeaseProtocol,
  LocalLease,
  MAX_ACCEPT_RETRIES,
  initialLeaseMs,
  isFinalRefusal,
  leaseMarginMs,
  reconnectDelayMs,
  resendDelayMs,
} from "../src/protocol";
import { OutgoingBuffer, refKey } from "../src/outgoing";

test("hello grants concurrency minus held, at least one, and records the surplus as owed", () => {
  const p = new LeaseProtocol<string, string>(4);
  assert.equal(p.hello(0), 4);
  assert.equal(p.owed, 0);
  assert.equal(p.hello(3), 1);
  assert.equal(p.owed, 0);
  assert.equal(p.hello(4), 1); // still one credit, owed back from the next return
  assert.equal(p.owed, 1);
  assert.equal(p.hello(6), 1);
  assert.equal(p.owed, 3);
  assert.equal(new LeaseProtocol(20000).hello(0), 10000);
});

test("each attempt leaving returns exactly one credit, except while draining or paying off owed", () => {
  const p = new LeaseProtocol<string, string>(2);
  p.hello(3); // owed = 2
  assert.deepEqual([p.creditBack(false), p.creditBack(false), p.creditBack(false)], [0, 0, 1]);
  assert.equal(p.creditBack(true), 0);
  let total = 0;
  p.hello(0);
  for (let i = 0; i < 100; i++) total += p.creditBack(false);
  assert.equal(total, 100);
});

test("resend delay doubles from 250 ms and is capped at 5 s", () => {
  assert.deepEqual([1, 2, 3, 4, 5, 6, 10].map(resendDelayMs), [250, 500, 1000, 2000, 4000, 5000, 5000]);
});

test("reconnect delay: 100 ms doubling per failed try, capped at 5 s, ±20 % jitter", () => {
  assert.equal(reconnectDelayMs(1, () => 0.5), 100);
  assert.equal(reconnectDelayMs(4, () => 0.5), 800);
  assert.equal(reconnectDelayMs(30, () => 0.5), 5000);
  assert.equal(reconnectDelayMs(1, () => 0), 80);
  assert.equal(Math.round(reconnectDelayMs(30, () => 0.999999)), 6000);
});

test("final and transient refusals", () => {
  for (const r of ["STALE_ATTEMPT", "STALE_FENCING_TOKEN", "LEASE_EXPIRED", "INVALID_FIELD", "", "CHECKPOINT_TOO_LARGE"]) {
    assert.ok(isFinalRefusal(r), r);
  }
  assert.ok(!isFinalRefusal("DATABASE_UNAVAILABLE"));
});

test("results stay pending through transient refusals and settle on ok or a final refusal", () => {
  const p = new LeaseProtocol<string, string>(1);
  p.accept("k", "ref");
  p.finish("k", "result");
  assert.ok(p.hasUnacked());
  assert.deepEqual(p.resultAck("k", false, "DATABASE_UNAVAILABLE"), [AckOutcome.RETRY, 250]);
  assert.deepEqual(p.resultAck("k", false, "DATABASE_UNAVAILABLE"), [AckOutcome.RETRY, 500]);
  assert.deepEqual(p.resendAll(), { accepts: ["ref"], results: ["result"], releases: [] });
  assert.deepEqual(p.resultAck("k", true), [AckOutcome.SETTLED, 0]);
  assert.ok(!p.hasUnacked());
  assert.equal(p.accepts.size, 0);
  assert.deepEqual(p.resultAck("k", true), [AckOutcome.IGNORED, 0]);
});

test("an accept refused transiently is retried MAX_ACCEPT_RETRIES times, then settles", () => {
  const p = new LeaseProtocol<string, string>(1);
  p.accept("k", "ref");
  for (let i = 0; i < MAX_ACCEPT_RETRIES; i++) {
    assert.equal(p.acceptAck("k", false, "DATABASE_UNAVAILABLE")[0], AckOutcome.RETRY);
  }
  assert.equal(p.acceptAck("k", false, "DATABASE_UNAVAILABLE")[0], AckOutcome.SETTLED);
  p.accept("j", "ref");
  assert.equal(p.acceptAck("j", false, "DATABASE_UNAVAILABLE", false)[0], AckOutcome.SETTLED);
});

test("a release stays pending until acknowledged", () => {
  const p = new LeaseProtocol<string, string>(1);
  p.release("k", "ref");
  assert.ok(p.hasUnacked());
  assert.equal(p.releaseAck("k", false, "DATABASE_UNAVAILABLE")[0], AckOutcome.RETRY);
  assert.equal(p.releaseAck("k", false, "STALE_ATTEMPT")[0], AckOutcome.SETTLED);
  assert.ok(!p.hasUnacked());
});

test("local lease: margin, renewal from the heartbeat send time, loss", () => {
  assert.equal(leaseMarginMs(30_000), 6000);
  assert.equal(leaseMarginMs(1000), 500);
  let now = 0;
  const lease = new LocalLease(10_000, 0, () => now);
  assert.equal(lease.remaining(), 8000);
  now = 5000;
  lease.heartbeatSent();
  now = 9000;
  lease.heartbeatAcked(true); // renewed from t=5000
  assert.equal(lease.deadline, 15_000);
  lease.heartbeatSent();
  lease.heartbeatAcked(false);
  assert.equal(lease.deadline, 15_000);
  now = 13_001;
  assert.ok(lease.lost());
  assert.equal(initialLeaseMs(2000, null), 2000);
  assert.equal(initialLeaseMs(null, 5000, 1000), 4000);
  assert.equal(initialLeaseMs(null, null), 30_000);
});

test("outgoing buffer coalesces per kind in protocol order and sums credits", () => {
  let woken = 0;
  const b = new OutgoingBuffer(() => woken++);
  const ref = (n: number) => ({ job: `namespaces/d/jobs/${n}`, attempt: 1, version: "1", fencingToken: "7" });
  b.addCredits(1);
  b.addResult({ attempt: ref(1), outcome: "OUTCOME_SUCCEEDED" });
  b.addAccept(ref(1));
  b.addAccept(ref(1));
  b.addAccept(ref(2));
  b.addRelease(ref(3));
  b.addCredits(2);
  b.setHeartbeats([ref(2)], [{ attempt: ref(2), data: Buffer.from("cp") }]);
  assert.ok(woken > 0);
  const msgs = b.take();
  assert.deepEqual(
    msgs.map((m) => Object.keys(m)[0]),
    ["accepts", "heartbeats", "results", "releases", "credits"],
  );
  assert.equal(msgs[0].accepts!.attempts!.length, 2);
  assert.equal(msgs[1].heartbeats!.checkpoints!.length, 1);
  assert.deepEqual(msgs[4], { credits: { credits: 3 } });
  assert.deepEqual(b.take(), []);
  assert.equal(refKey(ref(1)), "namespaces/d/jobs/1|1|7");
});

test("outgoing buffer splits large batches", () => {
  const b = new OutgoingBuffer();
  for (let i = 0; i < 2500; i++) b.addAccept({ job: `j${i}`, attempt: 1, fencingToken: "1" });
  b.addCredits(25_000);
  const msgs = b.take();
  assert.deepEqual(msgs.filter((m) => m.accepts).map((m) => m.accepts!.attempts!.length), [1000, 1000, 500]);
  assert.deepEqual(msgs.filter((m) => m.credits).map((m) => m.credits!.credits), [10000, 10000, 5000]);
});
