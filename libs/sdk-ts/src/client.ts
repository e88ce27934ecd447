/**
 * The Client: thin typed wrappers over the API's JobService, ScheduleService, DeadLetterService and
 * QueueService. Requests and responses are the generated message types (src/gen, from the protos);
 * the client fills in `parent` / full resource names from its namespace, a fresh `request_id` on
 * creates that lack one, and turns failed calls into {@link GnomonError} (code, reason, field
 * violations, retry delay). Every method returns a Promise.
 */
import { randomUUID } from "node:crypto";
import * as grpc from "@grpc/grpc-js";
import type { CreateJobResponse__Output } from "./gen/gnomon/v1/CreateJobResponse";
import type { GetJobRequest } from "./gen/gnomon/v1/GetJobRequest";
import type { GetJobResponse__Output } from "./gen/gnomon/v1/GetJobResponse";
import type { RescheduleJobResponse__Output } from "./gen/gnomon/v1/RescheduleJobResponse";
import type { CreateScheduleResponse__Output } from "./gen/gnomon/v1/CreateScheduleResponse";
import type { GetScheduleRequest } from "./gen/gnomon/v1/GetScheduleRequest";
import type { GetScheduleResponse__Output } from "./gen/gnomon/v1/GetScheduleResponse";
import type { ResumeScheduleRequest } from "./gen/gnomon/v1/ResumeScheduleRequest";
import type { ResumeScheduleResponse__Output } from "./gen/gnomon/v1/ResumeScheduleResponse";
import type { DeleteScheduleRequest } from "./gen/gnomon/v1/DeleteScheduleRequest";
import type { DeleteScheduleResponse__Output } from "./gen/gnomon/v1/DeleteScheduleResponse";
import type { GetQueueRequest } from "./gen/gnomon/v1/GetQueueRequest";
import type { GetQueueResponse__Output } from "./gen/gnomon/v1/GetQueueResponse";
import type { SetQueueRateLimitRequest } from "./gen/gnomon/v1/SetQueueRateLimitRequest";
import type { SetQueueRateLimitResponse__Output } from "./gen/gnomon/v1/SetQueueRateLimitResponse";
import type { BatchCreateJobsRequest } from "./gen/gnomon/v1/BatchCreateJobsRequest";
import type { BatchCreateJobsResponse__Output } from "./gen/gnomon/v1/BatchCreateJobsResponse";
import type { CancelJobRequest } from "./gen/gnomon/v1/CancelJobRequest";
import type { CancelJobResponse__Output } from "./gen/gnomon/v1/CancelJobResponse";
import type { CreateJobRequest } from "./gen/gnomon/v1/CreateJobRequest";
import type { CreateScheduleRequest } from "./gen/gnomon/v1/CreateScheduleRequest";
import type { DeadLetterServiceClient } from "./gen/gnomon/v1/DeadLetterService";
import type { Job__Output } from "./gen/gnomon/v1/Job";
import type { JobServiceClient } from "./gen/gnomon/v1/JobService";
import type { ListDeadLettersRequest } from "./gen/gnomon/v1/ListDeadLettersRequest";
import type { ListDeadLettersResponse__Output } from "./gen/gnomon/v1/ListDeadLettersResponse";
import type { ListJobAttemptsResponse__Output } from "./gen/gnomon/v1/ListJobAttemptsResponse";
import type { ListJobsRequest } from "./gen/gnomon/v1/ListJobsRequest";
import type { ListJobsResponse__Output } from "./gen/gnomon/v1/ListJobsResponse";
import type { ListSchedulesRequest } from "./gen/gnomon/v1/ListSchedulesRequest";
import type { ListSchedulesResponse__Output } from "./gen/gnomon/v1/ListSchedulesResponse";
import type { PauseScheduleResponse__Output } from "./gen/gnomon/v1/PauseScheduleResponse";
import type { Queue__Output } from "./gen/gnomon/v1/Queue";
import type { QueueServiceClient } from "./gen/gnomon/v1/QueueService";
import type { ReplayDeadLettersRequest } from "./gen/gnomon/v1/ReplayDeadLettersRequest";
import type { ReplayDeadLettersResponse__Output } from "./gen/gnomon/v1/ReplayDeadLettersResponse";
import type { RescheduleJobRequest } from "./gen/gnomon/v1/RescheduleJobRequest";
import type { Schedule, Schedule__Output } from "./gen/gnomon/v1/Schedule";
import type { ScheduleServiceClient } from "./gen/gnomon/v1/ScheduleService";
import type { TriggerScheduleRequest } from "./gen/gnomon/v1/TriggerScheduleRequest";
import type { TriggerScheduleResponse__Output } from "./gen/gnomon/v1/TriggerScheduleResponse";
import { channelCredentials, channelOptions, resolveConnection, type Connection, type ConnectionOptions } from "./connection";
import { GnomonError } from "./errors";
import { gnomon, toDuration } from "./proto";
import { traceMetadata } from "./tracing";

