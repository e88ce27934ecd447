/**
 * `@gnomon/sdk`: the TypeScript SDK of Gnomon. {@link Client} (jobs, schedules, dead letters,
 * queues) and {@link Worker} (the lease protocol: discovery of every dispatcher, credits,
 * heartbeats, checkpoints, cancellation, graceful drain).
 */
export { Worker, type WorkerOptions, type Handler, type WorkerEvent } from "./worker";
export { JobContext, MAX_CHECKPOINT_BYTES } from "./context";
export { HANDLER_SPAN } from "./tracing";
export {
  GnomonError,
  CancelledError,
  TransientError,
  PermanentError,
  ThrottledError,
  AmbiguousError,
  codeName,
  type FieldViolation,
  type CancelReason,
} from "./errors";
export { classifyError, type Failure, type FailureClassName } from "./failures";
export { resolveConnection, type Connection, type ConnectionOptions } from "./connection";
export { Client, type ClientOptions, type CreateJobOptions } from "./client";
export { toTimestamp, toDate, toDuration, durationMs } from "./proto";
