/**
 * Mapping what a handler threw to the failure class reported for its attempt.
 */
import {
  AmbiguousError,
  CancelledError,
  PermanentError,
  ThrottledError,
  TransientError,
} from "./errors";

/** Failure classes a worker reports (names of the `gnomon.v1.FailureClass` enum values). */
export type FailureClassName =
  | "FAILURE_CLASS_TRANSIENT"
  | "FAILURE_CLASS_THROTTLED"
  | "FAILURE_CLASS_PERMANENT"
  | "FAILURE_CLASS_AMBIGUOUS";

/** Longest `error` text sent with a result (characters); the server truncates there too. */
export const MAX_ERROR_CHARS = 4096;

/** How a failed attempt is reported. */
export interface Failure {
  /** The class sent in `AttemptResult.failure_class`. */
  failureClass: FailureClassName;
  /** `"Name: message"`, at most {@link MAX_ERROR_CHARS} characters. */
  error: string;
  /** For THROTTLED: milliseconds sent as `retry_after`; otherwise null. */
  retryAfterMs: number | null;
}

/** `"Name: message"` (just the name when the message is empty), cut to `limit` characters (the
 * last one then being `…`). */
export function formatError(err: unknown, limit = MAX_ERROR_CHARS): string {
  let text: string;
  if (err instanceof Error) {
    text = err.message ? `${err.name}: ${err.message}` : err.name;
  } else {
    text = `Error: ${String(err)}`;
  }
  if (text.length > limit) text = text.slice(0, limit - 1) + "…";
  return text;
}

/**
 * Chooses the failure class of what a handler threw: PermanentError → PERMANENT, ThrottledError →
 * THROTTLED (with its `retryAfterMs`), AmbiguousError → AMBIGUOUS, TransientError → TRANSIENT,
 * CancelledError → PERMANENT for `cancel_requested` else TRANSIENT; anything else → TRANSIENT.
 * A DOMException `AbortError` thrown because of a cancelled `ctx.signal` counts as the signal's
 * CancelledError (pass that signal as `signal`).
 */
export function classifyError(err: unknown, signal?: AbortSignal): Failure {
  let cls: FailureClassName = "FAILURE_CLASS_TRANSIENT";
  let retryAfterMs: number | null = null;
  let cancel: CancelledError | null = null;
  if (err instanceof CancelledError) cancel = err;
  else if (signal?.aborted && isAbortError(err) && signal.reason instanceof CancelledError) cancel = signal.reason;
  if (err instanceof PermanentError) cls = "FAILURE_CLASS_PERMANENT";
  else if (err instanceof ThrottledError) {
    cls = "FAILURE_CLASS_THROTTLED";
    retryAfterMs = err.retryAfterMs;
  } else if (err instanceof AmbiguousError) cls = "FAILURE_CLASS_AMBIGUOUS";
  else if (err instanceof TransientError) cls = "FAILURE_CLASS_TRANSIENT";
  else if (cancel) cls = cancel.reason === "cancel_requested" ? "FAILURE_CLASS_PERMANENT" : "FAILURE_CLASS_TRANSIENT";
  return { failureClass: cls, error: formatError(err), retryAfterMs };
}

/** The cancellation an error stands for: the error itself when it is a CancelledError, the
 * signal's reason when it is an AbortError of an aborted `signal`; otherwise null. */
export function cancellationOf(err: unknown, signal?: AbortSignal): CancelledError | null {
  if (err instanceof CancelledError) return err;
  if (signal?.aborted && isAbortError(err) && signal.reason instanceof CancelledError) return signal.reason;
  return null;
}

function isAbortError(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as { name?: unknown }).name === "AbortError";
}