/** Options of a {@link Client}: connection settings (connection.ts) plus a default call timeout. */
export interface ClientOptions extends ConnectionOptions {
  /** Deadline of each call in milliseconds (default 30000). */
  timeoutMs?: number;
}

/** What {@link Client.createJob} takes: a CreateJobRequest without `parent`/`queue`/`payload`, with
 * `delay` also accepted as milliseconds (`delayMs`). */
export type CreateJobOptions = Omit<CreateJobRequest, "parent" | "queue" | "payload"> & { delayMs?: number };

type Callback<T> = (err: grpc.ServiceError | null, value?: T) => void;
type Method<Req, Res> = (req: Req, md: grpc.Metadata, opts: grpc.CallOptions, cb: Callback<Res>) => unknown;

/**
 * A connection to the Gnomon API (address, namespace and credentials resolved as the Python SDK
 * does). Close it with {@link close}. Errors: every method rejects with a {@link GnomonError}.
 */
export class Client {
  readonly connection: Connection;
  /** `namespaces/{namespace}`. */
  readonly parent: string;
  readonly jobs: JobServiceClient;
  readonly schedules: ScheduleServiceClient;
  readonly deadLetters: DeadLetterServiceClient;
  readonly queues: QueueServiceClient;
  private readonly timeoutMs: number;
  private readonly md = new grpc.Metadata();

  constructor(opts: ClientOptions = {}) {
    this.connection = resolveConnection(opts);
    this.parent = `namespaces/${this.connection.namespace}`;
    this.timeoutMs = opts.timeoutMs ?? 30_000;
    const v1 = gnomon().gnomon.v1;
    const creds = channelCredentials(this.connection);
    const options = channelOptions(this.connection, { "grpc.max_receive_message_length": 64 * 1024 * 1024 });
    const addr = this.connection.address;
    this.jobs = new v1.JobService(addr, creds, options);
    this.schedules = new v1.ScheduleService(addr, creds, options);
    this.deadLetters = new v1.DeadLetterService(addr, creds, options);
    this.queues = new v1.QueueService(addr, creds, options);
  }

  /** Closes the channels. */
  close(): void {
    for (const c of [this.jobs, this.schedules, this.deadLetters, this.queues]) c.close();
  }

  private call<Req, Res>(client: grpc.Client, method: Method<Req, Res>, req: Req): Promise<Res> {
    const deadline = new Date(Date.now() + this.timeoutMs);
    return new Promise((resolve, reject) => {
      // the caller's trace context, if a span is active (tracing.ts, docs/tracing.md)
      method.call(client, req, traceMetadata(this.md), { deadline }, (err, res) => {
        if (err) reject(GnomonError.fromServiceError(err));
        else resolve(res as Res);
      });
    });
  }

  /** Full name of a job id (a full name is returned unchanged). */
  jobName(job: string): string {
    return job.includes("/") ? job : `${this.parent}/jobs/${job}`;
  }

