/**
 * Loading the Gnomon contract at run time: the `.proto` files shipped in this package's `proto/`
 * directory (copied from the repository's `proto/` at build time), loaded with `@grpc/proto-loader`
 * under exactly the options the types in `src/gen/` were generated with (camelCase fields, 64-bit
 * integers as decimal strings, enums as their names, defaults filled in, `bytes` as Buffer, and a
 * virtual field naming the member set of each `oneof`).
 */
import * as fs from "node:fs";
import * as path from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import * as protobuf from "protobufjs";
import type { ProtoGrpcType as ClusterProto } from "./gen/cluster_service";
import type { ProtoGrpcType as DeadLetterProto } from "./gen/dead_letter_service";
import type { ProtoGrpcType as JobProto } from "./gen/job_service";
import type { ProtoGrpcType as QueueProto } from "./gen/queue_service";
import type { ProtoGrpcType as ScheduleProto } from "./gen/schedule_service";
import type { ProtoGrpcType as WorkerProto } from "./gen/worker_service";
import type { RichStatus } from "./errors";

/** Directory of the shipped `.proto` files (`<package>/proto`). */
export const PROTO_DIR = path.resolve(__dirname, "..", "..", "proto");

/** The proto-loader options the generated types assume. */
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: false,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  bytes: Buffer,
  includeDirs: [PROTO_DIR],
};

/** Every service and message of the loaded contract, typed from the generated definitions. */
export type Gnomon = ClusterProto & DeadLetterProto & JobProto & QueueProto & ScheduleProto & WorkerProto;

function protoFiles(): string[] {
  const dir = path.join(PROTO_DIR, "gnomon", "v1");
  return fs
    .readdirSync(dir)
    .filter((f) => f.endsWith(".proto"))
    .sort()
    .map((f) => path.join("gnomon", "v1", f));
}

let loaded: Gnomon | null = null;

/** The loaded contract (loaded once, on first use). Throws if the package's `proto/` is missing. */
export function gnomon(): Gnomon {
  if (loaded === null) {
    const def = protoLoader.loadSync(protoFiles(), LOADER_OPTIONS);
    loaded = grpc.loadPackageDefinition(def) as unknown as Gnomon;
  }
  return loaded;
}

let statusTypes: { status: protobuf.Type; root: protobuf.Root } | null = null;

function statusRoot(): { status: protobuf.Type; root: protobuf.Root } {
  if (statusTypes === null) {
    const root = new protobuf.Root();
    root.resolvePath = (_origin: string, target: string) =>
      target.startsWith("google/protobuf/") ? target : path.join(PROTO_DIR, target);
    root.loadSync(["google/rpc/status.proto", "google/rpc/error_details.proto"], { keepCase: false });
    root.resolveAll();
    statusTypes = { status: root.lookupType("google.rpc.Status"), root };
  }
  return statusTypes;
}

interface AnyLike {
  typeUrl?: string;
  type_url?: string;
  value?: Uint8Array;
}

/**
 * Decodes a serialized `google.rpc.Status` (the `grpc-status-details-bin` trailer) into the parts
 * the SDK understands: the first `ErrorInfo`, every `BadRequest` field violation and the first
 * `RetryInfo`. Other detail types are ignored. Throws on bytes that do not parse.
 */
export function decodeStatusDetails(buf: Uint8Array): RichStatus {
  const { status, root } = statusRoot();
  const msg = status.decode(buf) as unknown as { message?: string; details?: AnyLike[] };
  const out: RichStatus = {
    reason: null,
    domain: null,
    metadata: {},
    fieldViolations: [],
    retryDelayMs: null,
    message: msg.message ?? "",
  };
  let sawInfo = false;
  for (const any of msg.details ?? []) {
    const url = any.typeUrl ?? any.type_url ?? "";
    const name = url.slice(url.lastIndexOf("/") + 1);
    const value = any.value ?? new Uint8Array();
    if (name === "google.rpc.ErrorInfo" && !sawInfo) {
      sawInfo = true;
      const info = root.lookupType(name).decode(value) as unknown as {
        reason?: string;
        domain?: string;
        metadata?: Record<string, string>;
      };
      out.reason = info.reason || null;
      out.domain = info.domain || null;
      out.metadata = { ...(info.metadata ?? {}) };
    } else if (name === "google.rpc.BadRequest") {
      const bad = root.lookupType(name).decode(value) as unknown as {
        fieldViolations?: { field?: string; description?: string }[];
      };
      for (const v of bad.fieldViolations ?? []) {
        out.fieldViolations.push({ field: v.field ?? "", description: v.description ?? "" });
      }
    } else if (name === "google.rpc.RetryInfo" && out.retryDelayMs === null) {
      const info = root.lookupType(name).decode(value) as unknown as {
        retryDelay?: { seconds?: number | { toNumber(): number }; nanos?: number };
      };
      const d = info.retryDelay;
      if (d) {
        const s = typeof d.seconds === "object" && d.seconds !== null ? d.seconds.toNumber() : Number(d.seconds ?? 0);
        out.retryDelayMs = s * 1000 + Math.floor((d.nanos ?? 0) / 1e6);
      }
    }
  }
  return out;
}

/** Encodes a `google.rpc.Status` from a plain object (for tests and tools): `{code, message,
 * details: [{typeName, value: <plain object of that type>}]}`. */
export function encodeStatusDetails(status: {
  code: number;
  message: string;
  details: { typeName: string; value: Record<string, unknown> }[];
}): Buffer {
  const { status: type, root } = statusRoot();
  const details = status.details.map((d) => {
    const t = root.lookupType(d.typeName);
    // the well-known Any is protobufjs's built-in definition, whose field names keep their case
    return { type_url: `type.googleapis.com/${d.typeName}`, value: t.encode(t.fromObject(d.value)).finish() };
  });
  return Buffer.from(type.encode(type.fromObject({ code: status.code, message: status.message, details })).finish());
}

/** Milliseconds of a `google.protobuf.Duration` (as loaded: seconds a decimal string), or null. */
export function durationMs(d: { seconds?: string | number | null; nanos?: number | null } | null | undefined): number | null {
  if (!d) return null;
  return Number(d.seconds ?? 0) * 1000 + Math.floor((d.nanos ?? 0) / 1e6);
}

/** A `google.protobuf.Duration` of `ms` milliseconds (>= 0). */
export function toDuration(ms: number): { seconds: string; nanos: number } {
  const whole = Math.floor(ms / 1000);
  return { seconds: String(whole), nanos: Math.round((ms - whole * 1000) * 1e6) };
}

/** A Date of a `google.protobuf.Timestamp`, or null when unset. */
export function toDate(t: { seconds?: string | number | null; nanos?: number | null } | null | undefined): Date | null {
  if (!t) return null;
  return new Date(Number(t.seconds ?? 0) * 1000 + Math.floor((t.nanos ?? 0) / 1e6));
}

/** A `google.protobuf.Timestamp` of a Date. */
export function toTimestamp(d: Date): { seconds: string; nanos: number } {
  const ms = d.getTime();
  const s = Math.floor(ms / 1000);
  return { seconds: String(s), nanos: (ms - s * 1000) * 1e6 };
}
