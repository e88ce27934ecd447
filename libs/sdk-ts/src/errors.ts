/**
 * Errors of the SDK.
 *
 * - {@link GnomonError}: a failed RPC, decoded from the server's rich status (the
 *   `grpc-status-details-bin` trailer, a `google.rpc.Status` whose details may hold an
 *   `ErrorInfo`, a `BadRequest` and a `RetryInfo`).
 * - Errors a job handler throws to choose the failure class of its attempt:
 *   {@link TransientError}, {@link PermanentError}, {@link ThrottledError}, {@link AmbiguousError}
 *   (anything else is TRANSIENT), and {@link CancelledError}, the reason a cancelled
 *   `ctx.signal` is aborted with.
 */
import type { Metadata, ServiceError } from "@grpc/grpc-js";
import { status as Status } from "@grpc/grpc-js";
import { decodeStatusDetails } from "./proto";

/** Name of the trailer that carries the serialized `google.rpc.Status`. */
export const DETAILS_KEY = "grpc-status-details-bin";

/** One `google.rpc.BadRequest.FieldViolation`: which input field is wrong, and why. */
export interface FieldViolation {
  /** Path of the field, e.g. `job.queue` or `hello.queues[0]`. */
  field: string;
  /** Human-readable description of the problem. */
  description: string;
}

/** The parts of a rich status the SDK understands. */
export interface RichStatus {
  /** `ErrorInfo.reason` (UPPER_SNAKE, e.g. `NOT_FOUND`), or null when absent. */
  reason: string | null;
  /** `ErrorInfo.domain` (`gnomon.dev`), or null when absent. */
  domain: string | null;
  /** `ErrorInfo.metadata` (empty when absent). */
  metadata: Record<string, string>;
  /** Every `BadRequest.field_violations` entry. */
  fieldViolations: FieldViolation[];
  /** `RetryInfo.retry_delay` in milliseconds, or null when absent. */
  retryDelayMs: number | null;
  /** `Status.message` ("" when absent). */
  message: string;
}

/**
 * A failed Gnomon RPC.
 *
 * `code` is the numeric gRPC status (see `codeName` for its name, e.g. `INVALID_ARGUMENT`),
 * `message` the status message, `reason`/`domain`/`metadata` the `ErrorInfo` (null/empty when the
 * server sent none), `fieldViolations` the `BadRequest` entries, `retryDelayMs` the `RetryInfo`
 * delay in milliseconds (e.g. `RESOURCE_EXHAUSTED` with reason `QUOTA_EXCEEDED`: wait this long).
 */
export class GnomonError extends Error {
  readonly code: number;
  readonly reason: string | null;
  readonly domain: string | null;
  readonly metadata: Record<string, string>;
  readonly fieldViolations: FieldViolation[];
  readonly retryDelayMs: number | null;
  readonly details: string;

  constructor(
    code: number,
    details: string,
    rich: Partial<RichStatus> = {},
  ) {
    super(formatError(code, details, rich));
    this.name = "GnomonError";
    this.code = code;
    this.details = details;
    this.reason = rich.reason ?? null;
    this.domain = rich.domain ?? null;
    this.metadata = rich.metadata ?? {};
    this.fieldViolations = rich.fieldViolations ?? [];
    this.retryDelayMs = rich.retryDelayMs ?? null;
  }

  /** The name of {@link code}, e.g. `NOT_FOUND`. */
  get codeName(): string {
    return codeName(this.code);
  }

  /**
   * Builds a GnomonError from a failed call (a grpc-js `ServiceError`, or anything with `code`,
   * `details` and `metadata`). Never throws: undecodable details fall back to the plain code and
   * message.
   */
  static fromServiceError(err: Partial<ServiceError> | Error): GnomonError {
    const e = err as Partial<ServiceError>;
    const code = typeof e.code === "number" ? e.code : Status.UNKNOWN;
    const details = typeof e.details === "string" ? e.details : (err as Error).message ?? "";
    const rich = richStatusFromMetadata(e.metadata);
    return new GnomonError(code, details || rich?.message || "", rich ?? {});
  }
}

/** The gRPC status name of a numeric code (`UNKNOWN` for an unknown number). */
export function codeName(code: number): string {
  const names = Status as unknown as Record<number, string>;
  return names[code] ?? "UNKNOWN";
}

function formatError(code: number, details: string, rich: Partial<RichStatus>): string {
  let text = `${codeName(code)}: ${details}`;
  if (rich.reason) text += ` [${rich.reason}]`;
  if (rich.fieldViolations && rich.fieldViolations.length) {
    text += " (" + rich.fieldViolations.map((v) => `${v.field}: ${v.description}`).join("; ") + ")";
  }
  return text;
}

/**
 * Decodes the `grpc-status-details-bin` trailer of `metadata`, if present: null when it is absent or
 * does not parse.
 */
export function richStatusFromMetadata(metadata: Metadata | undefined | null): RichStatus | null {
  if (!metadata || typeof metadata.get !== "function") return null;
  const values = metadata.get(DETAILS_KEY);
  if (!values.length) return null;
  const raw = values[0];
  const buf = typeof raw === "string" ? Buffer.from(raw, "base64") : raw;
  try {
    return decodeStatusDetails(buf);
  } catch {
    return null;
  }
}

/** Why a handler's `ctx.signal` was aborted. */
export type CancelReason = "cancel_requested" | "refused" | "lease_lost" | "shutdown" | "start_to_close";

/**
 * The reason a cancelled attempt's `ctx.signal` is aborted with (so `ctx.signal.throwIfAborted()`
 * throws it). When a handler lets it escape, the worker reports PERMANENT for `cancel_requested`,
 * TRANSIENT for `shutdown` and `start_to_close`, and nothing at all for `refused`/`lease_lost` (the
 * attempt is no longer this worker's).
 */
export class CancelledError extends Error {
  readonly reason: CancelReason;
  constructor(reason: CancelReason, message?: string) {
    super(message ?? `attempt cancelled (${reason})`);
    this.name = "CancelledError";
    this.reason = reason;
  }
}

/** Throw from a handler: failure class TRANSIENT (retried with the job's backoff). Any error that no
 * other class matches is TRANSIENT too; this one says so explicitly. */
export class TransientError extends Error {
  constructor(message?: string) {
    super(message);
    this.name = "TransientError";
  }
}

/** Throw from a handler: failure class PERMANENT (never retried; the job goes to the dead-letter queue). */
export class PermanentError extends Error {
  constructor(message?: string) {
    super(message);
    this.name = "PermanentError";
  }
}

/** Throw from a handler when the effect may or may not have happened: failure class AMBIGUOUS
 * (retried only if the job is idempotent). */
export class AmbiguousError extends Error {
  constructor(message?: string) {
    super(message);
    this.name = "AmbiguousError";
  }
}

/**
 * Throw from a handler: failure class THROTTLED; the next attempt waits `retryAfterMs`
 * milliseconds (>= 0; sent as the result's `retry_after`).
 */
export class ThrottledError extends Error {
  readonly retryAfterMs: number;
  constructor(retryAfterMs: number, message?: string) {
    if (!(typeof retryAfterMs === "number") || !(retryAfterMs >= 0)) {
      throw new RangeError("retryAfterMs must be a non-negative number of milliseconds");
    }
    super(message ?? `throttled; retry after ${retryAfterMs} ms`);
    this.name = "ThrottledError";
    this.retryAfterMs = retryAfterMs;
  }
}