  /** Full name of a schedule id (a full name is returned unchanged). */
  scheduleName(schedule: string): string {
    return schedule.includes("/") ? schedule : `${this.parent}/schedules/${schedule}`;
  }

  // -- jobs ------------------------------------------------------------------------------------

  /** Creates a job on `queue` with `payload` (bytes, or a string sent as UTF-8). A `requestId` is
   * generated when none is given, so a retried call with the same options is deduplicated. */
  async createJob(queue: string, payload: Uint8Array | string = "", options: CreateJobOptions = {}): Promise<Job__Output> {
    const { delayMs, ...rest } = options;
    const req: CreateJobRequest = {
      ...rest,
      parent: this.parent,
      queue,
      payload: typeof payload === "string" ? Buffer.from(payload, "utf8") : Buffer.from(payload),
      requestId: rest.requestId || randomUUID(),
    };
    if (delayMs !== undefined) req.delay = toDuration(delayMs);
    const res = await this.call<CreateJobRequest, CreateJobResponse__Output>(this.jobs, this.jobs.CreateJob, req);
    return res.job!;
  }

  /** Creates up to 1000 jobs atomically (all or none; field violations name `requests[i].field`).
   * Each request lacking a `requestId` gets a fresh one, so retrying the whole call is safe when the
   * same request objects are passed again (they are updated in place with their ids). `payload` is
   * bytes (a Buffer; a string here means base64, as in the generated CreateJobRequest type). */
  async createJobs(requests: CreateJobRequest[]): Promise<Job__Output[]> {
    for (const r of requests) if (!r.requestId) r.requestId = randomUUID();
    const req: BatchCreateJobsRequest = { parent: this.parent, requests };
    return (await this.call<BatchCreateJobsRequest, BatchCreateJobsResponse__Output>(this.jobs, this.jobs.BatchCreateJobs, req)).jobs;
  }

  /** Reads a job (id or full name). */
  async getJob(job: string): Promise<Job__Output> {
    return (await this.call<GetJobRequest, GetJobResponse__Output>(this.jobs, this.jobs.GetJob, { name: this.jobName(job) })).job!;
  }

  /** Lists jobs of the namespace (one page; pass `pageToken` for the next). */
  listJobs(req: Omit<ListJobsRequest, "parent"> = {}): Promise<ListJobsResponse__Output> {
    return this.call(this.jobs, this.jobs.ListJobs, { ...req, parent: this.parent });
  }

  /** Lists the attempts of a job (one page). */
  listJobAttempts(job: string, pageSize = 100, pageToken = ""): Promise<ListJobAttemptsResponse__Output> {
    return this.call(this.jobs, this.jobs.ListJobAttempts, { parent: this.jobName(job), pageSize, pageToken });
  }

  /** Cancels a job (see CancelOutcome in the response). */
  cancelJob(job: string, req: Omit<CancelJobRequest, "name"> = {}): Promise<CancelJobResponse__Output> {
    return this.call(this.jobs, this.jobs.CancelJob, { ...req, name: this.jobName(job) });
  }

  /** Moves a scheduled job to a new time (`scheduleTime`, `delay`, or `delayMs`). */
  async rescheduleJob(job: string, req: Omit<RescheduleJobRequest, "name"> & { delayMs?: number }): Promise<Job__Output> {
    const { delayMs, ...rest } = req;
    const full: RescheduleJobRequest = { ...rest, name: this.jobName(job) };
    if (delayMs !== undefined) full.delay = toDuration(delayMs);
    return (await this.call<RescheduleJobRequest, RescheduleJobResponse__Output>(this.jobs, this.jobs.RescheduleJob, full)).job!;
  }

  // -- schedules -------------------------------------------------------------------------------

  /** Creates a schedule (`scheduleId` optional; a `requestId` is generated when absent). */
  async createSchedule(schedule: Schedule, opts: Omit<CreateScheduleRequest, "parent" | "schedule"> = {}): Promise<Schedule__Output> {
    const req: CreateScheduleRequest = { ...opts, parent: this.parent, schedule, requestId: opts.requestId || randomUUID() };
    return (await this.call<CreateScheduleRequest, CreateScheduleResponse__Output>(this.schedules, this.schedules.CreateSchedule, req)).schedule!;
  }

