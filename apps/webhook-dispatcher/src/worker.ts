/**
 * The BullMQ worker of the `webhook-deliveries` queue. It runs the deliver handler and maps its
 * result onto the job: a failed attempt that will be retried fails the job so the custom `webhook`
 * backoff delays it until the next_attempt_at written to PostgreSQL; a delivery that is not due yet
 * (or whose attempt is in flight elsewhere) is moved back to delayed without using an attempt.
 */
import type { Db, SecretBox } from "@botdir/db";
import {
  type Clock,
  type DeliveryJobData,
  describeError,
  JOBS,
  type Logger,
  QUEUES,
  type Resolver,
} from "@botdir/schema";
import { DelayedError, type Job, Worker } from "bullmq";
import type { Redis } from "ioredis";
import { createDeliverHandler, type DeliverResult } from "./deliver.handler.js";
import { createDeliveryStore } from "./deliveries.js";
import { createWebhookSender } from "./http-client.js";
import type { AttemptRecorder } from "./metrics.js";
import { AttemptFailed, createBackoffStrategy, type RetryDelays } from "./schedule.js";

export interface DispatcherConfig {
  /** BullMQ prefix, QUEUE_PREFIX (DEFAULT_QUEUE_PREFIX in production). */
  queuePrefix: string;
  concurrency: number;
  timeoutMs: number;
  retryDelays: RetryDelays;
  allowPrivateTargets: boolean;
  lockDurationMs: number;
  stalledIntervalMs: number;
  /**
   * Most attempts whose claims (or records) share one statement (DISPATCHER_DB_BATCH_MAX); 1 sends
   * one statement per attempt. Default 1.
   */
  dbBatchMax?: number;
  /** Claim statements (and record statements) executing at once when batching (default 2). */
  dbBatchInFlight?: number;
  /** Tests inject DNS answers. */
  resolver?: Resolver;
}

export interface DispatcherDeps {
  db: Db;
  /**
   * Redis for the worker (maxRetriesPerRequest: null, no auto-pipelining); BullMQ duplicates it
   * for its blocking connection. The caller closes it.
   */
  redis: Redis;
  secrets: SecretBox;
  clock: Clock;
  logger: Logger;
  /** Prometheus series of this replica (attempt outcomes, durations, delivery latency). */
  metrics?: AttemptRecorder;
}

export type DispatcherWorker = Worker<DeliveryJobData, DeliverResult>;

/**
 * An attempt's claim in PostgreSQL outlives the HTTP timeout by one lock duration: a live worker
 * always records its outcome before anyone else may take over, and a dead worker's attempt becomes
 * claimable about when BullMQ notices the stalled job.
 */
export function leaseMs(config: Pick<DispatcherConfig, "timeoutMs" | "lockDurationMs">): number {
  return config.timeoutMs + config.lockDurationMs;
}

export function createDispatcherWorker(deps: DispatcherDeps, config: DispatcherConfig): DispatcherWorker {
  const send = createWebhookSender({
    timeoutMs: config.timeoutMs,
    allowPrivateTargets: config.allowPrivateTargets,
    ...(config.resolver ? { resolver: config.resolver } : {}),
  });
  const deliver = createDeliverHandler({
    db: deps.db,
    secrets: deps.secrets,
    clock: deps.clock,
    logger: deps.logger,
    retryDelays: config.retryDelays,
    leaseMs: leaseMs(config),
    metrics: deps.metrics,
    send,
    store: createDeliveryStore(deps.db, {
      maxBatch: config.dbBatchMax ?? 1,
      maxInFlight: config.dbBatchInFlight ?? 2,
    }),
  });

  const processor = async (
    job: Job<DeliveryJobData, DeliverResult>,
    token?: string,
  ): Promise<DeliverResult> => {
    if (!(job.name in JOBS)) {
      deps.logger.error({ jobId: job.id, name: job.name }, "unknown job name on the webhook queue; dropped");
      return { kind: "done", reason: "unknown_job" };
    }
    const result = await deliver(job.data);
    switch (result.kind) {
      case "wait":
        await job.moveToDelayed(result.until.getTime(), token);
        throw new DelayedError();
      case "retry":
        throw new AttemptFailed(result.attemptNumber, result.nextAttemptAt, result.errorKind ?? "unknown");
      default:
        return result;
    }
  };

  const worker: DispatcherWorker = new Worker(QUEUES.webhookDeliveries, processor, {
    connection: deps.redis,
    prefix: config.queuePrefix,
    concurrency: config.concurrency,
    lockDuration: config.lockDurationMs,
    stalledInterval: config.stalledIntervalMs,
    settings: {
      backoffStrategy: createBackoffStrategy(config.retryDelays, () => deps.clock.now().getTime()),
    },
  });
  // Idle keep-alive connections to receivers go once the worker has finished its last attempt.
  worker.on("closed", () => send.close());
  worker.on("error", (error) => deps.logger.error({ err: describeError(error) }, "webhook worker error"));
  worker.on("failed", (job, error) => {
    const outOfAttempts = job !== undefined && job.attemptsMade >= (job.opts.attempts ?? 1);
    if (error instanceof AttemptFailed || error.name === "AttemptFailed") {
      // The attempt itself was logged by the handler. BullMQ gives up on the job only when errors
      // that used no attempt ate its tries; the delivery is still pending in PostgreSQL.
      if (outOfAttempts) {
        deps.logger.warn(
          { jobId: job?.id },
          "job out of BullMQ tries; the outbox relay will hand it off again",
        );
      }
      return;
    }
    deps.logger.error(
      { jobId: job?.id, err: describeError(error), final: outOfAttempts },
      "webhook job failed",
    );
  });
  return worker;
}
