/**
 * OpenTelemetry in the worker (`@opentelemetry/api` only; the application registers the tracer
 * provider, context manager and exporters it wants; docs/tracing.md).
 *
 * When an assignment carries a W3C trace context (`Assignment.trace_context`, set when the job is
 * traced and the dispatcher exports traces), the handler runs inside a `gnomon.handler` span (kind
 * CONSUMER) whose parent is that context, made active, so spans the handler starts nest under it;
 * a handler that throws or rejects ends it with an error status. Without a registered provider the
 * span is a no-op; an assignment without a trace context costs one check.
 *
 * Client: {@link traceMetadata} adds the W3C `traceparent` / `tracestate` of the caller's active span
 * to a call's metadata, so a job created inside a span joins that trace.
 */
import {
  createTraceState,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Context,
  type Span,
} from "@opentelemetry/api";
import type * as grpc from "@grpc/grpc-js";
import type { JobContext } from "./context";

/** Name of the span a traced handler runs in. */
export const HANDLER_SPAN = "gnomon.handler";

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** The context holding the remote span of a W3C carrier (`traceparent` [+ `tracestate`]), or null
 * when there is none or it does not parse (version ff, all-zero ids). */
export function parentContext(carrier: Readonly<Record<string, string>>): Context | null {
  const m = TRACEPARENT.exec((carrier.traceparent ?? "").trim());
  if (!m || m[1] === "ff" || (m[1] === "00" && m[5] !== undefined)) return null;
  const spanContext = {
    traceId: m[2],
    spanId: m[3],
    traceFlags: parseInt(m[4], 16) & 1,
    isRemote: true,
    traceState: carrier.tracestate ? createTraceState(carrier.tracestate) : undefined,
  };
  if (!trace.isSpanContextValid(spanContext)) return null;
  return trace.setSpanContext(ROOT_CONTEXT, spanContext);
}

function failed(span: Span, err: unknown): void {
  if (err instanceof Error) span.recordException(err);
  span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
  span.end();
}

/** Runs `run` (the handler of `ctx`) inside a `gnomon.handler` span continuing `ctx.traceContext`,
 * or directly when the attempt carries none; resolves or rejects as the handler does. */
export function runHandler(ctx: JobContext, run: () => unknown): Promise<unknown> {
  const parent = parentContext(ctx.traceContext);
  if (parent === null) {
    try {
      return Promise.resolve(run());
    } catch (err) {
      return Promise.reject(err);
    }
  }
  const attributes = {
    "gnomon.job": ctx.job,
    "gnomon.attempt": ctx.attempt,
    "gnomon.queue": ctx.queue,
    "gnomon.namespace": ctx.job.split("/")[1] ?? "",
    "gnomon.fencing_token": Number(ctx.fencingToken),
  };
  const tracer = trace.getTracer("gnomon.sdk");
  return tracer.startActiveSpan(HANDLER_SPAN, { kind: SpanKind.CONSUMER, attributes }, parent, (span) => {
    let out: Promise<unknown>;
    try {
      out = Promise.resolve(run()); // startActiveSpan made the span active for it
    } catch (err) {
      failed(span, err);
      return Promise.reject(err);
    }
    return out.then(
      (v) => {
        span.end();
        return v;
      },
      (err: unknown) => {
        failed(span, err);
        throw err;
      },
    );
  });
}

/** `md`, plus the W3C `traceparent` (and `tracestate`) of the active span when there is a valid one
 * (a copy; `md` itself is never changed). */
export function traceMetadata(md: grpc.Metadata): grpc.Metadata {
  const sc = trace.getActiveSpan()?.spanContext();
  if (!sc || !trace.isSpanContextValid(sc)) return md;
  const out = md.clone();
  out.set("traceparent", `00-${sc.traceId}-${sc.spanId}-${sc.traceFlags & 1 ? "01" : "00"}`);
  const state = sc.traceState?.serialize();
  if (state) out.set("tracestate", state);
  return out;
}
