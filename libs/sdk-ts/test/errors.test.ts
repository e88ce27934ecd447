// Unit tests: rich-status decoding into GnomonError, and failure classification of handler errors.
import { test } from "node:test";
import * as assert from "node:assert/strict";
import { Metadata, status } from "@grpc/grpc-js";
import { encodeStatusDetails } from "../src/proto";
import {
  AmbiguousError,
  CancelledError,
  GnomonError,
  PermanentError,
  ThrottledError,
  TransientError,
} from "../src/errors";
import { classifyError, formatError } from "../src/failures";

function serviceError(code: number, details: string, bin?: Buffer) {
  const metadata = new Metadata();
  if (bin) metadata.set("grpc-status-details-bin", bin);
  return Object.assign(new Error(details), { code, details, metadata });
}

test("ErrorInfo, BadRequest and RetryInfo are decoded from grpc-status-details-bin", () => {
  const bin = encodeStatusDetails({
    code: status.INVALID_ARGUMENT,
    message: "bad job",
    details: [
      { typeName: "google.rpc.ErrorInfo", value: { reason: "INVALID_QUEUE", domain: "gnomon.dev", metadata: { field: "queue" } } },
      { typeName: "google.rpc.BadRequest", value: { fieldViolations: [{ field: "job.queue", description: "must match [a-z0-9]" }] } },
      { typeName: "google.rpc.RetryInfo", value: { retryDelay: { seconds: 2, nanos: 500_000_000 } } },
    ],
  });
  const err = GnomonError.fromServiceError(serviceError(status.INVALID_ARGUMENT, "bad job", bin));
  assert.equal(err.code, status.INVALID_ARGUMENT);
  assert.equal(err.codeName, "INVALID_ARGUMENT");
  assert.equal(err.reason, "INVALID_QUEUE");
  assert.equal(err.domain, "gnomon.dev");
  assert.deepEqual(err.metadata, { field: "queue" });
  assert.deepEqual(err.fieldViolations, [{ field: "job.queue", description: "must match [a-z0-9]" }]);
  assert.equal(err.retryDelayMs, 2500);
  assert.match(err.message, /^INVALID_ARGUMENT: bad job \[INVALID_QUEUE\] \(job.queue: must match/);
});

test("a call without details, or with undecodable details, keeps the plain code and message", () => {
  const plain = GnomonError.fromServiceError(serviceError(status.NOT_FOUND, "no such job"));
  assert.equal(plain.reason, null);
  assert.deepEqual(plain.fieldViolations, []);
  assert.equal(plain.retryDelayMs, null);
  const junk = GnomonError.fromServiceError(serviceError(status.UNAVAILABLE, "down", Buffer.from([0xff, 0xff, 0xff])));
  assert.equal(junk.code, status.UNAVAILABLE);
  assert.equal(junk.reason, null);
});

test("handler errors map to failure classes", () => {
  assert.equal(classifyError(new PermanentError("x")).failureClass, "FAILURE_CLASS_PERMANENT");
  assert.equal(classifyError(new TransientError("x")).failureClass, "FAILURE_CLASS_TRANSIENT");
  assert.equal(classifyError(new AmbiguousError("x")).failureClass, "FAILURE_CLASS_AMBIGUOUS");
  assert.equal(classifyError(new Error("x")).failureClass, "FAILURE_CLASS_TRANSIENT");
  assert.equal(classifyError("a string").failureClass, "FAILURE_CLASS_TRANSIENT");
  const t = classifyError(new ThrottledError(1500, "slow down"));
  assert.deepEqual(t, { failureClass: "FAILURE_CLASS_THROTTLED", error: "ThrottledError: slow down", retryAfterMs: 1500 });
  assert.throws(() => new ThrottledError(-1));
  assert.equal(classifyError(new CancelledError("cancel_requested")).failureClass, "FAILURE_CLASS_PERMANENT");
  assert.equal(classifyError(new CancelledError("shutdown")).failureClass, "FAILURE_CLASS_TRANSIENT");
  const ac = new AbortController();
  ac.abort(new CancelledError("cancel_requested"));
  const abortErr = Object.assign(new Error("aborted"), { name: "AbortError" });
  assert.equal(classifyError(abortErr, ac.signal).failureClass, "FAILURE_CLASS_PERMANENT");
});

test("error text is 'Name: message', cut to 4096 characters", () => {
  assert.equal(formatError(new TypeError("nope")), "TypeError: nope");
  const long = formatError(new Error("x".repeat(5000)));
  assert.equal(long.length, 4096);
  assert.ok(long.endsWith("…"));
});
