// The worker continues an assignment's W3C trace context (docs/tracing.md): the handler runs in a
// "gnomon.handler" span whose parent is the delivery's span, and spans the handler starts (after
// awaits too) nest under it; an assignment without a context runs with no active span.
import { test } from "node:test";
import * as assert from "node:assert/strict";
import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import * as grpc from "@grpc/grpc-js";
import { HANDLER_SPAN, Worker, type JobContext } from "../src";
import { traceMetadata } from "../src/tracing";
import { FakeDispatcher, QUIET, until } from "./fake-dispatcher";

const TRACE_ID = "0af7651916cd43dd8448eb211c80319c";
const DELIVERY_SPAN = "b7ad6b7169203331";

test("a handler runs in a gnomon.handler span continuing the assignment's trace context", async () => {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(provider);
  const app = trace.getTracer("test.app");
  const seen = new Map<string, string | undefined>(); // job -> trace id of the active span, if any

  const fake = new FakeDispatcher();
  const traced = fake.ref();
  const plain = fake.ref();
  fake.script = {
    onHello: (s) => {
      fake.assign(s, traced, {}, 10_000, {
        traceContext: { traceparent: `00-${TRACE_ID}-${DELIVERY_SPAN}-01`, tracestate: "k=v" },
      });
      fake.assign(s, plain);
    },
  };
  await fake.start();
  const worker = new Worker({
    ...QUIET,
    dispatchers: [fake.address],
    queues: ["q"],
    concurrency: 2,
    handler: async (ctx: JobContext) => {
      await new Promise((r) => setTimeout(r, 2)); // the context survives an await
      seen.set(ctx.job, trace.getActiveSpan()?.spanContext().traceId);
      if (ctx.traceContext.traceparent) {
        await app.startActiveSpan("user.work", async (span) => {
          await new Promise((r) => setTimeout(r, 1));
          span.end();
        });
      }
    },
  });
  const run = worker.run();
  await until(() => fake.items("results").length === 2, 5000, "2 results");
  worker.drain();
  await run;
  fake.stop();

  assert.equal(seen.get(traced.job!), TRACE_ID);
  assert.equal(seen.get(plain.job!), undefined); // no context: no span, none active
  const spans = exporter.getFinishedSpans();
  assert.deepEqual(spans.map((s) => s.name).sort(), [HANDLER_SPAN, "user.work"]);
  const handler = spans.find((s) => s.name === HANDLER_SPAN)!;
  const user = spans.find((s) => s.name === "user.work")!;
  assert.equal(handler.spanContext().traceId, TRACE_ID);
  assert.equal(handler.parentSpanContext?.spanId, DELIVERY_SPAN);
  assert.equal(handler.spanContext().traceState?.get("k"), "v");
  assert.equal(handler.attributes["gnomon.job"], traced.job);
  assert.equal(handler.attributes["gnomon.attempt"], 1);
  assert.equal(user.spanContext().traceId, TRACE_ID);
  assert.equal(user.parentSpanContext?.spanId, handler.spanContext().spanId);
  await provider.shutdown();
});

// (uses the context manager the first test registered: tests of a file run in order)
test("client calls carry the active span's traceparent; none without an active span", () => {
  const provider = new BasicTracerProvider();
  const md = new grpc.Metadata();
  md.set("authorization", "Bearer k");
  assert.equal(traceMetadata(md), md); // no active span: unchanged
  const tracer = provider.getTracer("test.app");
  tracer.startActiveSpan("user.request", (span) => {
    const out = traceMetadata(md);
    const sc = span.spanContext();
    assert.deepEqual(out.get("traceparent"), [`00-${sc.traceId}-${sc.spanId}-01`]);
    assert.deepEqual(out.get("authorization"), ["Bearer k"]);
    assert.deepEqual(md.get("traceparent"), []); // the client's own metadata is left alone
    span.end();
  });
});