  /** Reads a schedule (id or full name). */
  async getSchedule(schedule: string): Promise<Schedule__Output> {
    return (await this.call<GetScheduleRequest, GetScheduleResponse__Output>(this.schedules, this.schedules.GetSchedule, { name: this.scheduleName(schedule) })).schedule!;
  }

  /** Lists schedules of the namespace (one page). */
  listSchedules(req: Omit<ListSchedulesRequest, "parent"> = {}): Promise<ListSchedulesResponse__Output> {
    return this.call(this.schedules, this.schedules.ListSchedules, { ...req, parent: this.parent });
  }

  /** Pauses a schedule (its pending occurrences are withdrawn: see `withdrawnJobs`). */
  pauseSchedule(schedule: string): Promise<PauseScheduleResponse__Output> {
    return this.call(this.schedules, this.schedules.PauseSchedule, { name: this.scheduleName(schedule) });
  }

  /** Resumes a paused schedule. */
  async resumeSchedule(schedule: string): Promise<Schedule__Output> {
    return (await this.call<ResumeScheduleRequest, ResumeScheduleResponse__Output>(this.schedules, this.schedules.ResumeSchedule, { name: this.scheduleName(schedule) })).schedule!;
  }

  /** Deletes a schedule (`etag` optional: refuse if it changed); resolves to the number of pending
   * occurrence jobs withdrawn. */
  async deleteSchedule(schedule: string, etag = ""): Promise<number> {
    return (await this.call<DeleteScheduleRequest, DeleteScheduleResponse__Output>(this.schedules, this.schedules.DeleteSchedule, { name: this.scheduleName(schedule), etag })).withdrawnJobs;
  }

  /** Runs a schedule now (a `requestId` is generated when absent). */
  triggerSchedule(schedule: string, req: Omit<TriggerScheduleRequest, "name"> = {}): Promise<TriggerScheduleResponse__Output> {
    const full: TriggerScheduleRequest = { ...req, name: this.scheduleName(schedule), requestId: req.requestId || randomUUID() };
    return this.call(this.schedules, this.schedules.TriggerSchedule, full);
  }

  // -- dead letters ----------------------------------------------------------------------------

  /** Lists dead letters of the namespace (one page). */
  listDeadLetters(req: Omit<ListDeadLettersRequest, "parent"> = {}): Promise<ListDeadLettersResponse__Output> {
    return this.call(this.deadLetters, this.deadLetters.ListDeadLetters, { ...req, parent: this.parent });
  }

  /** Replays dead letters (`maxRate`, `maxJobs` and `reason` are required by the server; a
   * `requestId` is generated when absent). */
  replayDeadLetters(req: Omit<ReplayDeadLettersRequest, "parent">): Promise<ReplayDeadLettersResponse__Output> {
    const full: ReplayDeadLettersRequest = { ...req, parent: this.parent, requestId: req.requestId || randomUUID() };
    return this.call(this.deadLetters, this.deadLetters.ReplayDeadLetters, full);
  }

  // -- queues ----------------------------------------------------------------------------------

  /** Reads a queue (breaker, retry budget, backlog, rate limit). */
  async getQueue(queue: string): Promise<Queue__Output> {
    return (await this.call<GetQueueRequest, GetQueueResponse__Output>(this.queues, this.queues.GetQueue, { name: `${this.parent}/queues/${queue}` })).queue!;
  }

  /** Sets (`rate` > 0, dispatches per second) or removes (0) a queue's rate limit. */
  async setQueueRateLimit(queue: string, rate: number, burst = 0): Promise<Queue__Output> {
    return (await this.call<SetQueueRateLimitRequest, SetQueueRateLimitResponse__Output>(this.queues, this.queues.SetQueueRateLimit, { name: `${this.parent}/queues/${queue}`, rate, burst })).queue!;
  }
}
